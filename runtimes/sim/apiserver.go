package sim

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// startAPIServer runs one kube-apiserver in this process with the given
// flags until ctx ends; errc receives its end. It is built the way
// kube-apiserver's own test server builds one: a component registry of
// its own (the command's set-up can run once per process only), flags
// parsed into a fresh flag set.
func startAPIServer(ctx context.Context, node string, args []string) (<-chan error, error) {
	featureGate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	effectiveVersion := compatibility.DefaultBuildEffectiveVersion()
	registry := basecompatibility.NewComponentGlobalsRegistry()
	if err := registry.Register(basecompatibility.DefaultKubeComponent, effectiveVersion, featureGate); err != nil {
		return nil, err
	}
	s := options.NewServerRunOptions()
	s.Options.GenericServerRunOptions.ComponentGlobalsRegistry = registry
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if err := registry.Set(); err != nil {
		return nil, err
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, fmt.Errorf("kube-apiserver options: %v", errs)
	}
	// An API server's identity (its Lease in kube-system) is a hash of
	// its host name. In one process every server would take the same
	// one and they would fight over it; each gets its node's name, as on
	// its own machine. The hook is process-wide, and servers are built
	// one at a time.
	genericapiserver.SetHostnameFuncForTests(node)
	config, err := app.NewConfig(completed)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver config: %w", err)
	}
	cc, err := config.Complete()
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver config: %w", err)
	}
	server, err := app.CreateServerChain(cc)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- prepared.Run(ctx) }()
	return errc, nil
}
