package systemd

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcompile/kcompile/compiler/ir"
)

// cniManifests are the cluster objects of the chosen CNI plugin at the
// spec's version: its DaemonSet (and controllers), RBAC, configuration
// and, where the plugin needs them, CustomResourceDefinitions.
func cniManifests(c *ir.Cluster) ([]runtime.Object, error) {
	switch c.Network.CNI.Plugin {
	case "flannel":
		return flannelManifests(c), nil
	case "calico":
		return calicoManifests(c), nil
	case "cilium":
		return ciliumManifests(c), nil
	}
	return nil, fmt.Errorf("unknown CNI plugin %q", c.Network.CNI.Plugin)
}
