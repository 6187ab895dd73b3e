package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// Metrics are the engine's Prometheus metrics, in a registry of their own. No label carries
// an ARN or a container id: cardinality stays flat however many tasks a host runs.
type Metrics struct {
	Registry      *prometheus.Registry
	appends       prometheus.Counter
	commitLatency prometheus.Histogram
	journalErrors prometheus.Counter
	coreRefused   prometheus.Counter
	cleanups      prometheus.Counter
	droppedEarly  prometheus.Counter
	blockedOnAck  prometheus.Histogram
	reports       *prometheus.CounterVec
	payloads      *prometheus.CounterVec
	pollErrors    *prometheus.CounterVec
	outbox        prometheus.Gauge
	oldestUnsent  prometheus.Gauge

	imagesRemoved        prometheus.Counter
	imageRemovalFailures prometheus.Counter
	imagesReleased       prometheus.Counter
	imagesPulled         prometheus.Gauge
	memoryReleases       prometheus.Counter
	intakeHolds          prometheus.Counter
}

func newMetrics() *Metrics {
	m := &Metrics{
		Registry:             prometheus.NewRegistry(),
		appends:              prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_journal_appends_total", Help: "Records appended to the journal."}),
		commitLatency:        prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentd_journal_append_seconds", Help: "Time for an append to become durable.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		journalErrors:        prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_journal_errors_total", Help: "Appends that failed (disk full, read-only, ...)."}),
		coreRefused:          prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_core_refused_records_total", Help: "Records the core made that the projection refused: dropped before the commit, their task quarantined (a bug)."}),
		cleanups:             prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_cleanups_total", Help: "Tasks cleaned up."}),
		droppedEarly:         prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_journal_histories_dropped_early_total", Help: "Cleaned tasks whose history compaction dropped before the retention ended, to keep the journal within --journal-max-bytes (their tombstones stay)."}),
		blockedOnAck:         prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentd_stopped_to_acked_seconds", Help: "Time from a task's journaled stop to its stopped-acked.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 12)}),
		reports:              prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_reports_total", Help: "State-change reports by outcome."}, []string{"outcome"}),
		payloads:             prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_payloads_total", Help: "Payloads received by result."}, []string{"result"}),
		pollErrors:           prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_poll_errors_total", Help: "Failed polls by kind."}, []string{"kind"}),
		outbox:               prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentd_outbox_changes", Help: "State changes not yet settled by the control plane."}),
		oldestUnsent:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentd_oldest_unsent_change_age_seconds", Help: "Age of the oldest unsettled state change."}),
		imagesRemoved:        prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_images_removed_total", Help: "Images the agent pulled and removed as unused (image_removed records)."}),
		imageRemovalFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_image_removal_failures_total", Help: "Image removals that failed (not those kept for another name or container: agentd_images_released_total)."}),
		imagesReleased:       prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_images_released_total", Help: "Images the agent pulled and let go of, the runtime keeping them for another name or container (image_released records)."}),
		imagesPulled:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentd_images_pulled", Help: "Images the agent pulled and has not removed."}),
		memoryReleases:       prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_memory_releases_total", Help: "Times the agent gave the heap a burst of tasks left behind back to the OS, once idle after it."}),
		intakeHolds:          prometheus.NewCounter(prometheus.CounterOpts{Name: "agentd_intake_holds_total", Help: "Polls held because more tasks waited for a container removal than the agent takes in beside them."}),
	}
	m.Registry.MustRegister(m.appends, m.commitLatency, m.journalErrors, m.coreRefused, m.cleanups, m.droppedEarly, m.blockedOnAck, m.reports, m.payloads, m.pollErrors, m.outbox, m.oldestUnsent,
		m.imagesRemoved, m.imageRemovalFailures, m.imagesReleased, m.imagesPulled, m.memoryReleases, m.intakeHolds)
	return m
}

// update refreshes the cheap gauges after a decision round.
func (m *Metrics) update(e *Engine) {
	m.outbox.Set(float64(e.st.OutboxLen()))
	m.imagesPulled.Set(float64(len(e.st.Images)))
	if t := e.st.OldestUnsent(); !t.IsZero() {
		m.oldestUnsent.Set(e.clock.Now().Sub(t).Seconds())
	} else {
		m.oldestUnsent.Set(0)
	}
}

// stateCollector counts tasks by status on scrape, through the loop, so a scrape never reads
// a half-applied projection and costs nothing between scrapes.
type stateCollector struct {
	e       *Engine
	tasks   *prometheus.Desc
	blocked *prometheus.Desc
	longest *prometheus.Desc
	healthy *prometheus.Desc
	tombs   *prometheus.Desc
	seq     *prometheus.Desc
}

// RegisterStateCollector adds the scrape-time task counts to the engine's registry.
func (e *Engine) RegisterStateCollector() {
	e.metrics.Registry.MustRegister(&stateCollector{e: e,
		tasks:   prometheus.NewDesc("agentd_tasks", "Live tasks by known status.", []string{"status"}, nil),
		blocked: prometheus.NewDesc("agentd_tasks_blocked_on_ack", "Tasks stopped and waiting for the control plane to settle their STOPPED.", nil, nil),
		longest: prometheus.NewDesc("agentd_longest_blocked_on_ack_seconds", "Longest wait of a stopped task for its acknowledgement.", nil, nil),
		healthy: prometheus.NewDesc("agentd_healthy", "1 when the agent is recovered, journaling and reporting; 0 otherwise.", nil, nil),
		tombs:   prometheus.NewDesc("agentd_tombstones", "Cleaned tasks remembered so a re-sent ARN is not run again.", nil, nil),
		seq:     prometheus.NewDesc("agentd_journal_sequence", "Sequence number of the last journaled record.", nil, nil),
	})
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tasks, c.blocked, c.longest, c.healthy, c.tombs, c.seq} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	healthy := 0.0
	if c.e.Ready() && c.e.Unhealthy() == "" {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, healthy)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts := map[event.Status]int{}
	var blocked int
	var longest time.Duration
	var tombs int
	var seq uint64
	now := c.e.clock.Now()
	err := c.e.Query(ctx, func(st *fsm.State) {
		for _, t := range st.Tasks {
			counts[t.Known]++
			if d := st.BlockedOnAck(t, now); d > 0 {
				blocked++
				longest = max(longest, d)
			}
		}
		tombs, seq = len(st.Tombstones), st.LastSeq
	})
	if err != nil {
		return
	}
	for _, s := range []event.Status{event.StatusNone, event.StatusPulled, event.StatusCreated, event.StatusRunning, event.StatusStopped, event.StatusStoppedAcked, event.StatusCleaning} {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, float64(blocked))
	ch <- prometheus.MustNewConstMetric(c.longest, prometheus.GaugeValue, longest.Seconds())
	ch <- prometheus.MustNewConstMetric(c.tombs, prometheus.GaugeValue, float64(tombs))
	ch <- prometheus.MustNewConstMetric(c.seq, prometheus.GaugeValue, float64(seq))
}
