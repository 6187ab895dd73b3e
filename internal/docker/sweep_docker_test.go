package docker

import (
	"context"
	"os/exec"
	"testing"

	"github.com/agentd/agentd/internal/runtime"
)

// The start-up sweep of unused bind volumes takes this agent's and leaves every other: another
// agent's whose id holds this one's, one held by it, and one with no agent at all — on any
// engine, whatever its filters do (Podman ORs the label and dangling filters). Unlike
// TestDockerUnusedBindVolumesAreSweptAtStart it needs no bind root, so it runs on Podman too.
func TestDockerTheSweepLeavesOtherAgentsVolumes(t *testing.T) {
	_, agent := dockerEngine(t)
	tail := agent[len(agent)-6:]
	vols := map[string]string{ // name → its agent label ("": none)
		BindVolumePrefix + "mine" + tail:    agent,
		BindVolumePrefix + "longer" + tail:  agent + "-other",
		BindVolumePrefix + "shorter" + tail: agent[:len(agent)-1],
		BindVolumePrefix + "nobody" + tail:  "",
	}
	for name, owner := range vols {
		args := []string{"volume", "create", name}
		if owner != "" {
			args = append(args, "--label", runtime.LabelAgent+"="+owner)
		}
		if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
			t.Fatalf("docker %v: %v %s", args, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", name).Run() })
	}
	later, err := NewEngine(context.Background(), "", agent, PullConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	for name, owner := range vols {
		err := exec.Command("docker", "volume", "inspect", name).Run()
		if gone := err != nil; gone != (owner == agent) {
			t.Errorf("volume %s of agent %q: gone %v after the sweep; want only this agent's gone", name, owner, gone)
		}
	}
}
