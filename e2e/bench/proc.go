package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. It
// is 100 on every Linux architecture Go supports (the kernel ABI fixes it,
// whatever CONFIG_HZ is).
const clockTicks = 100

// ProcCPUSeconds returns the user+system CPU time, in seconds, that process
// pid has used so far (proc(5): fields 14 and 15 of /proc/<pid>/stat).
// Errors: the process does not exist or the file cannot be parsed.
func ProcCPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(data))
}

// parseStatCPU parses utime+stime out of a /proc/<pid>/stat line. The command
// name (field 2) may hold spaces and parentheses, so fields are counted from
// the last ')'.
func parseStatCPU(stat string) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("malformed stat line %q", stat)
	}
	fields := strings.Fields(stat[end+1:])
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("short stat line %q", stat)
	}
	utime, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// ProcPeakRSSBytes returns the peak resident set size of process pid in bytes
// (VmHWM of /proc/<pid>/status, which the kernel keeps for the process's
// life, so no sampling can miss the peak). Errors: no such process, or no
// VmHWM line.
func ProcPeakRSSBytes(pid int) (int64, error) { return procStatusBytes(pid, "VmHWM") }

// ProcRSSBytes returns the resident set size of process pid now, in bytes (VmRSS of
// /proc/<pid>/status). Errors: no such process, or no VmRSS line.
func ProcRSSBytes(pid int) (int64, error) { return procStatusBytes(pid, "VmRSS") }

// procStatusBytes returns the field of /proc/<pid>/status, a size in kB, in bytes.
func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseStatusBytes(bufio.NewScanner(f), field)
}

// parseStatusBytes returns the size in field ("VmHWM", "VmRSS") of a /proc/<pid>/status
// read from sc, in bytes (the file gives kB). Errors: no such line, or not "<n> kB".
func parseStatusBytes(sc *bufio.Scanner, field string) (int64, error) {
	prefix := field + ":"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, prefix))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected %s line %q", field, line)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s line", field)
}

// MachineCPUSeconds returns the busy (non-idle, non-iowait) CPU seconds of all
// cores since boot, from the "cpu" line of /proc/stat; the difference between
// two readings over the wall time and core count is the machine's utilisation.
func MachineCPUSeconds() (float64, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[0] != "cpu" {
			continue
		}
		var busy uint64
		for i, v := range fields[1:] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat: %w", err)
			}
			// user nice system idle iowait irq softirq steal guest guest_nice;
			// guest time is already counted in user.
			if i == 3 || i == 4 || i >= 8 {
				continue
			}
			busy += n
		}
		return float64(busy) / clockTicks, nil
	}
	return 0, fmt.Errorf("/proc/stat has no cpu line")
}
