package manager

import (
	"strconv"

	"github.com/airlock-dev/airlock/internal/metrics"
)

// Metrics are the daemon's Prometheus metrics.
type Metrics struct {
	Registry      *metrics.Registry
	createSeconds metrics.HistogramVec
	execSeconds   *metrics.Histogram
	poolReady     metrics.ValueVec
	poolReadyRT   metrics.ValueVec
	poolWarmups   metrics.ValueVec
	queueDepth    *metrics.Value
	errors        metrics.ValueVec
	auditDropped  *metrics.Value
	recordDropped *metrics.Value
}

// latencyBuckets span 0.5 ms to 30 s.
var latencyBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30}

// NewMetrics makes the metrics in a registry of their own.
func NewMetrics() *Metrics {
	r := metrics.NewRegistry()
	return &Metrics{
		Registry: r,
		createSeconds: r.Histogram("airlock_sandbox_create_seconds",
			"Time to create a sandbox for a caller, by source (pool or cold).", latencyBuckets, "source"),
		execSeconds: r.Histogram("airlock_exec_seconds", "Duration of run-and-wait exec requests.", latencyBuckets).With(),
		poolReady:   r.Gauge("airlock_pool_ready", "Ready members of each warm pool of the native runtime.", "image", "policy"),
		poolReadyRT: r.Gauge("airlock_pool_ready_by_runtime", "Ready members of each warm pool, by runtime.", "runtime", "image", "policy"),
		poolWarmups: r.Counter("airlock_pool_warmups_total",
			"Warm-ups of new warm pool members (a hidden first command that pays its one-time costs), by runtime and result (ok, failed, skipped: the root has no true).", "runtime", "result"),
		queueDepth: r.Gauge("airlock_admission_queue_depth", "Creations waiting for room.").With(),
		errors:     r.Counter("airlock_errors_total", "Errors, by kind (API error codes, create, exec).", "kind"),
		auditDropped: r.Counter("airlock_egress_audit_dropped_total",
			"Egress audit records not stored: the writer's buffer was full or the store failed (the daemon's log still has them).").With(),
		recordDropped: r.Counter("airlock_record_events_dropped_total",
			"Activity record events not stored: the store failed, or the daemon was shutting down.").With(),
	}
}

// Error counts an error of kind.
func (m *Metrics) Error(kind string) { m.errors.With(kind).Inc() }

// bind adds the gauges that read the manager's state.
func (m *Metrics) bind(mg *Manager) {
	m.Registry.GaugeFunc("airlock_sandboxes", "Sandboxes by state (pooled: warm pool members not yet handed out).", "state",
		func() map[string]float64 {
			out := map[string]float64{}
			for state, n := range mg.CountByState() {
				out[state] = float64(n)
			}
			return out
		})
	m.Registry.GaugeFunc("airlock_sandboxes_asleep", "Running sandboxes whose agent sleeps (sleep_after), by runtime.", "runtime",
		func() map[string]float64 {
			out := map[string]float64{}
			for _, sb := range mg.snapshot() {
				sb.mu.Lock()
				if sb.asleep && !sb.isFinal() && sb.rt != nil {
					out[runtimeOf(sb.rt)]++
				}
				sb.mu.Unlock()
			}
			return out
		})
	if vs := mg.cfg.Volumes; vs != nil {
		m.Registry.GaugeFunc("airlock_volume_spares", "Empty volumes made ahead for cold creations, by disk size in bytes (spare_volumes).", "size",
			func() map[string]float64 {
				out := map[string]float64{}
				for size, n := range vs.Spares() {
					out[strconv.FormatInt(size, 10)] = float64(n)
				}
				return out
			})
	}
}
