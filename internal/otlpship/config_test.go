package otlpship

import (
	"maps"
	"strings"
	"testing"
)

func TestResolveEndpointFollowsTheOTelSpecification(t *testing.T) {
	cases := []struct {
		name    string
		flag    string
		env     map[string]string
		want    string
		headers map[string]string
		err     string
	}{
		{name: "nothing configured ships nothing"},
		{name: "flag is a base URL", flag: "http://c:4318", want: "http://c:4318/v1/logs"},
		{name: "base URL with a path and slash", env: map[string]string{EnvEndpoint: "https://c/otlp/"}, want: "https://c/otlp/v1/logs"},
		{name: "logs URL used as is, over the base", env: map[string]string{EnvEndpoint: "http://a:4318", EnvLogsEndpoint: "http://b:9/ingest"}, want: "http://b:9/ingest"},
		{name: "flag beats the environment", flag: "http://f:1", env: map[string]string{EnvLogsEndpoint: "http://b:9/ingest"}, want: "http://f:1/v1/logs"},
		{name: "headers percent-decoded", env: map[string]string{EnvEndpoint: "http://c", EnvHeaders: "Authorization=Basic%20eDp5 , X-Team=a%2Cb"},
			want: "http://c/v1/logs", headers: map[string]string{"Authorization": "Basic eDp5", "X-Team": "a,b"}},
		{name: "malformed header entry", env: map[string]string{EnvEndpoint: "http://c", EnvHeaders: "a=1,oops"}, err: "OTEL_EXPORTER_OTLP_HEADERS: entry 2"},
		{name: "not http", flag: "grpc://c:4317", err: "--otlp-endpoint"},
		{name: "credentials in URL", env: map[string]string{EnvLogsEndpoint: "http://u:p@c/v1/logs"}, err: "credentials in the URL"},
		{name: "grpc protocol refused", env: map[string]string{EnvEndpoint: "http://c", EnvProtocol: "grpc"}, err: "protobuf only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep, ok, err := ResolveEndpoint(c.flag, func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != (c.want != "") || ep.URL != c.want {
				t.Fatalf("got %q (ok %v), want %q", ep.URL, ok, c.want)
			}
			if c.headers != nil && !maps.Equal(ep.Headers, c.headers) {
				t.Fatalf("headers %v, want %v", ep.Headers, c.headers)
			}
		})
	}
}

func TestResourceAttributesFromTheEnvironment(t *testing.T) {
	got, err := ResourceAttributes(func(string) string { return "deployment.environment=prod, cloud.region=eu%2Dwest" })
	if err != nil || got["deployment.environment"] != "prod" || got["cloud.region"] != "eu-west" {
		t.Fatalf("got %v %v", got, err)
	}
	if _, err := ResourceAttributes(func(string) string { return "=x" }); err == nil || !strings.Contains(err.Error(), EnvResourceAttrs) {
		t.Fatalf("a key-less entry: err %v, want one naming %s", err, EnvResourceAttrs)
	}
}
