package sim

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// etcdConfig turns a member's compiled etcd flags into an embedded
// server's configuration. The members were compiled with their node's own
// address as their loopback (placement), so their listeners do not collide;
// the metrics listener is left out, since nothing scrapes it here.
func etcdConfig(flags map[string]string) (*embed.Config, error) {
	cfg := embed.NewConfig()
	urls := func(name string) ([]url.URL, error) {
		var out []url.URL
		for _, s := range strings.Split(flags[name], ",") {
			if s == "" {
				continue
			}
			u, err := url.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", name, err)
			}
			out = append(out, *u)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("kcompile bug: etcd has no --%s", name)
		}
		return out, nil
	}
	var err error
	cfg.Name = flags["name"]
	cfg.Dir = flags["data-dir"]
	if cfg.ListenClientUrls, err = urls("listen-client-urls"); err != nil {
		return nil, err
	}
	if cfg.AdvertiseClientUrls, err = urls("advertise-client-urls"); err != nil {
		return nil, err
	}
	if cfg.ListenPeerUrls, err = urls("listen-peer-urls"); err != nil {
		return nil, err
	}
	if cfg.AdvertisePeerUrls, err = urls("initial-advertise-peer-urls"); err != nil {
		return nil, err
	}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = flags["initial-cluster"]
	cfg.InitialClusterToken = flags["initial-cluster-token"]
	cfg.ClusterState = flags["initial-cluster-state"]
	cfg.ClientTLSInfo.CertFile = flags["cert-file"]
	cfg.ClientTLSInfo.KeyFile = flags["key-file"]
	cfg.ClientTLSInfo.TrustedCAFile = flags["trusted-ca-file"]
	cfg.ClientTLSInfo.ClientCertAuth = flags["client-cert-auth"] == "true"
	cfg.PeerTLSInfo.CertFile = flags["peer-cert-file"]
	cfg.PeerTLSInfo.KeyFile = flags["peer-key-file"]
	cfg.PeerTLSInfo.TrustedCAFile = flags["peer-trusted-ca-file"]
	cfg.PeerTLSInfo.ClientCertAuth = flags["peer-client-cert-auth"] == "true"
	// etcd matches a peer's source address against the peer's
	// certificate. On one loopback interface every connection comes from
	// 127.0.0.1, not from the member's own address, so this one check is
	// skipped; the certificate chain and client authentication still are
	// verified as compiled.
	cfg.PeerTLSInfo.SkipClientSANVerify = true
	if v := flags["quota-backend-bytes"]; v != "" {
		if cfg.QuotaBackendBytes, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, err
		}
	}
	if v := flags["snapshot-count"]; v != "" {
		if cfg.SnapshotCount, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, err
		}
	}
	if v := flags["cipher-suites"]; v != "" {
		cfg.CipherSuites = strings.Split(v, ",")
	}
	if v := flags["tls-min-version"]; v != "" {
		cfg.TlsMinVersion = v
	}
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"/dev/null"}
	// The compiled timing, or etcd's defaults. Shorter elections would
	// make a simulated member loss quicker, but five members sharing two
	// cores with the whole control plane miss short heartbeats under
	// load and lose their leader.
	for name, ms := range map[string]*uint{"heartbeat-interval": &cfg.TickMs, "election-timeout": &cfg.ElectionMs} {
		if v := flags[name]; v != "" {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", name, err)
			}
			*ms = uint(n)
		}
	}
	// A simulation's data lives as long as the process: the members'
	// writes need not survive a power loss, and an fsync per raft entry
	// on five members would bound a 5,000-node boot by the disk.
	cfg.UnsafeNoFsync = true
	return cfg, nil
}

// startEtcd starts one member and waits until it serves or fails.
func startEtcd(cfg *embed.Config) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", cfg.Name, err)
	}
	return e, nil
}

// waitEtcd waits for a started member to join a quorum.
func waitEtcd(e *embed.Etcd, timeout time.Duration) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd %s: %w", e.Config().Name, err)
	case <-time.After(timeout):
		return fmt.Errorf("etcd %s did not join a quorum within %s", e.Config().Name, timeout)
	}
}
