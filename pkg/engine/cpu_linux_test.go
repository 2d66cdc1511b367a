package engine

import (
	"syscall"
	"time"
)

// processCPU is the CPU time, user and system, that the process has used so far; 0 if
// the kernel does not say.
func processCPU() time.Duration { return rusageCPU(syscall.RUSAGE_SELF) }

// threadCPU is the CPU time, user and system, that the calling OS thread has used so
// far; 0 if the kernel does not say. Unlike wall time it leaves out the time the thread
// waited for a CPU, so a benchmark on a loaded machine can still compare costs (call
// runtime.LockOSThread first, so the goroutine stays on the thread measured).
func threadCPU() time.Duration { return rusageCPU(1) } // RUSAGE_THREAD, Linux only

func rusageCPU(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
