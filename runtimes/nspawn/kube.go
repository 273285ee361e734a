package nspawn

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/pki"
)

// kube is a client of the cluster's API with one kubeconfig's
// credentials. It speaks plain HTTPS: kcompile does not link client-go's
// REST machinery for the handful of requests up makes.
type kube struct {
	server string
	http   *http.Client
	// resources caches discovery: group/version -> kind -> resource.
	resources map[string]map[string]apiResource
}

// apiResource is what discovery says of a kind.
type apiResource struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Namespaced bool   `json:"namespaced"`
}

// newKube reads a kubeconfig (its current context) with the loader the
// pki package uses.
func newKube(kubeconfig []byte) (*kube, error) {
	cfg, err := pki.LoadKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("kubeconfig has no context %q", cfg.CurrentContext)
	}
	cl, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("kubeconfig has no cluster %q", ctx.Cluster)
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok {
		return nil, fmt.Errorf("kubeconfig has no user %q", ctx.AuthInfo)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cl.CertificateAuthorityData) {
		return nil, errors.New("kubeconfig: no CA certificate")
	}
	cert, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %v", err)
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 4,
	}
	return &kube{server: strings.TrimSuffix(cl.Server, "/"), http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, resources: map[string]map[string]apiResource{}}, nil
}

// at is a client with k's credentials of the API server at server
// ("https://10.0.0.11:6443"), one of those behind the endpoint.
func (k *kube) at(server string) *kube {
	return &kube{server: server, http: k.http, resources: map[string]map[string]apiResource{}}
}

// do sends one request and returns the body of a 2xx answer.
func (k *kube) do(ctx context.Context, method, p, contentType string, body []byte) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.server+p, r)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			return nil, &apiError{code: resp.StatusCode, msg: st.Message}
		}
		return nil, &apiError{code: resp.StatusCode, msg: strings.TrimSpace(string(data))}
	}
	return data, nil
}

type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.code, e.msg) }

// serverTime is the API server's clock, to the second (its Date
// header): what it stamps objects with.
func (k *kube) serverTime(ctx context.Context) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.server+"/version", nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	t, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return time.Time{}, fmt.Errorf("the API server's time: %v", err)
	}
	return t, nil
}

// get decodes a GET into v.
func (k *kube) get(ctx context.Context, p string, v any) error {
	data, err := k.do(ctx, http.MethodGet, p, "", nil)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// ready says whether the API server answers /readyz with ok.
func (k *kube) ready(ctx context.Context) bool {
	data, err := k.do(ctx, http.MethodGet, "/readyz", "", nil)
	return err == nil && strings.TrimSpace(string(data)) == "ok"
}

// nodes lists the Node objects.
func (k *kube) nodes(ctx context.Context) ([]corev1.Node, error) {
	var list corev1.NodeList
	if err := k.get(ctx, "/api/v1/nodes", &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// nodeReady says whether a node's Ready condition is True.
func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// discover returns the resources of a group/version ("v1", "apps/v1").
func (k *kube) discover(ctx context.Context, gv string) (map[string]apiResource, error) {
	if r, ok := k.resources[gv]; ok {
		return r, nil
	}
	p := "/apis/" + gv
	if gv == "v1" {
		p = "/api/v1"
	}
	var list struct {
		Resources []apiResource `json:"resources"`
	}
	if err := k.get(ctx, p, &list); err != nil {
		return nil, fmt.Errorf("discovery of %s: %w", gv, err)
	}
	byKind := map[string]apiResource{}
	for _, r := range list.Resources {
		if !strings.Contains(r.Name, "/") {
			byKind[r.Kind] = r
		}
	}
	k.resources[gv] = byKind
	return byKind, nil
}

// manifestObject is what apply needs to know of an object.
type manifestObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// splitYAML cuts a multi-document YAML stream at its "---" lines,
// dropping documents that hold only comments.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		doc := bytes.TrimSpace(cur.Bytes())
		cur.Reset()
		for _, line := range bytes.Split(doc, []byte("\n")) {
			t := bytes.TrimSpace(line)
			if len(t) > 0 && t[0] != '#' {
				docs = append(docs, append([]byte(nil), doc...))
				return
			}
		}
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if t := bytes.TrimRight(line, " \t\r\n"); string(t) == "---" {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}

// apply server-side applies every object of a manifest, as
// `kubectl apply --server-side --force-conflicts` does.
func (k *kube) apply(ctx context.Context, name string, manifest []byte) (int, error) {
	n := 0
	for i, doc := range splitYAML(manifest) {
		var obj manifestObject
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return n, fmt.Errorf("%s: document %d: %v", name, i+1, err)
		}
		if obj.APIVersion == "" || obj.Kind == "" || obj.Metadata.Name == "" {
			return n, fmt.Errorf("%s: document %d has no apiVersion, kind or name", name, i+1)
		}
		res, err := k.discover(ctx, obj.APIVersion)
		if err != nil {
			return n, err
		}
		r, ok := res[obj.Kind]
		if !ok {
			return n, fmt.Errorf("%s: the API server has no kind %s in %s", name, obj.Kind, obj.APIVersion)
		}
		p := "/apis/" + obj.APIVersion
		if obj.APIVersion == "v1" {
			p = "/api/v1"
		}
		if r.Namespaced {
			ns := obj.Metadata.Namespace
			if ns == "" {
				ns = "default"
			}
			p = path.Join(p, "namespaces", url.PathEscape(ns))
		}
		p = path.Join(p, r.Name, url.PathEscape(obj.Metadata.Name)) + "?fieldManager=kcompile-up&force=true"
		if _, err := k.do(ctx, http.MethodPatch, p, "application/apply-patch+yaml", doc); err != nil {
			return n, fmt.Errorf("%s: %s %s: %w", name, obj.Kind, obj.Metadata.Name, err)
		}
		n++
	}
	return n, nil
}

// unpullable names the pods waiting for an image that cannot be pulled,
// with the image and the kubelet's reason.
func (k *kube) unpullable(ctx context.Context) []string {
	var pods corev1.PodList
	if err := k.get(ctx, "/api/v1/pods", &pods); err != nil {
		return nil
	}
	var out []string
	for _, p := range pods.Items {
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			w := cs.State.Waiting
			if w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff" || w.Reason == "InvalidImageName") {
				out = append(out, fmt.Sprintf("%s/%s: %s (%s)", p.Namespace, p.Name, cs.Image, w.Reason))
			}
		}
	}
	return out
}
