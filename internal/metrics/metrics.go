// Package metrics exposes the node's Prometheus metrics: per server (state,
// CPU, memory, network, disk, uptime, read at scrape time) and per node
// (API requests by route pattern, websocket and SFTP sessions, backups,
// restores and transfers by result, activity queue, panel call errors).
//
// The node-wide collectors belong to a Metrics the daemon makes (New) and
// hands to the packages that record into them, as it hands them the
// configuration: two daemons in one process count apart. NewRegistry
// gathers them with the per-server collector. Every label has a bounded
// set of values: route patterns of the API's route table (never raw
// paths), status codes, job kinds and results, server UUIDs of this node.
package metrics

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const namespace = "wharf"

// Metrics are the node-wide collectors of one daemon. A nil *Metrics
// records nothing (the unit tests of the packages that record).
type Metrics struct {
	apiRequests *prometheus.CounterVec   // API requests by route pattern and status code
	apiDuration *prometheus.HistogramVec // latency of API requests by route pattern
	jobs        *prometheus.CounterVec
	jobBytes    *prometheus.CounterVec
	jobDuration *prometheus.HistogramVec
	panelErrors *prometheus.CounterVec
}

// New returns a daemon's node-wide collectors, all at zero.
func New() *Metrics {
	return &Metrics{
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "api_requests_total",
			Help: "API requests by route pattern (the route table's, never the raw path) and status code.",
		}, []string{"route", "status"}),
		apiDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "api_request_duration_seconds",
			Help:    "Latency of API requests by route pattern (websockets: the session's length).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"route"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "jobs_total",
			Help: "Backups, restores and transfers by kind and result.",
		}, []string{"kind", "result"}),
		jobBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "job_bytes_total",
			Help: "Bytes moved by backups (archive size), restores (file bytes written) and transfers, by kind and result.",
		}, []string{"kind", "result"}),
		jobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "job_duration_seconds",
			Help:    "Duration of backups, restores and transfers by kind and result.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 15), // 1 s .. about 4.5 h
		}, []string{"kind", "result"}),
		panelErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "panel_call_errors_total",
			Help: "Calls to the panel that failed after their retries, by reason (transport, status class).",
		}, []string{"reason"}),
	}
}

// Job kinds.
const (
	Backup      = "backup"
	Restore     = "restore"
	TransferOut = "transfer_out"
	TransferIn  = "transfer_in"
)

// ObserveJob records one finished backup, restore or transfer: its result
// (success, failure, or cancelled when err is a context cancellation), the
// bytes it moved and how long it took.
func (m *Metrics) ObserveJob(kind string, err error, bytes int64, took time.Duration) {
	if m == nil {
		return
	}
	result := "success"
	switch {
	case errors.Is(err, context.Canceled):
		result = "cancelled"
	case err != nil:
		result = "failure"
	}
	m.jobs.WithLabelValues(kind, result).Inc()
	if bytes > 0 {
		m.jobBytes.WithLabelValues(kind, result).Add(float64(bytes))
	}
	m.jobDuration.WithLabelValues(kind, result).Observe(took.Seconds())
}

// PanelError records a failed call to the panel: status is the HTTP status
// of the last answer, 0 when none came (transport error, timeout).
func (m *Metrics) PanelError(status int) {
	if m == nil {
		return
	}
	reason := "transport"
	if status > 0 {
		reason = strconv.Itoa(status/100) + "xx"
	}
	m.panelErrors.WithLabelValues(reason).Inc()
}

// Route is the label value of a request's route: its ServeMux pattern, or
// "unmatched".
func Route(pattern string) string {
	if pattern == "" {
		return "unmatched"
	}
	return pattern
}

// ObserveRequest records one API request.
func (m *Metrics) ObserveRequest(pattern string, status int, took time.Duration) {
	if m == nil {
		return
	}
	route := Route(pattern)
	m.apiRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.apiDuration.WithLabelValues(route).Observe(took.Seconds())
}

