package sim

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/configz"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
)

func newRegistry() (basecompatibility.ComponentGlobalsRegistry, error) {
	featureGate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	registry := basecompatibility.NewComponentGlobalsRegistry()
	if err := registry.Register(basecompatibility.DefaultKubeComponent, compatibility.DefaultBuildEffectiveVersion(), featureGate); err != nil {
		return nil, err
	}
	return registry, nil
}

// exitHook is what klog.FlushAndExit calls in a simulation's process.
// Kubernetes' components end their process when they give up: a
// controller-manager still building its controllers when the API server
// goes away exits when its namespace controller finds nothing to
// discover, and systemd would restart that one component. Once the
// simulation has stopped one of its components, such a request is taken
// as a stopped component winding down while what it talks to goes away:
// its goroutine ends (runtime.Goexit, which does not return to the
// caller), the process goes on. Before, no component is expected to give
// up: the process ends, saying where the request came from.
func exitHook(componentStopped *atomic.Bool) func(int) {
	return func(code int) {
		if componentStopped.Load() {
			fmt.Fprintf(os.Stderr, "kcompile sim: a stopped Kubernetes component asked to end the process (exit code %d); its goroutine ends instead\n", code)
			runtime.Goexit()
		}
		fmt.Fprintf(os.Stderr, "kcompile sim: a Kubernetes component ended the process (exit code %d) from:\n%s", code, debug.Stack())
		os.Exit(code)
	}
}

// startControllerManager runs kube-controller-manager in this process
// with the given flags until ctx ends. When it stops it releases its
// leader Lease instead of exiting the process
// (ControllerManagerReleaseLeaderElectionLockOnExit, set by Start).
func startControllerManager(ctx context.Context, args []string) (<-chan error, error) {
	registry, err := newRegistry()
	if err != nil {
		return nil, err
	}
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, err
	}
	s.ComponentGlobalsRegistry = registry
	all, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	named := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	s.ParsedFlags = &named
	if err := registry.Set(); err != nil {
		return nil, err
	}
	config, err := s.Config(ctx, all, disabled, aliases)
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager config: %w", err)
	}
	errc := make(chan error, 1)
	// Run registers its configuration page in a process-wide registry
	// and gives up when the name is taken: make room before each start,
	// and wait for the registration so the next start finds it.
	configz.Delete(kcmapp.ConfigzName)
	go func() {
		err := kcmapp.Run(ctx, config.Complete())
		// The leader reserves the process-wide informer name
		// "kube-controller-manager" and never releases it: a real
		// controller-manager exits with its leadership. Release it, so
		// that the next leader in this process can start its
		// controllers. Only controller-managers reserve names here.
		cache.ResetInformerNamesForTesting()
		errc <- err
	}()
	for range 500 {
		if _, err := configz.New(kcmapp.ConfigzName); err != nil {
			break
		}
		configz.Delete(kcmapp.ConfigzName)
		time.Sleep(10 * time.Millisecond)
	}
	configz.Delete(kcmapp.ConfigzName)
	return errc, nil
}

// startScheduler runs kube-scheduler in this process with the given flags
// until ctx ends. The scheduler's own leader election exits the process
// when it stops leading, so the simulation elects for it: the same Lease
// (the compiled configuration's lock, name and durations), held under the
// node's name, and the scheduler runs while its node leads.
func startScheduler(ctx context.Context, node string, args []string) (<-chan error, error) {
	setup := func() (*schedconfig.CompletedConfig, *scheduler.Scheduler, error) {
		registry, err := newRegistry()
		if err != nil {
			return nil, nil, err
		}
		opts := schedoptions.NewOptions()
		opts.ComponentGlobalsRegistry = registry
		fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
		for _, f := range opts.Flags.FlagSets {
			fs.AddFlagSet(f)
		}
		if err := fs.Parse(args); err != nil {
			return nil, nil, fmt.Errorf("kube-scheduler flags: %w", err)
		}
		if err := registry.Set(); err != nil {
			return nil, nil, err
		}
		cc, sched, err := schedapp.Setup(ctx, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("kube-scheduler: %w", err)
		}
		return cc, sched, nil
	}
	cc, sched, err := setup()
	if err != nil {
		return nil, err
	}
	le := cc.ComponentConfig.LeaderElection
	errc := make(chan error, 1)
	if !le.LeaderElect {
		cc.LeaderElection = nil
		cc.ComponentConfig.LeaderElection.LeaderElect = false
		go func() { configz.Delete("componentconfig"); errc <- schedapp.Run(ctx, cc, sched) }()
		return errc, nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.ResourceNamespace, Name: le.ResourceName},
		Client:     cc.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: node},
	}
	go func() {
		defer close(errc)
		for ctx.Err() == nil {
			elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: lock, ReleaseOnCancel: true, Name: "kube-scheduler",
				LeaseDuration: orDefault(le.LeaseDuration.Duration, 15*time.Second),
				RenewDeadline: orDefault(le.RenewDeadline.Duration, 10*time.Second),
				RetryPeriod:   orDefault(le.RetryPeriod.Duration, 2*time.Second),
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(ctx context.Context) {
						cc.LeaderElection = nil
						cc.ComponentConfig.LeaderElection.LeaderElect = false
						// Configuration pages are registered once per
						// process; the leader takes them over.
						configz.Delete("componentconfig")
						_ = schedapp.Run(ctx, cc, sched)
					},
					OnStoppedLeading: func() {},
				},
			})
			if err != nil {
				errc <- err
				return
			}
			elector.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			// Leadership lost: a scheduler runs once, so start afresh.
			if cc, sched, err = setup(); err != nil {
				errc <- err
				return
			}
		}
	}()
	return errc, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
