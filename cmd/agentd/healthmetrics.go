package main

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentd/agentd/internal/engine"
)

// healthCollector exports the engine's health by source, so an alert can say which thing is
// wrong (the runtime is unavailable; the control plane refuses the credentials) instead of
// only that agentd_healthy is 0. Its labels are the fixed list of sources: cardinality stays
// the same whatever the host runs.
type healthCollector struct {
	e       *engine.Engine
	healthy *prometheus.Desc
	since   *prometheus.Desc
}

func registerHealthCollector(e *engine.Engine) {
	// The Go and process collectors give an operator the agent's own heap, goroutines, RSS and
	// file descriptors (go_memstats_*, go_goroutines, process_*) without attaching a debugger:
	// what remembering tasks costs shows on the same scrape as the tasks.
	// go_gc_heap_live_bytes too: the heap the last collection marked live, what remembering
	// tasks costs without the garbage between collections (bench rss reads it).
	liveHeap := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}
	e.Metrics().Registry.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(liveHeap)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	e.Metrics().Registry.MustRegister(&healthCollector{e: e,
		healthy: prometheus.NewDesc("agentd_source_healthy", "1 while the source works, 0 while it has a problem (journal, runtime, exit_stream, control_plane, credentials, core, journal_budget; degraded only: core_refusals, and otlp when shipping is configured).", []string{"source"}, nil),
		since:   prometheus.NewDesc("agentd_source_unhealthy_seconds", "How long the source's current problem has lasted (0 while it works).", []string{"source"}, nil),
	})
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.healthy; ch <- c.since }

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.e.Now()
	for _, s := range c.e.Health() {
		ok, lasted := 1.0, 0.0
		if s.Problem != "" {
			ok = 0
			if !s.Since.IsZero() {
				lasted = now.Sub(s.Since).Seconds()
			}
		}
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, ok, string(s.Source))
		ch <- prometheus.MustNewConstMetric(c.since, prometheus.GaugeValue, lasted, string(s.Source))
	}
}
