package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestPullFlagsDefaultsAndRefusals(t *testing.T) {
	r, _, err := parseRun(t, "/nonexistent/agentd.json", "--backend", "http://x:1")
	if err != nil {
		t.Fatal(err)
	}
	if r.PullPolicy != "if-not-present" || r.PullInactivityTimeout != time.Minute || r.RegistryAuthFile != "" {
		t.Fatalf("defaults: policy %q, inactivity %s, auth file %q", r.PullPolicy, r.PullInactivityTimeout, r.RegistryAuthFile)
	}
	if _, _, err := parseRun(t, "/nonexistent/agentd.json", "--backend", "http://x:1", "--pull-policy", "sometimes"); err == nil || !strings.Contains(err.Error(), "--pull-policy") {
		t.Fatalf("a bad --pull-policy: %v", err)
	}
	// A credentials file that cannot be read refuses the start, naming it — before the agent
	// would pull anything anonymously.
	missing := filepath.Join(t.TempDir(), "nope.json")
	_, err = startAgent(context.Background(), agentConfig{DataDir: t.TempDir(), Backend: "http://127.0.0.1:1", AgentID: "agent-pulls",
		Runtime: "docker", Listen: "127.0.0.1:0", Pulls: pullSettings{AuthFile: missing}}, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "--registry-auth-file "+missing) {
		t.Fatalf("start with a missing --registry-auth-file: %v", err)
	}
}
