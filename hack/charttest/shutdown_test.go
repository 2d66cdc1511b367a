package charttest

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestTerminationGracePeriodCoversTheShutdown: a stopping replica serves on for
// shutdownDelay, then closes its servers (up to 5 s) and writes the progress reports
// it accepted (up to 10 s), so the chart refuses a terminationGracePeriodSeconds
// shorter than shutdownDelay + 15 s, naming both values and the least that fits (the
// Helm leg of issue 38 saw creates refused during failover with 3 s). shutdownDelay is
// a Go duration: every unit of values.schema.json's pattern is read.
func TestTerminationGracePeriodCoversTheShutdown(t *testing.T) {
	for _, tc := range []struct {
		grace int
		delay string
		least int // 0: renders
	}{
		{grace: 30, delay: "5s"}, // the defaults
		{grace: 20, delay: "5s"}, // exactly enough
		{grace: 19, delay: "5s", least: 20},
		{grace: 3, delay: "5s", least: 20},
		{grace: 16, delay: "500ms"}, // 15.5 s, rounded up
		{grace: 15, delay: "500ms", least: 16},
		{grace: 75, delay: "1m"},
		{grace: 74, delay: "1m", least: 75},
		{grace: 46, delay: "30s500ms"}, // 45.5 s, rounded up
		{grace: 45, delay: "30s500ms", least: 46},
		{grace: 17, delay: "1.5s"},
		{grace: 16, delay: "1.5s", least: 17},
		{grace: 15, delay: "0s"},
		{grace: 14, delay: "0s", least: 15},
	} {
		t.Run(fmt.Sprintf("%ds for shutdownDelay %s", tc.grace, tc.delay), func(t *testing.T) {
			values := fmt.Sprintf("terminationGracePeriodSeconds: %d\nshutdownDelay: %s\n", tc.grace, tc.delay)
			r, err := render(t, values)
			if tc.least > tc.grace {
				errContains(t, err, fmt.Sprintf("terminationGracePeriodSeconds %d is shorter than shutdownDelay (%s) + 15 s", tc.grace, tc.delay),
					fmt.Sprintf("at least %d", tc.least))
				return
			}
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			d := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
			if got := d.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != int64(tc.grace) {
				t.Errorf("terminationGracePeriodSeconds %v, want %d", got, tc.grace)
			}
		})
	}
}
