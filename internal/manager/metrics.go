package manager

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the daemon's Prometheus metrics.
type Metrics struct {
	Registry      *prometheus.Registry
	createSeconds *prometheus.HistogramVec
	execSeconds   prometheus.Histogram
	poolReady     *prometheus.GaugeVec
	queueDepth    prometheus.Gauge
	errors        *prometheus.CounterVec
	auditDropped  prometheus.Counter
}

// latencyBuckets span 0.5 ms to 30 s.
var latencyBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30}

// NewMetrics makes the metrics in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_sandbox_create_seconds", Help: "Time to create a sandbox for a caller, by source (pool or cold).",
			Buckets: latencyBuckets,
		}, []string{"source"}),
		execSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_exec_seconds", Help: "Duration of run-and-wait exec requests.", Buckets: latencyBuckets,
		}),
		poolReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "airlock_pool_ready", Help: "Ready members of each warm pool.",
		}, []string{"image", "policy"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "airlock_admission_queue_depth", Help: "Creations waiting for room.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_errors_total", Help: "Errors, by kind (API error codes, create, exec).",
		}, []string{"kind"}),
		auditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_egress_audit_dropped_total",
			Help: "Egress audit records not stored: the writer's buffer was full or the store failed (the daemon's log still has them).",
		}),
	}
	m.Registry.MustRegister(m.createSeconds, m.execSeconds, m.poolReady, m.queueDepth, m.errors, m.auditDropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Error counts an error of kind.
func (m *Metrics) Error(kind string) { m.errors.WithLabelValues(kind).Inc() }

// bind adds the gauges that read the manager's state.
func (m *Metrics) bind(mg *Manager) {
	m.Registry.MustRegister(&stateCollector{mg: mg, desc: prometheus.NewDesc(
		"airlock_sandboxes", "Sandboxes by state (pooled: warm pool members not yet handed out).", []string{"state"}, nil)})
}

type stateCollector struct {
	mg   *Manager
	desc *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for state, n := range c.mg.CountByState() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}
