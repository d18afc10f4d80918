// Package metrics is the daemon's small Prometheus exposition: counters,
// gauges and histograms with labels, written in the text format (0.0.4),
// plus the process's own CPU, memory, descriptors and goroutines.
//
// It replaces the Prometheus client library, whose package initialisers
// (with protobuf's and procfs's) ran in every airlock process, `airlock run`
// included, though only the daemon serves metrics. It must never do work at
// package initialisation, and never block a caller on a scrape for longer
// than a mutex.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Registry holds metric families and writes them in name order.
type Registry struct {
	mu       sync.Mutex
	families map[string]family
	start    time.Time
}

type family interface {
	header() (help, typ string)
	write(w *bufio.Writer, name string)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{families: map[string]family{}, start: time.Now()}
}

func (r *Registry) add(name string, f family) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.families[name]; dup {
		panic("metrics: " + name + " registered twice")
	}
	r.families[name] = f
}

// ContentType is the exposition format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Write writes every family, then the process's own metrics.
func (r *Registry) Write(out io.Writer) error {
	w := bufio.NewWriter(out)
	r.mu.Lock()
	names := make([]string, 0, len(r.families))
	for n := range r.families {
		names = append(names, n)
	}
	sort.Strings(names)
	fams := make([]family, len(names))
	for i, n := range names {
		fams[i] = r.families[n]
	}
	r.mu.Unlock()
	for i, n := range names {
		help, typ := fams[i].header()
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", n, escapeHelp(help), n, typ)
		fams[i].write(w, n)
	}
	r.writeProcess(w)
	return w.Flush()
}

// key joins label values into one map key (0xff never occurs in UTF-8).
func key(values []string) string { return strings.Join(values, "\xff") }

