package app

import (
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger returns a zap logger behind logr; verbosity v maps to zap level -v.
func newLogger(format string, v int) (logr.Logger, error) {
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
	case "text":
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
	default:
		return logr.Logger{}, fmt.Errorf(`--log-format %q: want "json" or "text"`, format)
	}
	zc.Level = zap.NewAtomicLevelAt(zapcore.Level(-v))
	zc.Sampling = nil
	zc.EncoderConfig.TimeKey, zc.EncoderConfig.EncodeTime = "ts", zapcore.ISO8601TimeEncoder
	// logr verbosity v is zap level -v: print it as "info" and carry v in its own field.
	zc.EncoderConfig.EncodeLevel = func(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
		if l < zapcore.InfoLevel {
			l = zapcore.InfoLevel
		}
		zapcore.LowercaseLevelEncoder(l, enc)
	}
	z, err := zc.Build()
	if err != nil {
		return logr.Logger{}, fmt.Errorf("building logger: %w", err)
	}
	return zapr.NewLoggerWithOptions(z, zapr.LogInfoLevel("v")), nil
}

// podNamespace is the namespace this pod runs in, "default" outside a cluster.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(data))
	}
	return "default"
}

// ptrBool is *b, false when b is nil.
func ptrBool(b *bool) bool { return b != nil && *b }
