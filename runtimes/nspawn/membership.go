package nspawn

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
)

// etcdMember is a member as etcd's cluster API lists it (its JSON
// gateway writes the 64-bit ID as a string).
type etcdMember struct {
	ID       string   `json:"ID"`
	Name     string   `json:"name"`
	PeerURLs []string `json:"peerURLs"`
	// ClientURLs are empty until the member has started.
	ClientURLs []string `json:"clientURLs"`
	IsLearner  bool     `json:"isLearner"`
}

// ask posts body to a member's client URL at path and decodes its JSON
// answer into v, with etcd's own words when it refuses.
func (e *etcdHealth) ask(ctx context.Context, clientURL, path string, body, v any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(clientURL, "/")+path, strings.NewReader(string(data)))
	if err != nil {
		return err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var refusal struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(answer, &refusal) == nil && refusal.Message != "" {
			return fmt.Errorf("etcd at %s: %s", clientURL, refusal.Message)
		}
		return fmt.Errorf("etcd at %s: %s: %s", clientURL, resp.Status, strings.TrimSpace(string(answer)))
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(answer, v)
}

// members lists the cluster's members, as the member at clientURL knows
// them.
func (e *etcdHealth) members(ctx context.Context, clientURL string) ([]etcdMember, error) {
	var list struct {
		Members []etcdMember `json:"members"`
	}
	if err := e.ask(ctx, clientURL, "/v3/cluster/member/list", map[string]any{"linearizable": true}, &list); err != nil {
		return nil, err
	}
	return list.Members, nil
}

// memberAt is the listed member with peer URL u.
func memberAt(members []etcdMember, u string) (etcdMember, bool) {
	i := slices.IndexFunc(members, func(m etcdMember) bool { return slices.Contains(m.PeerURLs, u) })
	if i < 0 {
		return etcdMember{}, false
	}
	return members[i], true
}

// healthyMember is the client URL of a member of members, other than
// skip, that answers healthy: the one to change the membership through.
func (e *etcdHealth) healthyMember(ctx context.Context, members []ir.EtcdMember, skip string) (string, error) {
	for _, m := range members {
		if m.Name != skip && e.healthy(ctx, m.ClientURL()) {
			return m.ClientURL(), nil
		}
	}
	return "", fmt.Errorf("no etcd member other than %s answers healthy", skip)
}

// addMember adds the member m as etcdctl member add does, unless the
// cluster already has a member at its peer URL (an apply that resumes).
func (e *etcdHealth) addMember(ctx context.Context, through string, m ir.EtcdMember) (added bool, err error) {
	list, err := e.members(ctx, through)
	if err != nil {
		return false, err
	}
	if _, ok := memberAt(list, m.PeerURL()); ok {
		return false, nil
	}
	return true, e.ask(ctx, through, "/v3/cluster/member/add", map[string]any{"peerURLs": []string{m.PeerURL()}}, nil)
}

// removeMember removes the member at m's peer URL, as etcdctl member
// remove does; a member already gone is no error.
func (e *etcdHealth) removeMember(ctx context.Context, through string, m ir.EtcdMember) (removed bool, err error) {
	list, err := e.members(ctx, through)
	if err != nil {
		return false, err
	}
	at, ok := memberAt(list, m.PeerURL())
	if !ok {
		return false, nil
	}
	return true, e.ask(ctx, through, "/v3/cluster/member/remove", map[string]any{"ID": at.ID}, nil)
}
