package record

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func (r *Recorder) usageLoop(interval time.Duration) {
	defer close(r.usageEnd)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.Sample()
		}
	}
}

// Sample writes one usage event from the sandbox's cgroup: CPU time
// (cpuacct.usage on v1, cpu.stat's usage_usec on v2), memory in use and
// its peak, and the number of tasks.
func (r *Recorder) Sample() {
	e := Usage(r.cgroups)
	e.Time = time.Now().UTC()
	r.w.Write(e)
}

// Usage reads one usage sample from cgroup directories (v1: one per
// hierarchy; v2: one). A counter no directory has is left out.
func Usage(dirs []string) *Event {
	e := &Event{Type: TypeUsage}
	read := func(name string) (string, bool) {
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, name)); err == nil {
				return strings.TrimSpace(string(b)), true
			}
		}
		return "", false
	}
	num := func(s string) *uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil
		}
		return &n
	}
	if s, ok := read("cpuacct.usage"); ok {
		e.CPUNs = num(s)
	} else if s, ok := read("cpu.stat"); ok {
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				if n := num(v); n != nil {
					ns := *n * 1000
					e.CPUNs = &ns
				}
			}
		}
	}
	if s, ok := read("memory.usage_in_bytes"); ok {
		e.MemoryBytes = num(s)
	} else if s, ok := read("memory.current"); ok {
		e.MemoryBytes = num(s)
	}
	if s, ok := read("memory.max_usage_in_bytes"); ok {
		e.MemoryPeak = num(s)
	} else if s, ok := read("memory.peak"); ok {
		e.MemoryPeak = num(s)
	}
	if s, ok := read("pids.current"); ok {
		e.Pids = num(s)
	}
	return e
}
