package app

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// MemoryLimitRatio is the share of the container's memory limit that the Go runtime's
// soft memory limit is set to when GOMEMLIMIT is not (memoryLimit).
const MemoryLimitRatio = 0.9

// cgroupMemoryLimitFiles are where a container's memory limit is read, cgroup v2 first:
// its memory.max ("max" when unlimited), then cgroup v1's memory.limit_in_bytes (a
// number near 2^63 when unlimited).
var cgroupMemoryLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit derives the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit)
// from the container's memory limit: MemoryLimitRatio of it, so that as the heap nears
// the limit the garbage collector runs more often instead of the kernel killing the
// process, typically during the re-list of every TrainJob and JobSet at a start. The
// other 10% are for what the runtime's limit does not count: the binary's mapped pages
// (about 50 MiB resident) and the kernel's page cache charged to the container.
//
// It returns the limit it set in bytes, 0 when it set none: GOMEMLIMIT is set (the
// runtime honours it, and an operator's choice wins), or no limit file says a limit
// (no cgroup, or unlimited). files are read in order, the first present one decides;
// setLimit is debug.SetMemoryLimit in production. Errors: a limit file that is present
// but does not hold a number or "max".
//
// Below the limit nothing changes: the collector's pace is GOGC's (docs/design/memory.md
// measures what a binding limit costs in CPU).
func memoryLimit(getenv func(string) string, files []string, setLimit func(int64) int64) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("reading the memory limit: %w", err)
		}
		value := strings.TrimSpace(string(data))
		if value == "max" {
			return 0, nil
		}
		limit, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the memory limit from %s: %q is no number of bytes", file, value)
		}
		if limit <= 0 || limit >= math.MaxInt64/2 { // cgroup v1's "unlimited"
			return 0, nil
		}
		soft := int64(float64(limit) * MemoryLimitRatio)
		setLimit(soft)
		return soft, nil
	}
	return 0, nil
}
