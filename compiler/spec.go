package compiler

import "github.com/kcompile/kcompile/compiler/ir"

// The types below mirror schema/v1alpha1 field by field; they are what the
// validated CUE value decodes into before checks and lowering. Only fields
// that the schema makes optional are pointers or may be empty.

type specCluster struct {
	APIVersion   string           `json:"apiVersion"`
	Name         string           `json:"name"`
	Kubernetes   specKubernetes   `json:"kubernetes"`
	ControlPlane specControlPlane `json:"controlPlane"`
	Workers      specWorkers      `json:"workers"`
	Etcd         specEtcd         `json:"etcd"`
	Network      specNetwork      `json:"network"`
	Storage      specStorage      `json:"storage"`
	Runtime      specRuntime      `json:"runtime"`
	Kubelet      specKubelet      `json:"kubelet"`
	PKI          specPKI          `json:"pki"`
	Security     specSecurity     `json:"security"`
	Addons       specAddons       `json:"addons"`
	Install      specInstall      `json:"install"`
	CloudInit    struct {
		MaxUserDataBytes int `json:"maxUserDataBytes"`
	} `json:"cloudInit"`
	Boot     *specBoot         `json:"boot"`
	OS       string            `json:"os"`
	Labels   map[string]string `json:"labels"`
	Policies struct {
		Waivers map[string]struct {
			Reason string `json:"reason"`
		} `json:"waivers"`
	} `json:"policies"`
	Access struct {
		Users map[string]struct {
			SSHAuthorizedKeys []string `json:"sshAuthorizedKeys"`
			Sudo              bool     `json:"sudo"`
		} `json:"users"`
	} `json:"access"`
}

type specArtifact struct {
	URL     string            `json:"url"`
	SHA256  string            `json:"sha256"`
	Path    string            `json:"path"`
	Extract map[string]string `json:"extract"`
}

type specInstall struct {
	Source    string                  `json:"source"`
	Artifacts map[string]specArtifact `json:"artifacts"`
}

type specKubernetes struct {
	Version    string `json:"version"`
	Components struct {
		APIServer         string `json:"apiServer"`
		ControllerManager string `json:"controllerManager"`
		Scheduler         string `json:"scheduler"`
		Kubelet           string `json:"kubelet"`
		KubeProxy         string `json:"kubeProxy"`
	} `json:"components"`
}

type specTaint struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

type specCapacity struct {
	CPU     int    `json:"cpu"`
	Memory  string `json:"memory"`
	MaxPods int    `json:"maxPods"`
}

// specNodeCommon is #NodeCommon: what a node and a pool share.
type specNodeCommon struct {
	Labels           map[string]string `json:"labels"`
	Taints           []specTaint       `json:"taints"`
	Capacity         specCapacity      `json:"capacity"`
	KubeletVersion   string            `json:"kubeletVersion"`
	KubeProxyVersion string            `json:"kubeProxyVersion"`
	OS               string            `json:"os"`
}

type specNode struct {
	specNodeCommon
	Address          string `json:"address"`
	SecondaryAddress string `json:"secondaryAddress"`
	MAC              string `json:"mac"`
	Zone             string `json:"zone"`
	Rack             string `json:"rack"`
	// A control-plane node's own versions (#ControlPlaneNode).
	APIServerVersion         string `json:"apiServerVersion"`
	ControllerManagerVersion string `json:"controllerManagerVersion"`
	SchedulerVersion         string `json:"schedulerVersion"`
}

// specRollout is #Rollout; MaxUnavailable is a count or a percentage.
type specRollout struct {
	MaxUnavailable any    `json:"maxUnavailable"`
	Drain          bool   `json:"drain"`
	DrainTimeout   string `json:"drainTimeout"`
}

type specEndpoint struct {
	Address string `json:"address"`
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Mode    string `json:"mode"`
	VIP     struct {
		RouterID       int `json:"routerID"`
		AdvertInterval int `json:"advertInterval"`
	} `json:"vip"`
	NodeLocal struct {
		Port int `json:"port"`
	} `json:"nodeLocal"`
}

type specControlPlane struct {
	Endpoint    *specEndpoint       `json:"endpoint"`
	Nodes       map[string]specNode `json:"nodes"`
	Schedulable bool                `json:"schedulable"`
	APIServer   struct {
		ExtraSANs []string `json:"extraSANs"`
		Port      int      `json:"port"`
	} `json:"apiServer"`
}

type specPool struct {
	specNodeCommon
	Count                 int      `json:"count"`
	NamePattern           string   `json:"namePattern"`
	Start                 int      `json:"start"`
	FirstAddress          string   `json:"firstAddress"`
	FirstSecondaryAddress string   `json:"firstSecondaryAddress"`
	MACs                  []string `json:"macs"`
	Zones                 []string `json:"zones"`
	Racks                 []string `json:"racks"`
	Nodes                 map[string]struct {
		KubeletVersion   string `json:"kubeletVersion"`
		KubeProxyVersion string `json:"kubeProxyVersion"`
	} `json:"nodes"`
	Rollout specRollout `json:"rollout"`
}

type specWorkers struct {
	Nodes   map[string]specNode `json:"nodes"`
	Pools   map[string]specPool `json:"pools"`
	Rollout specRollout         `json:"rollout"`
	Order   []string            `json:"order"`
}

type specEtcdMember struct {
	Address string `json:"address"`
	MAC     string `json:"mac"`
	Zone    string `json:"zone"`
	Rack    string `json:"rack"`
}

