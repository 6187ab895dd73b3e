package benchmark

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Machine is what a benchmark ran on, measured when it started, so that figures from
// different machines (or from one machine under different load) are not compared blindly.
type Machine struct {
	Cores      int           `json:"cores"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	FsyncP50   time.Duration `json:"fsync_p50_ns"`
	FsyncP99   time.Duration `json:"fsync_p99_ns"`
	FsyncDir   string        `json:"fsync_dir"`
	Load       string        `json:"load_average,omitempty"` // 1, 5 and 15 minutes, from /proc/loadavg
}

func (m Machine) String() string {
	s := fmt.Sprintf("%d cores (GOMAXPROCS %d); 4 KiB write + fdatasync in %s: p50 %.2f ms, p99 %.2f ms",
		m.Cores, m.GOMAXPROCS, m.FsyncDir, ms(m.FsyncP50), ms(m.FsyncP99))
	if m.Load != "" {
		s += "; load average " + m.Load
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MeasureMachine counts the cores and times samples writes of 4 KiB, each followed by a sync
// of the file's data, in dir (the disk the benchmarks write to): the latency every durable
// commit pays twice.
func MeasureMachine(dir string, samples int) (Machine, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	m := Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), FsyncDir: dir}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	f, err := os.CreateTemp(dir, "agentd-fsync-")
	if err != nil {
		return m, fmt.Errorf("measure fsync in %s: %w", dir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, samples)
	for i := 0; i < max(samples, 1); i++ {
		buf[0] = byte(i)
		start := time.Now()
		if _, err := f.WriteAt(buf, int64(i%16)*4096); err != nil {
			return m, fmt.Errorf("measure fsync in %s: %w", dir, err)
		}
		if err := fdatasync(f); err != nil {
			return m, fmt.Errorf("measure fsync in %s: %w", dir, err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	m.FsyncP50, m.FsyncP99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return m, nil
}