func labelString(names, values []string, extra ...string) string {
	if len(names) == 0 && len(extra) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		b.WriteString(escapeValue(values[i]))
		b.WriteByte('"')
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if len(names) > 0 || i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(extra[i])
		b.WriteString(`="`)
		b.WriteString(extra[i+1])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

func escapeValue(s string) string { return valueEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// vec is the label handling shared by every kind.
type vec[T any] struct {
	help, typ string
	labels    []string
	mu        sync.Mutex
	children  map[string]*T
	order     map[string][]string
	make      func() *T
}

func (v *vec[T]) header() (string, string) { return v.help, v.typ }

func (v *vec[T]) with(values ...string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %d label values for %d labels", len(values), len(v.labels)))
	}
	k := key(values)
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.children[k]
	if !ok {
		c = v.make()
		v.children[k] = c
		v.order[k] = append([]string(nil), values...)
	}
	return c
}

// each calls f for every child in label order.
func (v *vec[T]) each(f func(values []string, c *T)) {
	v.mu.Lock()
	keys := make([]string, 0, len(v.children))
	for k := range v.children {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	type kv struct {
		values []string
		c      *T
	}
	items := make([]kv, len(keys))
	for i, k := range keys {
		items[i] = kv{v.order[k], v.children[k]}
	}
	v.mu.Unlock()
	for _, it := range items {
		f(it.values, it.c)
	}
}

func newVec[T any](help, typ string, labels []string, mk func() *T) *vec[T] {
	return &vec[T]{help: help, typ: typ, labels: labels, children: map[string]*T{}, order: map[string][]string{}, make: mk}
}

// Value is a float that is set or added to atomically (under its own
// mutex: metrics are updated far less often than contention would matter).
type Value struct {
	mu sync.Mutex
	v  float64
}

// Add adds d.
func (c *Value) Add(d float64) { c.mu.Lock(); c.v += d; c.mu.Unlock() }

// Inc adds one.
func (c *Value) Inc() { c.Add(1) }

// Set sets the value (gauges).
func (c *Value) Set(v float64) { c.mu.Lock(); c.v = v; c.mu.Unlock() }

// Get returns the value.
func (c *Value) Get() float64 { c.mu.Lock(); defer c.mu.Unlock(); return c.v }

// ValueVec is a counter or gauge family with labels.
type ValueVec struct{ *vec[Value] }

// With returns the series of these label values, made on first use.
func (v ValueVec) With(values ...string) *Value { return v.with(values...) }

func (v ValueVec) write(w *bufio.Writer, name string) {
	v.each(func(values []string, c *Value) {
		fmt.Fprintf(w, "%s%s %s\n", name, labelString(v.labels, values), formatFloat(c.Get()))
	})
}

// Counter registers a counter family (labels may be none: With()).
func (r *Registry) Counter(name, help string, labels ...string) ValueVec {
	v := ValueVec{newVec(help, "counter", labels, func() *Value { return &Value{} })}
	r.add(name, v)
	return v
}

// Gauge registers a gauge family.
func (r *Registry) Gauge(name, help string, labels ...string) ValueVec {
	v := ValueVec{newVec(help, "gauge", labels, func() *Value { return &Value{} })}
	r.add(name, v)
	return v
}

// Histogram counts observations in cumulative buckets.
type Histogram struct {
	mu     sync.Mutex
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.n++
	h.mu.Unlock()
}

// HistogramVec is a histogram family with labels.
type HistogramVec struct{ *vec[Histogram] }

// With returns the series of these label values, made on first use.
func (v HistogramVec) With(values ...string) *Histogram { return v.with(values...) }

func (v HistogramVec) write(w *bufio.Writer, name string) {
	v.each(func(values []string, h *Histogram) {
		h.mu.Lock()
		counts := append([]uint64(nil), h.counts...)
		sum, n := h.sum, h.n
		h.mu.Unlock()
		var cum uint64
		for i, b := range h.bounds {
			cum += counts[i]
			fmt.Fprintf(w, "%s_bucket%s %d\n", name, labelString(v.labels, values, "le", formatFloat(b)), cum)
		}
		fmt.Fprintf(w, "%s_bucket%s %d\n", name, labelString(v.labels, values, "le", "+Inf"), n)
		fmt.Fprintf(w, "%s_sum%s %s\n", name, labelString(v.labels, values), formatFloat(sum))
		fmt.Fprintf(w, "%s_count%s %d\n", name, labelString(v.labels, values), n)
	})
}

// Histogram registers a histogram family with the given upper bounds
// (ascending).
func (r *Registry) Histogram(name, help string, bounds []float64, labels ...string) HistogramVec {
	if !sort.Float64sAreSorted(bounds) {
		panic("metrics: " + name + ": bucket bounds not ascending")
	}
	bs := append([]float64(nil), bounds...)
	v := HistogramVec{newVec(help, "histogram", labels, func() *Histogram {
		return &Histogram{bounds: bs, counts: make([]uint64, len(bs)+1)}
	})}
	r.add(name, v)
	return v
}

// GaugeFunc registers a gauge family whose series are read at scrape time.
func (r *Registry) GaugeFunc(name, help, label string, read func() map[string]float64) {
	r.add(name, gaugeFunc{help: help, label: label, read: read})
}

type gaugeFunc struct {
	help, label string
	read        func() map[string]float64
}

func (g gaugeFunc) header() (string, string) { return g.help, "gauge" }

func (g gaugeFunc) write(w *bufio.Writer, name string) {
	m := g.read()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s%s %s\n", name, labelString([]string{g.label}, []string{k}), formatFloat(m[k]))
	}
}

// writeProcess writes the process metrics Prometheus's conventions name
// (CPU, resident memory, descriptors, start time) and the Go runtime's
// goroutines and heap.
func (r *Registry) writeProcess(w *bufio.Writer) {
	gauge := func(name, typ, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, typ, name, formatFloat(v))
	}
	if cpu, rss, ok := procStat(); ok {
		gauge("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu)
		gauge("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss)
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		gauge("process_open_fds", "gauge", "Number of open file descriptors.", float64(len(fds)))
	}
	gauge("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", float64(r.start.UnixNano())/1e9)
	gauge("go_goroutines", "gauge", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine()))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gauge("go_memstats_heap_alloc_bytes", "gauge", "Number of heap bytes allocated and still in use.", float64(ms.HeapAlloc))
	gauge("go_memstats_sys_bytes", "gauge", "Number of bytes obtained from system.", float64(ms.Sys))
}

// procStat reads this process's CPU seconds and resident bytes from
// /proc/self/stat (fields 14, 15 and 24; ticks are 100 Hz on Linux).
func procStat() (cpu, rss float64, ok bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return 0, 0, false
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	pages, _ := strconv.ParseFloat(f[21], 64)
	return (ut + st) / 100, pages * float64(os.Getpagesize()), true
}
