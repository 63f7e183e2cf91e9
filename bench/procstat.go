package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux this runs on (glibc's sysconf(_SC_CLK_TCK)).
const clockTicks = 100

// cpuSnapshot is CPU time (seconds) so far: this process's and that of
// each PostgreSQL backend connected to the bench's database.
type cpuSnapshot struct {
	self     float64
	backends map[int]float64
}

// cpuTimes reads a cpuSnapshot. Backends are found in pg_stat_activity and
// read from /proc, so only a server on this machine is measured; without
// /proc the backends' figure stays 0.
func (e *env) cpuTimes(ctx context.Context) (cpuSnapshot, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSnapshot{}, fmt.Errorf("getrusage: %w", err)
	}
	s := cpuSnapshot{
		self:     float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9,
		backends: map[int]float64{},
	}
	var pids []int
	if err := e.db.SelectContext(ctx, &pids, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"); err != nil {
		return s, fmt.Errorf("list backends: %w", err)
	}
	for _, pid := range pids {
		if t, ok := procCPU(pid); ok {
			s.backends[pid] = t
		}
	}
	return s, nil
}

// postgresSince is the backends' CPU time since the earlier snapshot; a
// backend that connected since counts from zero.
func (s cpuSnapshot) postgresSince(earlier cpuSnapshot) float64 {
	var d float64
	for pid, t := range s.backends {
		d += t - earlier.backends[pid]
	}
	return d
}

// procCPU reads a process's user + system CPU time in seconds.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: fields after its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseFloat(f[11], 64) // utime, field 14
	k, err2 := strconv.ParseFloat(f[12], 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (u + k) / clockTicks, true
}

// vmRSS reads a process's resident set size in KiB (0 when unknown).
func vmRSS(pid int) int64 { return procStatusKiB(pid, "VmRSS:") }

// vmHWM reads a process's peak resident set size in KiB.
func vmHWM(pid int) int64 { return procStatusKiB(pid, "VmHWM:") }

func procStatusKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
