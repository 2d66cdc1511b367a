//go:build !linux

package engine

import "time"

// processCPU and threadCPU are 0 where they are not read: the benchmarks then report
// no CPU figure.
func processCPU() time.Duration { return 0 }

func threadCPU() time.Duration { return 0 }
