package nspawn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// ControlSocket is where a running up answers `kcompile node`, under
// its work directory: a Unix socket of mode 0600 in a directory of mode
// 0700, so only root reaches it.
const ControlSocket = "control/up.sock"

// Power actions a running up performs on a node.
const (
	// PowerStop powers the node off through logind, as Down does.
	PowerStop = "stop"
	// PowerKill cuts the node's power: nothing in it gets to say goodbye.
	PowerKill = "kill"
	// PowerStart boots a stopped node again, with the same disk.
	PowerStart = "start"
	// PowerRestart is stop, then start.
	PowerRestart = "restart"
)

// PowerActions are the actions, for the command line.
func PowerActions() []string { return []string{PowerStop, PowerStart, PowerKill, PowerRestart} }

// Status is what a running up reports of its cluster.
type Status struct {
	Cluster string       `json:"cluster"`
	Nodes   []NodeStatus `json:"nodes"`
	// VIPHolder is the control-plane node holding the endpoint's VIP,
	// when the cluster has one ("" when none holds it).
	VIPHolder string `json:"vipHolder,omitempty"`
	// EtcdLeader is the member etcd's members name as leader, "" when
	// none answers.
	EtcdLeader string `json:"etcdLeader,omitempty"`
	// Unpullable are the pods waiting for an image that cannot be
	// pulled: the nodes have no egress, and up serves only the
	// cluster's own images.
	Unpullable []string `json:"unpullable,omitempty"`
}

// NodeStatus is one machine.
type NodeStatus struct {
	Name string `json:"name"`
	// State is running or stopped.
	State string `json:"state"`
	PID   int    `json:"pid,omitempty"`
	// Boots counts the machine's boots, reboots and starts included.
	Boots int `json:"boots"`
}

// serveControl answers the control socket until Down.
func (c *Cluster) serveControl() error {
	sock := filepath.Join(c.cfg.Work, ControlSocket)
	if err := c.mkdir(filepath.Dir(sock)); err != nil {
		return err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		l.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, c.Status(r.Context()))
	})
	mux.HandleFunc("POST /nodes/{node}/{action}", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Power(r.Context(), r.PathValue("node"), r.PathValue("action")); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, c.Status(r.Context()))
	})
	machine := func(change func(context.Context, MachineRequest) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req MachineRequest
			if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if req.Node != r.PathValue("node") {
				http.Error(w, "the request names another node", http.StatusBadRequest)
				return
			}
			if err := change(r.Context(), req); err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			writeJSON(w, c.Status(r.Context()))
		}
	}
	mux.HandleFunc("PUT /machines/{node}", machine(c.AddMachine))
	mux.HandleFunc("DELETE /machines/{node}", machine(c.RemoveMachine))
	c.control = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.control.Serve(l) }()
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Power performs a power action on a node; the cluster goes on whatever
// the node does.
func (c *Cluster) Power(ctx context.Context, node, action string) error {
	m := c.machine(node)
	if m == nil {
		return fmt.Errorf("the cluster has no node %s", node)
	}
	switch action {
	case PowerKill:
		return c.Stop(ctx, node, 0)
	case PowerStop:
		if grace, forced := m.powerOff(ctx, c.cfg.Cluster.Kubelet.ShutdownGrace); forced {
			c.logf("machine %s did not power off within %s: stopped by force; the end of its console:\n%s", m.name, grace, consoleTail(m.console(), 15))
		}
		c.logf("node %s stopped", node)
		return nil
	case PowerStart:
		return c.powerOn(m)
	case PowerRestart:
		if err := c.Power(ctx, node, PowerStop); err != nil {
			return err
		}
		return c.powerOn(m)
	}
	return fmt.Errorf("no power action %q: one of %s", action, strings.Join(PowerActions(), ", "))
}

// powerOn boots a stopped machine again, with the disk it had.
func (c *Cluster) powerOn(m *machine) error {
	m.mu.Lock()
	running := m.proc.alive()
	done := m.done
	m.mu.Unlock()
	if running {
		return fmt.Errorf("node %s is running", m.name)
	}
	select {
	case <-done:
	default:
		return fmt.Errorf("node %s is still stopping", m.name)
	}
	m.mu.Lock()
	m.stopped, m.err, m.done = false, nil, make(chan struct{})
	m.mu.Unlock()
	if err := c.launch(m); err != nil {
		return err
	}
	c.logf("node %s started", m.name)
	return nil
}