type specEtcd struct {
	Topology          string                    `json:"topology"`
	Version           string                    `json:"version"`
	Members           map[string]specEtcdMember `json:"members"`
	Joining           []string                  `json:"joining"`
	QuotaBackendBytes int64                     `json:"quotaBackendBytes"`
	SnapshotCount     int                       `json:"snapshotCount"`
	Backup            *specEtcdBackup           `json:"backup"`
}

type specEtcdBackup struct {
	Schedule  string   `json:"schedule"`
	Retention int      `json:"retention"`
	Directory string   `json:"directory"`
	Upload    []string `json:"upload"`
	Timeout   string   `json:"timeout"`
}

type specNetwork struct {
	Nodes                []string `json:"nodes"`
	PodCIDR              string   `json:"podCIDR"`
	SecondaryPodCIDR     string   `json:"secondaryPodCIDR"`
	ServiceCIDR          string   `json:"serviceCIDR"`
	SecondaryServiceCIDR string   `json:"secondaryServiceCIDR"`
	NodeCIDRMaskSize     struct {
		IPv4 int `json:"ipv4"`
		IPv6 int `json:"ipv6"`
	} `json:"nodeCIDRMaskSize"`
	Gateways      []string `json:"gateways"`
	Nameservers   []string `json:"nameservers"`
	Domain        string   `json:"domain"`
	DNSServiceIP  string   `json:"dnsServiceIP"`
	MTU           int      `json:"mtu"`
	NetworkPolicy bool     `json:"networkPolicy"`
	CNI           struct {
		Plugin               string            `json:"plugin"`
		Version              string            `json:"version"`
		Mode                 string            `json:"mode"`
		WireGuard            bool              `json:"wireguard"`
		KubeProxyReplacement bool              `json:"kubeProxyReplacement"`
		MTU                  int               `json:"mtu"`
		Images               map[string]string `json:"images"`
	} `json:"cni"`
	KubeProxy struct {
		Mode string `json:"mode"`
	} `json:"kubeProxy"`
}

type specCSIDriver struct {
	TopologyAware  bool `json:"topologyAware"`
	AttachRequired bool `json:"attachRequired"`
	PodInfoOnMount bool `json:"podInfoOnMount"`
}

type specStorageClass struct {
	Driver               string            `json:"driver"`
	Default              bool              `json:"default"`
	ReclaimPolicy        string            `json:"reclaimPolicy"`
	VolumeBindingMode    string            `json:"volumeBindingMode"`
	AllowVolumeExpansion bool              `json:"allowVolumeExpansion"`
	Parameters           map[string]string `json:"parameters"`
}

type specStorage struct {
	Drivers map[string]specCSIDriver    `json:"drivers"`
	Classes map[string]specStorageClass `json:"classes"`
}

type specRuntime struct {
	Engine              string              `json:"engine"`
	Version             string              `json:"version"`
	CgroupDriver        string              `json:"cgroupDriver"`
	Mirrors             map[string][]string `json:"mirrors"`
	RestrictOOMScoreAdj bool                `json:"restrictOOMScoreAdj"`
}

type specKubelet struct {
	CgroupDriver string `json:"cgroupDriver"`
	FailCgroupV1 bool   `json:"failCgroupV1"`
	Shutdown     struct {
		GracePeriodSeconds  int `json:"gracePeriodSeconds"`
		CriticalPodsSeconds int `json:"criticalPodsSeconds"`
	} `json:"shutdown"`
}

type specPKI struct {
	KeyAlgorithm string `json:"keyAlgorithm"`
	CAValidity   string `json:"caValidity"`
	LeafValidity string `json:"leafValidity"`
	ClockSkew    string `json:"clockSkew"`
}

type specSecurity struct {
	EncryptionAtRest struct {
		Enabled  bool   `json:"enabled"`
		Provider string `json:"provider"`
	} `json:"encryptionAtRest"`
	Audit struct {
		Enabled    bool `json:"enabled"`
		MaxAgeDays int  `json:"maxAgeDays"`
		MaxBackups int  `json:"maxBackups"`
		MaxSizeMB  int  `json:"maxSizeMB"`
	} `json:"audit"`
	Admission struct {
		Plugins     []string `json:"plugins"`
		PodSecurity string   `json:"podSecurity"`
	} `json:"admission"`
	AnonymousAuth bool `json:"anonymousAuth"`
	CIS           struct {
		Waivers map[string]struct {
			Reason string `json:"reason"`
		} `json:"waivers"`
	} `json:"cis"`
}

type specAddons struct {
	CoreDNS struct {
		Version  string `json:"version"`
		Replicas int    `json:"replicas"`
	} `json:"coredns"`
}

type specBootImage struct {
	Kernel string   `json:"kernel"`
	Initrd []string `json:"initrd"`
	Args   []string `json:"args"`
}

type specBoot struct {
	MatchboxURL string `json:"matchboxURL"`
	specBootImage
	// Roles' fields are pointers: an absent field inherits, an empty list
	// replaces.
	Roles map[string]specBootOverride `json:"roles"`
	OS    map[string]specBootOverride `json:"os"`
}

type specBootOverride struct {
	Kernel *string   `json:"kernel"`
	Initrd *[]string `json:"initrd"`
	Args   *[]string `json:"args"`
}

func (o specBootOverride) apply(img *ir.BootImage) {
	if o.Kernel != nil {
		img.Kernel = *o.Kernel
	}
	if o.Initrd != nil {
		img.Initrd = *o.Initrd
	}
	if o.Args != nil {
		img.Args = *o.Args
	}
}
