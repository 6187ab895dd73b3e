package otlpship

import "github.com/prometheus/client_golang/prometheus"

// collector exports the shipper's counters and lag. No label carries a task or an endpoint:
// cardinality is fixed.
type collector struct {
	s                                *Shipper
	shipped, retried, dropped, gaps  *prometheus.Desc
	rejected, lagRecords, lagSeconds *prometheus.Desc
}

// Collector is the shipper's Prometheus collector.
func (s *Shipper) Collector() prometheus.Collector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &collector{s: s,
		shipped:    d("agentd_otlp_records_shipped_total", "Journal records the OTLP endpoint accepted (duplicates after a crash counted again)."),
		retried:    d("agentd_otlp_retries_total", "OTLP requests that failed (5xx, 429/503, timeout, broken connection) and were tried again."),
		dropped:    d("agentd_otlp_records_dropped_total", "Journal records in batches the OTLP endpoint refused for good (4xx), announced by a gap record."),
		gaps:       d("agentd_otlp_gaps_total", "Gap records shipped (compaction or a refusal removed records before they were shipped)."),
		rejected:   d("agentd_otlp_records_rejected_total", "Records the endpoint said it rejected in a partial success (not retried)."),
		lagRecords: d("agentd_otlp_lag_records", "Committed journal records not yet shipped."),
		lagSeconds: d("agentd_otlp_lag_seconds", "Age of the oldest committed record not yet shipped (0 when caught up)."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.shipped, c.retried, c.dropped, c.gaps, c.rejected, c.lagRecords, c.lagSeconds} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(c.shipped, st.Shipped)
	counter(c.retried, st.Retried)
	counter(c.dropped, st.Dropped)
	counter(c.gaps, st.Gaps)
	counter(c.rejected, st.Rejected)
	ch <- prometheus.MustNewConstMetric(c.lagRecords, prometheus.GaugeValue, float64(c.s.LagRecords()))
	ch <- prometheus.MustNewConstMetric(c.lagSeconds, prometheus.GaugeValue, max(st.OldestLag.Seconds(), 0))
}
