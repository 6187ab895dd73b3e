package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/journal"
)

// TestDockerGetsTheValueTheJournalHidesSealed: on the real Docker Engine the container's env
// holds the clear value (opened just before Create), while the journal holds it sealed only.
func TestDockerGetsTheValueTheJournalHidesSealed(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID := strings.ReplaceAll("agent-seal-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	dir := t.TempDir()
	r := startTrustRig(t, dir, agentConfig{AgentID: agentID, Runtime: "docker"})
	r.assign("task/sealed-docker", map[string]any{"name": "app", "image": "agentd-testbox:latest", "command": []string{"run"},
		"env": map[string]string{"DB_PASSWORD": plantedSecret}})
	r.awaitKnown("task/sealed-docker", "RUNNING")
	ids := dockerPS(t, "label=io.agentd.agent="+agentID)
	if len(ids) != 1 {
		t.Fatalf("containers of the agent: %v", ids)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{json .Config.Env}}", ids[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "DB_PASSWORD="+plantedSecret) {
		t.Fatalf("container env %s (%v): want the clear value", out, err)
	}
	file, _ := os.ReadFile(filepath.Join(dir, journal.FileName))
	if bytes.Contains(file, []byte(plantedSecret)) || !bytes.Contains(file, []byte("DB_PASSWORD")) {
		t.Fatal("the journal holds the value in the clear (or not the env name at all)")
	}
}