// Status reports the machines, the VIP's holder and etcd's leader.
func (c *Cluster) Status(ctx context.Context) Status {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.mmu.Lock()
	live := c.live
	c.mmu.Unlock()
	s := Status{Cluster: live.Name}
	for _, m := range c.machines() {
		m.mu.Lock()
		n := NodeStatus{Name: m.name, State: "stopped", Boots: m.boots}
		if m.proc.alive() {
			n.State, n.PID = "running", m.proc.PID
		}
		m.mu.Unlock()
		s.Nodes = append(s.Nodes, n)
		if e := live.Endpoint; e.Mode == ir.EndpointVIP && n.State == "running" && m.node.Runs(ir.ComponentAPIServer) {
			out, err := m.exec(ctx, "ip", "-o", "addr", "show", "to", e.Address.String())
			if err == nil && strings.TrimSpace(string(out)) != "" {
				s.VIPHolder = m.name
			}
		}
	}
	if k := c.liveKube(); k != nil {
		s.Unpullable = k.unpullable(ctx)
		if k != c.kube {
			k.http.CloseIdleConnections()
		}
	}
	if etcd, err := c.liveEtcdClient(); err == nil {
		for _, mem := range live.Etcd.Members {
			if etcd.leads(ctx, mem.ClientURL()) {
				s.EtcdLeader = mem.Name
				break
			}
		}
	}
	return s
}

// liveKube is a client of the API with the super-admin kubeconfig the
// work directory has now (apply rewrites it at each step of a rotation),
// the boot's when it cannot be read.
func (c *Cluster) liveKube() *kube {
	if data, err := os.ReadFile(filepath.Join(c.cfg.Work, "tree", layout.ClusterTree("super-admin.conf"))); err == nil {
		if k, err := newKube(data); err == nil {
			return k
		}
	}
	return c.kube
}

// leads says whether the member at clientURL reports itself leader.
func (e *etcdHealth) leads(ctx context.Context, clientURL string) bool {
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	return e.call(ctx, http.MethodPost, clientURL, "/v3/maintenance/status", "{}", &st) && st.Leader != "" && st.Leader == st.Header.MemberID
}

// Control is a client of a running up's control socket.
type Control struct {
	work string
	http *http.Client
}

// Dial reaches the up running the cluster of work directory work.
func Dial(work string) (*Control, error) {
	sock := filepath.Join(work, ControlSocket)
	if _, err := os.Stat(sock); err != nil {
		if _, serr := ReadState(work); serr != nil {
			return nil, fmt.Errorf("%s has no running kcompile up: %w", work, serr)
		}
		return nil, fmt.Errorf("the kcompile up in %s answers no control socket (it is still booting, or it ended): %w", work, err)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &Control{work: work, http: &http.Client{Transport: tr}}, nil
}

// Status asks for the cluster's status.
func (k *Control) Status(ctx context.Context) (Status, error) {
	return k.do(ctx, http.MethodGet, "/status")
}

// Power asks for a power action on a node and returns the status after.
func (k *Control) Power(ctx context.Context, node, action string) (Status, error) {
	if !slices.Contains(PowerActions(), action) {
		return Status{}, fmt.Errorf("no power action %q: one of %s", action, strings.Join(PowerActions(), ", "))
	}
	return k.do(ctx, http.MethodPost, "/nodes/"+url.PathEscape(node)+"/"+action)
}

// AddMachine asks up to boot a machine for a node of a state, from the
// tree WriteNodeTree laid, and returns the status after.
func (k *Control) AddMachine(ctx context.Context, req MachineRequest) (Status, error) {
	return k.send(ctx, http.MethodPut, "/machines/"+url.PathEscape(req.Node), req)
}

// RemoveMachine asks up to power a node's machine off and remove it, the
// cluster going on as the state says.
func (k *Control) RemoveMachine(ctx context.Context, req MachineRequest) (Status, error) {
	return k.send(ctx, http.MethodDelete, "/machines/"+url.PathEscape(req.Node), req)
}

func (k *Control) do(ctx context.Context, method, path string) (Status, error) {
	return k.send(ctx, method, path, nil)
}

func (k *Control) send(ctx context.Context, method, path string, body any) (Status, error) {
	var s Status
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return s, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://up"+path, r)
	if err != nil {
		return s, err
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return s, fmt.Errorf("the kcompile up in %s: %w", k.work, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return s, err
	}
	if resp.StatusCode != http.StatusOK {
		return s, errors.New(strings.TrimSpace(string(answer)))
	}
	return s, json.NewDecoder(bytes.NewReader(answer)).Decode(&s)
}
