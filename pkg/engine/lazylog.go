package engine

import "github.com/go-logr/logr"

// withLazyValues returns logger with kvs attached lazily: they reach the underlying
// sink only with an entry that is actually written. logr's WithValues hands the pairs
// to the sink at once, and zap encodes them then — per sync, for every sync, while at
// the default verbosity almost no sync logs anything (about 2.5% of the controller's
// CPU while admitting a burst, issue 9's profile).
func withLazyValues(logger logr.Logger, kvs ...any) logr.Logger {
	sink := logger.GetSink()
	if sink == nil {
		return logger
	}
	// One more frame (lazySink's method) sits between the caller and the sink.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return logger.WithSink(&lazySink{sink: sink, kvs: kvs})
}

// lazySink holds key/value pairs for the entries its sink writes.
type lazySink struct {
	sink logr.LogSink
	kvs  []any
}

var (
	_ logr.CallDepthLogSink       = (*lazySink)(nil)
	_ logr.CallStackHelperLogSink = (*lazySink)(nil)
)

// GetCallStackHelper returns the wrapped sink's helper (t.Helper for test loggers), so
// the caller is found through this sink's frames too.
func (l *lazySink) GetCallStackHelper() func() {
	if h, ok := l.sink.(logr.CallStackHelperLogSink); ok {
		return h.GetCallStackHelper()
	}
	return func() {}
}

// Init does nothing: the wrapped sink was initialised by the logger it came from.
func (l *lazySink) Init(logr.RuntimeInfo) {}

func (l *lazySink) Enabled(level int) bool { return l.sink.Enabled(level) }

func (l *lazySink) Info(level int, msg string, kvs ...any) {
	l.GetCallStackHelper()()
	l.sink.Info(level, msg, l.with(kvs)...)
}

func (l *lazySink) Error(err error, msg string, kvs ...any) {
	l.GetCallStackHelper()()
	l.sink.Error(err, msg, l.with(kvs)...)
}

func (l *lazySink) WithValues(kvs ...any) logr.LogSink {
	return &lazySink{sink: l.sink, kvs: l.with(kvs)}
}

func (l *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{sink: l.sink.WithName(name), kvs: l.kvs}
}

func (l *lazySink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := l.sink.(logr.CallDepthLogSink); ok {
		return &lazySink{sink: cd.WithCallDepth(depth), kvs: l.kvs}
	}
	return l
}

// with returns l.kvs followed by kvs, never sharing kvs' backing array with l.kvs.
func (l *lazySink) with(kvs []any) []any {
	if len(kvs) == 0 {
		return l.kvs
	}
	out := make([]any, 0, len(l.kvs)+len(kvs))
	return append(append(out, l.kvs...), kvs...)
}
