// Package otlpship ships the journal as OpenTelemetry logs (PROTOCOL.md 1.2 §5): every
// committed record becomes one OTLP log record, POSTed over OTLP/HTTP in protobuf.
//
// It promises:
//   - A record is shipped only after its commit, and shipping never blocks a commit: it reads
//     the journal in short read transactions and waits on the journal's commit signal.
//   - At least once, first deliveries in agentd.seq order: one batch is in flight at a time, and
//     the shipping position (the last record whose fate is settled) is kept in the journal's
//     meta bucket, so a restart or a kill -9 resends at most what was shipped since it was last
//     written; a duplicate carries the same service.instance.id and agentd.seq.
//   - Nothing is lost silently: records compaction removed before they were shipped, and a
//     batch the endpoint refused for good (4xx), are announced by a `gap` record naming the
//     sequence numbers (inclusive).
//   - Memory is bounded by one batch (≤ 512 records, ≤ 1 MiB encoded), whatever the endpoint
//     does: the journal is the buffer.
//   - Sealed values and credentials are never shipped: a record's body is the one-line
//     description `agentd journal dump` prints, which never includes environment values.
package otlpship

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/datadir"
)

// Endpoint is where and how the logs are POSTed.
type Endpoint struct {
	URL     string            // the full logs URL (…/v1/logs)
	Headers map[string]string // from OTEL_EXPORTER_OTLP_HEADERS
	CAFile  string            // from OTEL_EXPORTER_OTLP_CERTIFICATE: the only CA trusted for https
}

// Env names of the OpenTelemetry specification's exporter configuration that agentd honours.
const (
	EnvEndpoint         = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvLogsEndpoint     = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
	EnvHeaders          = "OTEL_EXPORTER_OTLP_HEADERS"
	EnvLogsHeaders      = "OTEL_EXPORTER_OTLP_LOGS_HEADERS"
	EnvCertificate      = "OTEL_EXPORTER_OTLP_CERTIFICATE"
	EnvLogsCertificate  = "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE"
	EnvProtocol         = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvLogsProtocol     = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"
	EnvResourceAttrs    = "OTEL_RESOURCE_ATTRIBUTES"
	defaultLogsPathPart = "v1/logs"
)

// ResolveEndpoint decides where to ship, from --otlp-endpoint (a base URL: {base}/v1/logs) and
// the environment, as the OpenTelemetry specification says: the logs-specific variable is a
// full URL used as is and beats the generic base URL. The flag beats both (agentd's rule: a
// flag beats the environment). ok is false when nothing asks for shipping.
func ResolveEndpoint(flag string, getenv func(string) string) (ep Endpoint, ok bool, err error) {
	for _, name := range []string{EnvLogsProtocol, EnvProtocol} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "http/protobuf" {
				return ep, false, fmt.Errorf("%s=%q: agentd ships OTLP/HTTP with protobuf only (http/protobuf)", name, p)
			}
			break
		}
	}
	from := ""
	switch {
	case flag != "":
		ep.URL, from = joinLogsPath(flag), "--otlp-endpoint"
	case getenv(EnvLogsEndpoint) != "":
		ep.URL, from = strings.TrimSpace(getenv(EnvLogsEndpoint)), EnvLogsEndpoint
	case getenv(EnvEndpoint) != "":
		ep.URL, from = joinLogsPath(strings.TrimSpace(getenv(EnvEndpoint))), EnvEndpoint
	default:
		return ep, false, nil
	}
	u, perr := url.Parse(ep.URL)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ep, false, fmt.Errorf("%s %q: want an http:// or https:// URL with a host", from, ep.URL)
	}
	if u.User != nil {
		return ep, false, fmt.Errorf("%s: credentials in the URL would be logged; give them in %s", from, EnvHeaders)
	}
	for _, name := range []string{EnvLogsHeaders, EnvHeaders} {
		if v := getenv(name); v != "" {
			if ep.Headers, err = parseKeyValues(name, v); err != nil {
				return ep, false, err
			}
			break
		}
	}
	for _, name := range []string{EnvLogsCertificate, EnvCertificate} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			ep.CAFile = v
			break
		}
	}
	return ep, true, nil
}

// joinLogsPath appends v1/logs to a base URL, with exactly one slash between them.
func joinLogsPath(base string) string {
	return strings.TrimRight(base, "/") + "/" + defaultLogsPathPart
}

// ResourceAttributes parses OTEL_RESOURCE_ATTRIBUTES ("k=v,k2=v2", values percent-encoded).
func ResourceAttributes(getenv func(string) string) (map[string]string, error) {
	v := getenv(EnvResourceAttrs)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	return parseKeyValues(EnvResourceAttrs, v)
}

// parseKeyValues reads the specification's list format: comma-separated key=value pairs,
// surrounding spaces trimmed, values (and keys) percent-decoded. A malformed entry is an error
// naming the variable and the entry's position, never a silently half-applied setting.
func parseKeyValues(name, v string) (map[string]string, error) {
	out := map[string]string{}
	for i, part := range strings.Split(v, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, val, found := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !found || k == "" {
			return nil, fmt.Errorf("%s: entry %d is not key=value", name, i+1)
		}
		dk, err1 := url.PathUnescape(k)
		dv, err2 := url.PathUnescape(strings.TrimSpace(val))
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s: entry %d (%s): bad percent-encoding", name, i+1, k)
		}
		out[dk] = dv
	}
	return out, nil
}

// client is the HTTP client for an endpoint: no redirects (a header such as an API key is only
// ever sent to the configured URL), a bounded request time, and the CA file when one is given.
func (ep Endpoint) client(timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if ep.CAFile != "" {
		pem, err := datadir.ReadTrusted(ep.CAFile, datadir.CABundleLimit)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", EnvCertificate, ep.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", EnvCertificate, ep.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}
