package picture

import "fmt"

// Stages are a rollout's stages drawn in order, each a group of its runs
// of alike steps (kcompile plan's picture).
type Stages struct {
	Title  string
	Stages []Stage
}

// Stage is one stage of a rollout.
type Stage struct {
	Name string
	Runs []Run
}

// Run is consecutive steps of one kind: their kind, what they touch, and
// whether the kind adds, removes or restarts.
type Run struct {
	Kind  RunKind
	Lines []string
}

// RunKind is what a run of steps does, for its colour.
type RunKind string

const (
	RunEtcd         RunKind = "etcd"
	RunControlPlane RunKind = "control-plane"
	RunWorkers      RunKind = "workers"
	RunAdd          RunKind = "add"
	RunRemove       RunKind = "remove"
	RunExplicit     RunKind = "explicit"
	RunAddons       RunKind = "addons"
)

func (k RunKind) style() style {
	switch k {
	case RunEtcd:
		return styleEtcd
	case RunControlPlane:
		return styleControlPlane
	case RunWorkers:
		return styleWorker
	case RunAdd:
		return styleAdded
	case RunRemove:
		return styleRemoved
	case RunExplicit:
		return styleChanged
	}
	return styleEndpoint
}

// Mermaid is the stages as a Mermaid flowchart, in the style of the
// cluster's picture: a group per stage, its runs in order within it.
func (s Stages) Mermaid() string { return s.diagram().mermaid() }

func (s Stages) diagram() diagram {
	d := diagram{title: s.Title}
	n := 0
	last := ""
	for i, st := range s.Stages {
		g := group{id: fmt.Sprintf("s%d", i+1), title: fmt.Sprintf("%d. %s", i+1, st.Name)}
		for _, r := range st.Runs {
			n++
			id := fmt.Sprintf("r%d", n)
			g.boxes = append(g.boxes, box{id: id, lines: wrapLines(r.Lines), style: r.Kind.style()})
			if last != "" {
				d.edges = append(d.edges, edge{from: last, to: id})
			}
			last = id
		}
		d.groups = append(d.groups, g)
	}
	return d
}

// wrapLines breaks each long line at wrapAt, as the cluster's boxes do.
func wrapLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		out = append(out, wrap(l, wrapAt)...)
	}
	return out
}
