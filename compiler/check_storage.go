package compiler

import (
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeNoDefaultClass   = "KC0901"
	CodeManyDefaults     = "KC0902"
	CodeUnknownDriver    = "KC0903"
	CodeTopologyBinding  = "KC0904"
	CodeDriverName       = "KC0905"
	CodeStorageClassName = "KC0906"
)

func storageFamily() family {
	return family{name: "storage", check: checkStorage, rules: []diag.Rule{
		rule(CodeNoDefaultClass, diag.Error, "StorageClasses exist but none is the default"),
		rule(CodeManyDefaults, diag.Error, "more than one StorageClass is the default"),
		rule(CodeUnknownDriver, diag.Error, "a StorageClass names a CSI driver that is not declared"),
		rule(CodeTopologyBinding, diag.Warning, "a topology-aware driver's StorageClass binds volumes immediately"),
		rule(CodeDriverName, diag.Error, "a CSI driver name is not a DNS-1123 subdomain of at most 63 characters"),
		rule(CodeStorageClassName, diag.Error, "a StorageClass name is not a DNS-1123 subdomain"),
	}}
}

func checkStorage(m *model) {
	st := m.spec.Storage
	for _, name := range sortedKeys(st.Drivers) {
		if !isDNSSubdomain(name) || len(name) > 63 {
			m.reportKey(CodeDriverName, "storage.drivers."+quoteLabel(name), fmt.Sprintf("CSI driver name %s is not a DNS-1123 subdomain of at most 63 characters", diag.Quote(name)),
				`use the driver's registered name, such as "rbd.csi.ceph.com"`)
		}
	}
	var defaults []string
	for _, name := range sortedKeys(st.Classes) {
		c := st.Classes[name]
		path := "storage.classes." + quoteLabel(name)
		if !isDNSSubdomain(name) {
			m.reportKey(CodeStorageClassName, path, fmt.Sprintf("StorageClass name %s is not a DNS-1123 subdomain", diag.Quote(name)),
				"use lower-case letters, digits, '-' and '.'")
		}
		if c.Default {
			defaults = append(defaults, name)
		}
		d, ok := st.Drivers[c.Driver]
		if !ok {
			hint := "declare the driver under storage.drivers"
			if len(st.Drivers) > 0 {
				hint = "use one of the declared drivers (" + strings.Join(sortedKeys(st.Drivers), ", ") + ") or declare it under storage.drivers"
			}
			m.report(CodeUnknownDriver, path+".driver", fmt.Sprintf("StorageClass %s uses CSI driver %s, which is not declared", name, diag.Quote(c.Driver)), hint)
			continue
		}
		if d.TopologyAware && c.VolumeBindingMode != "WaitForFirstConsumer" {
			m.report(CodeTopologyBinding, path+".volumeBindingMode", fmt.Sprintf("StorageClass %s binds volumes of topology-aware driver %s immediately: a volume may be created in a zone the pod cannot run in", name, c.Driver),
				`set volumeBindingMode: "WaitForFirstConsumer"`, "storage.drivers."+quoteLabel(c.Driver)+".topologyAware")
		}
	}
	switch {
	case len(st.Classes) > 0 && len(defaults) == 0:
		m.report(CodeNoDefaultClass, "storage.classes", fmt.Sprintf("%d StorageClasses but none is the default: claims without storageClassName stay Pending", len(st.Classes)),
			"mark exactly one class with default: true")
	case len(defaults) > 1:
		var more []string
		for _, d := range defaults[1:] {
			more = append(more, "storage.classes."+quoteLabel(d)+".default")
		}
		m.report(CodeManyDefaults, "storage.classes."+quoteLabel(defaults[0])+".default", fmt.Sprintf("%d StorageClasses are the default (%s); exactly one may be", len(defaults), strings.Join(defaults, ", ")),
			"keep default: true on one class only", more...)
	}
}
