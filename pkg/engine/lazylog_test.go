package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// countingSink counts WithValues calls on the sink it wraps.
type countingSink struct {
	logr.LogSink
	withValues *int
}

func (c countingSink) WithValues(kvs ...any) logr.LogSink {
	*c.withValues++
	return countingSink{c.LogSink.WithValues(kvs...), c.withValues}
}

// withLazyValues: written entries carry the pairs (the logger's own first, then
// WithValues', then the call's) and the caller's file and line; the underlying sink's
// WithValues is never called, so nothing is encoded for entries that are not written.
func TestWithLazyValues(t *testing.T) {
	var lines []string
	logger := funcr.NewJSON(func(obj string) { lines = append(lines, obj) }, funcr.Options{LogCaller: funcr.All, Verbosity: 1})

	lazy := withLazyValues(logger, "stage", "status", "trainJob", "team-a/llm").WithValues("hash", "abc").WithName("sync")
	lazy.V(2).Info("not written") // above the verbosity
	lazy.Info("written", "result", "continue")
	lazy.Error(errors.New("boom"), "failed")

	if len(lines) != 2 {
		t.Fatalf("lines = %q, want 2", lines)
	}
	for _, want := range []string{`"logger":"sync"`, `"msg":"written"`, `"stage":"status","trainJob":"team-a/llm","hash":"abc","result":"continue"`, `"file":"lazylog_test.go"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("info line %s lacks %s", lines[0], want)
		}
	}
	for _, want := range []string{`"msg":"failed"`, `"error":"boom"`, `"stage":"status","trainJob":"team-a/llm","hash":"abc"`, `"file":"lazylog_test.go"`} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("error line %s lacks %s", lines[1], want)
		}
	}

	calls := 0
	counted := logger.WithSink(countingSink{logger.GetSink(), &calls})
	withLazyValues(counted, "stage", "status").WithValues("hash", "abc").V(2).Info("not written")
	if calls != 0 {
		t.Errorf("underlying WithValues called %d times, want 0: values are encoded only for written entries", calls)
	}
}
