// Package deploy holds what an operator installs beside the agentd binary — the systemd unit,
// its drop-in for bind roots, the Prometheus alerting rules and the Grafana dashboard —
// embedded, so that the binary can install its own unit (`agentd install-unit`) and tests
// check the very bytes that ship.
//
// It promises that every file here is checked by a test: the unit and the drop-in by
// `systemd-analyze verify`, and every metric the rules and the dashboard name against a
// running agent's /metrics.
package deploy

import _ "embed"

// Unit is deploy/agentd.service.
//
//go:embed agentd.service
var Unit []byte

// BindRootsDropIn is deploy/agentd-bind-roots.conf: the drop-in that gives the unit the host's
// mount namespace, which --allow-bind-root needs.
//
//go:embed agentd-bind-roots.conf
var BindRootsDropIn []byte

// PrometheusRules is deploy/prometheus-rules.yml.
//
//go:embed prometheus-rules.yml
var PrometheusRules []byte

// GrafanaDashboard is deploy/grafana-dashboard.json.
//
//go:embed grafana-dashboard.json
var GrafanaDashboard []byte