// ServerSample is one server's usage at scrape time.
type ServerSample struct {
	UUID             string
	State            string
	CPUPercent       float64
	MemoryBytes      uint64
	MemoryLimitBytes uint64
	RxBytes, TxBytes uint64
	DiskBytes        int64
	Uptime           time.Duration
}

// States are the values of the state label of wharf_server_state.
var States = []string{"offline", "starting", "running", "stopping"}

// Sources are what the registry reads at scrape time. The session counts
// are asked of their owners (the websocket hub, the SFTP server) at every
// scrape, so they are right however long a session outlives the request
// that opened it; a nil source reports 0.
type Sources struct {
	Servers           func() []ServerSample
	ActivityPending   func() int64 // bytes waiting in the activity queue
	WebsocketSessions func() int   // server websockets open now
	SFTPSessions      func() int   // SFTP sessions open now
}

// NewRegistry returns a registry with the Go runtime and process
// collectors, the node-wide collectors of m and the per-server collector.
func NewRegistry(m *Metrics, src Sources) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.apiRequests, m.apiDuration,
		m.jobs, m.jobBytes, m.jobDuration, m.panelErrors,
		liveGauge("websocket_sessions", "Open server websockets.", src.WebsocketSessions),
		liveGauge("sftp_sessions", "Open SFTP sessions.", src.SFTPSessions),
	)
	if src.ActivityPending != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "activity_queue_bytes",
			Help: "Bytes of activity records waiting to be sent to the panel.",
		}, func() float64 { return float64(src.ActivityPending()) }))
	}
	if src.Servers != nil {
		reg.MustRegister(&serverCollector{samples: src.Servers})
	}
	return reg
}

// liveGauge reports count at scrape time (0 when count is nil).
func liveGauge(name, help string, count func() int) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, func() float64 {
		if count == nil {
			return 0
		}
		return float64(count())
	})
}

var (
	descState    = serverDesc("server_state", "1 for the server's current state, 0 for the others.", "state")
	descCPU      = serverDesc("server_cpu_percent", "CPU use of the server's container, percent of one core.")
	descMemory   = serverDesc("server_memory_bytes", "Memory use of the server's container.")
	descMemLimit = serverDesc("server_memory_limit_bytes", "Memory limit of the server's container.")
	descRx       = serverDesc("server_network_receive_bytes_total", "Bytes received by the server's container.")
	descTx       = serverDesc("server_network_transmit_bytes_total", "Bytes sent by the server's container.")
	descDisk     = serverDesc("server_disk_bytes", "Disk space used by the server's files.")
	descUptime   = serverDesc("server_uptime_seconds", "Time since the server's container started; 0 when offline.")
)

func serverDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(namespace+"_"+name, help, append([]string{"server"}, extra...), nil)
}

// serverCollector reads every server's usage at scrape time.
type serverCollector struct {
	samples func() []ServerSample
}

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descCPU, descMemory, descMemLimit, descRx, descTx, descDisk, descUptime} {
		ch <- d
	}
}

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.samples() {
		for _, st := range States {
			v := 0.0
			if st == s.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, s.UUID, st)
		}
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.GaugeValue, s.CPUPercent, s.UUID)
		ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(s.MemoryBytes), s.UUID)
		ch <- prometheus.MustNewConstMetric(descMemLimit, prometheus.GaugeValue, float64(s.MemoryLimitBytes), s.UUID)
		ch <- prometheus.MustNewConstMetric(descRx, prometheus.CounterValue, float64(s.RxBytes), s.UUID)
		ch <- prometheus.MustNewConstMetric(descTx, prometheus.CounterValue, float64(s.TxBytes), s.UUID)
		ch <- prometheus.MustNewConstMetric(descDisk, prometheus.GaugeValue, float64(s.DiskBytes), s.UUID)
		ch <- prometheus.MustNewConstMetric(descUptime, prometheus.GaugeValue, s.Uptime.Seconds(), s.UUID)
	}
}
