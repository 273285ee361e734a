package ir

import "time"

// Scenario is a checked scenario: steps the simulator plays in order
// against a running cluster. Every node, etcd member and control-plane
// node it names exists in the cluster it was checked against, and every
// duration is positive.
type Scenario struct {
	Name string
	// File is the scenario file, as it was named to the compiler.
	File  string
	Steps []Step
}

// Step is one step of a scenario: exactly one of Apply, Wait, Stop,
// Start and Expect is set.
type Step struct {
	// Pos is where the step is written, for reports.
	Pos    Pos
	Apply  *Apply
	Wait   *Wait
	Stop   *Subject
	Start  *Subject
	Expect *Expect
}

// Apply creates the objects of Kubernetes manifests.
type Apply struct {
	// Manifests are YAML documents separated by "---" lines, each an
	// object with apiVersion and kind.
	Manifests string
}

// SubjectKind is what a stop or start acts on.
type SubjectKind string

const (
	// SubjectNode is a whole node: its kubelet, control-plane components
	// and etcd member.
	SubjectNode SubjectKind = "node"
	// SubjectEtcd is an etcd member.
	SubjectEtcd SubjectKind = "etcd"
	// SubjectControlPlane is a node's kube-apiserver,
	// kube-controller-manager and kube-scheduler.
	SubjectControlPlane SubjectKind = "controlPlane"
)

// Subject names what a stop or start acts on.
type Subject struct {
	Kind SubjectKind
	// Name is a node's name (SubjectNode, SubjectControlPlane) or an etcd
	// member's.
	Name string
}

// Wait waits for pods to run (Pods set) or for NodesReady nodes to be
// Ready.
type Wait struct {
	Pods       *Pods
	NodesReady int
	Timeout    time.Duration
}

// Expectation outcomes, as a scenario writes them.
const (
	APIServed      = "served"
	APIUnavailable = "unavailable"
	WriteSucceeds  = "succeeds"
	WriteFails     = "fails"
)

// Expect is an expectation: exactly one of API, Write, Node and Pods is
// set. Node and Pods expectations may take up to Within to hold.
type Expect struct {
	// API is APIServed or APIUnavailable.
	API string
	// Write is WriteSucceeds or WriteFails.
	Write string
	// Node must become Ready, or NotReady when Ready is false.
	Node   string
	Ready  bool
	Pods   *Pods
	Within time.Duration
}

// Pods selects pods and says how many must run, and where not.
type Pods struct {
	Namespace string
	// Selector is a Kubernetes label selector.
	Selector string
	// Running is how many live pods must run, exactly.
	Running int
	// NotOn are nodes none of the pods may run on.
	NotOn []string
}
