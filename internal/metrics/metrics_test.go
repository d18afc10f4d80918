package metrics

import (
	"strings"
	"testing"
)

func TestExposition(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("t_errors_total", "Errors.\nBy kind.", "kind")
	c.With(`a"b\c`).Inc()
	c.With("exec").Add(2)
	g := r.Gauge("t_depth", "Depth.").With()
	g.Set(3)
	h := r.Histogram("t_seconds", "Latency.", []float64{0.1, 1}, "source")
	h.With("pool").Observe(0.05)
	h.With("pool").Observe(0.1) // on a bound: counted in that bucket
	h.With("pool").Observe(5)
	r.GaugeFunc("t_state", "By state.", "state", func() map[string]float64 { return map[string]float64{"running": 2, "paused": 1} })
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	want := `# HELP t_depth Depth.
# TYPE t_depth gauge
t_depth 3
# HELP t_errors_total Errors.\nBy kind.
# TYPE t_errors_total counter
t_errors_total{kind="a\"b\\c"} 1
t_errors_total{kind="exec"} 2
# HELP t_seconds Latency.
# TYPE t_seconds histogram
t_seconds_bucket{source="pool",le="0.1"} 2
t_seconds_bucket{source="pool",le="1"} 2
t_seconds_bucket{source="pool",le="+Inf"} 3
t_seconds_sum{source="pool"} 5.15
t_seconds_count{source="pool"} 3
# HELP t_state By state.
# TYPE t_state gauge
t_state{state="paused"} 1
t_state{state="running"} 2
`
	if !strings.HasPrefix(out, want) {
		t.Fatalf("exposition:\n%s\nwant prefix:\n%s", out, want)
	}
	for _, name := range []string{"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ", "go_goroutines "} {
		if !strings.Contains(out, "\n"+name) {
			t.Errorf("no %s in\n%s", name, out)
		}
	}
}

func TestLabelCountChecked(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("t_total", "T.", "kind")
	defer func() {
		if recover() == nil {
			t.Fatal("a series with the wrong number of label values was accepted")
		}
	}()
	c.With("a", "b")
}
