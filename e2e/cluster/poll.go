package cluster

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

// pollInterval is how often Eventually and Consistently check.
const pollInterval = 250 * time.Millisecond

// Eventually polls check every 250ms until it reports done, and fails the test after
// timeout with the state the last check described.
func Eventually(t testing.TB, timeout time.Duration, what string, check func(ctx context.Context) (done bool, state string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	state := "not checked yet"
	for {
		var done bool
		if done, state = check(ctx); done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached within %s; last state: %s", what, timeout, state)
		case <-tick.C:
		}
	}
}

// Consistently polls check every 250ms for the whole period and fails the test as soon
// as it reports a violation. Each check gets its own context (10s), not one bounded by
// the period, so a check started near the end is not cut short and misread.
func Consistently(t testing.TB, period time.Duration, what string, check func(ctx context.Context) (ok bool, state string)) {
	t.Helper()
	end := time.After(period)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, state := check(ctx)
		cancel()
		if !ok {
			t.Fatalf("%s: violated: %s", what, state)
		}
		select {
		case <-end:
			return
		case <-tick.C:
		}
	}
}

// FreeAddr returns a 127.0.0.1:port address that was free a moment ago, for a process a
// test starts beside the cluster (e.g. the controller's metrics and probe endpoints).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addrs, err := FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// FreeAddrs returns n distinct 127.0.0.1:port addresses that were free a moment ago.
// Errors: the kernel gave no free port.
func FreeAddrs(n int) ([]string, error) {
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, n)
	for i, p := range ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs, nil
}
