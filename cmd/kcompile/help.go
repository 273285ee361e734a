package main

// The detailed help (kong's HelpProvider) of the commands whose code
// lives in files of their own subject; every command's --help shows an
// example and its exit statuses.

func (diffCmd) Help() string {
	return `Examples:
  kcompile diff examples/ha-stacked my-change            # two spec directories
  kcompile diff --git origin/main..HEAD . -o markdown    # a pull-request comment
  kcompile diff --golden golden/systemd out/systemd      # a built tree against goldens

Without --secrets both sides are compiled with one throw-away bundle: the
structure and every certificate's identity are compared, key material is
not (the output says so).
` + exitCodes("0", "no difference", "1", "the two sides differ", "2", "an error: a spec that does not compile, a usage mistake")
}

func (planCmd) Help() string {
	return `Examples:
  kcompile plan running/ next/                           # two spec directories
  kcompile plan --git origin/main..HEAD . -o markdown    # a pull-request comment
  kcompile plan old/ new/ --via 1.36.4 --policy policies/

Every state between the two clusters (mixed versions, partial member
sets) is compiled and checked as a spec is, with --policy; the plan is
refused at the first state that fails, naming the step. A state's versions
are the control-plane nodes' apiServerVersion (and the others), and the
workers' kubeletVersion, of schema v1alpha1.
` + exitCodes("0", "a plan, printed", "1", "the plan is refused (a state that does not check, a budget of 0, a downgrade), or a side does not compile", "2", "usage error")
}

func (applyCmd) Help() string {
	return `Examples:
  sudo kcompile apply next/ --work /var/lib/kcompile/up/demo --dry-run
  sudo kcompile apply next/ --work /var/lib/kcompile/up/demo
  sudo kcompile apply next/ --work /var/lib/kcompile/up/demo --resume
  kcompile secrets rotate next/ --ca all && sudo kcompile apply next/ --work /var/lib/kcompile/up/demo --to-end

Plans the change from the spec kcompile up recorded when it booted the
cluster (WORK/spec) to the new one, as kcompile plan does, every state
checked, then takes the steps in order: each node's files of the step's
state laid (only those that differ from the node's), systemd reloaded, the
step's units restarted, its nodes drained first and uncordoned after where
the step says so, and its health gates waited on (the kubelet's lease
renewed and the node Ready, the API server's /readyz, etcd's member and
quorum). The nodes' files must be the recorded spec's build with this
secrets bundle. A step that changes a node's versions lays the programs
of --binaries first and checks them as the install unit does. Steps that
add or remove machines, or need more than a restart, are refused before
anything changes. It stops
at the first failure, naming the step; --resume goes on from there.

A bundle that differs from the one the cluster runs (a stage of kcompile
secrets rotate) is taken only once every flow of the cluster is proven to
work between the two. With --to-end, once a stage is rolled out, the next
is written to --secrets (proven first, as secrets rotate --next does) and
rolled out, until the rotation has ended: one apply performs all of it.
` + exitCodes("0", "applied (or nothing to apply, or a dry run)", "1", "the plan is refused, a step failed or the apply was interrupted (the message says how to go on)", "2", "usage error")
}

func (restoreCmd) Help() string {
	return `Examples:
  sudo kcompile restore /var/lib/etcd-backup/cp1-20261204T120000Z.db examples/ha-stacked
  kcompile restore snapshot.db my-cluster/ --print        # the steps, for hosts kcompile does not reach
  kcompile restore snapshot.db my-cluster/ --rehearse     # into the simulator: what comes back, and how long it takes
  kcompile restore snapshot.db my-cluster/ --ssh-user admin --ssh-key ~/.ssh/id_ed25519

The snapshot is read first, as etcd's own storage: one whose SHA-256 does
not match, with a page bbolt cannot read, whose members are
none of the spec's, or whose API server trusted another client CA than the
bundle's, is refused before anything is stopped. Then every API server,
controller manager and scheduler stops; every member stops; the snapshot
is copied to each and restored with etcdutl under the member's own name and
peer URL, a new cluster token and the revision moved on by 1,000,000,000
(compacted, so that every watcher relists); the data it replaces is moved
aside, not removed. The members start together, then the control plane;
gates: every member healthy and the member list the spec's, every API
server ready, every node Ready with its lease renewed since. The
certificates and the endpoint are the cluster's own, so old kubeconfigs
work unchanged.

On a cluster kcompile up runs, the recorded spec and bundle are used
(--work); over SSH, the spec built with SOURCE_DATE_EPOCH's clock, as
kcompile build built it.
` + exitCodes("0", "restored (every gate held), printed, or rehearsed with every object back", "1", "the snapshot is refused, a step failed (the message names it; the data before the restore stays on each member), or the rehearsal lost objects", "2", "usage error")
}

func (upCmd) Help() string {
	return `Examples:
  sudo kcompile up examples/single-node --binaries .bin/node --images .bin/images
  sudo kcompile down examples/single-node                # from another terminal

Runs until Ctrl-C or kcompile down; needs root (network namespaces,
systemd-nspawn). Everything it made is journalled in the work directory and
removed by down.
` + exitCodes("0", "stopped by Ctrl-C or kcompile down, everything removed", "1", "the cluster could not be booted here or did not come up in --timeout (the reason on stderr)", "2", "usage error")
}

func (downCmd) Help() string {
	return `Examples:
  sudo kcompile down examples/single-node
  sudo kcompile down --work /var/lib/kcompile/up/my-cluster
` + exitCodes("0", "stopped and removed (or nothing was running)", "1", "something could not be removed (named on stderr)", "2", "usage error")
}

func (simCmd) Help() string {
	return `Examples:
  kcompile sim examples/ha-stacked -s secrets.json --until ready
  kcompile sim examples/large -s secrets.json --scenario drill.yaml

kcompile-sim must be beside kcompile or on PATH; kcompile sim --help
prints its own flags.
` + exitCodes("0", "the simulation reached --until or was stopped", "1", "the spec or the bundle has errors, or the simulation failed", "2", "usage error")
}

func (completionCmd) Help() string {
	return `Examples:
  source <(kcompile completion bash)                               # this shell
  kcompile completion bash > /etc/bash_completion.d/kcompile       # every bash
  kcompile completion zsh > "${fpath[1]}/_kcompile"
  kcompile completion fish > ~/.config/fish/completions/kcompile.fish
` + exitCodes("0", "printed", "2", "usage error")
}

func (versionCmd) Help() string {
	return `Examples:
  kcompile version
  kcompile version -o json
` + exitCodes("0", "printed")
}
