package main

import (
	"fmt"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// evalBound runs each stage of an evaluation on a goroutine of its own
// and gives up on it when it runs longer than timeout or grows the heap by
// more than memory since it started. CUE cannot be interrupted: a stage
// given up on goes on until the command ends the process, which it does
// right after reporting it.
func evalBound(timeout time.Duration, memory uint64) func(func()) error {
	return func(eval func()) error {
		done := make(chan struct{})
		base := heapBytes()
		go func() {
			defer close(done)
			eval()
		}()
		deadline := time.NewTimer(timeout)
		defer deadline.Stop()
		// A stage allocates at most a few hundred MiB a second; a look
		// every 10 ms stops it near the bound.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return nil
			case <-deadline.C:
				return fmt.Errorf("ran longer than %s (--eval-timeout)", timeout)
			case <-tick.C:
				if h := heapBytes(); h > base && h-base > memory {
					return fmt.Errorf("grew the heap by more than %s (--eval-memory)", formatSize(memory))
				}
			}
		}
	}
}

// heapBytes is the memory held by live and not yet swept heap objects.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// parseSize reads a size such as 512MiB, 2GiB or 1073741824.
func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}}
	num, mult := s, uint64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("--eval-memory %s is not a size such as 512MiB or 2GiB", shellWord(s))
	}
	return n * mult, nil
}

func formatSize(n uint64) string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%dB", n)
}
