package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/runtime"
)

// Why bind roots are refused on Podman (engine_binds.go, checkPeer), on the engine itself: a bind volume
// made as the agent makes one, naming this process's descriptor of a directory, which is then
// removed, with a link to outside put at its deleted path ("<dir> (deleted)", the string the
// descriptor's magic link reads as). Docker mounts the directory itself: the container never
// sees outside. Podman mounts the link's target. Should a Podman stop doing so, this fails,
// saying the refusal may be looked at again.
func TestDockerBindVolumeOfARemovedDirectoryNeverMountsALinkInItsPlace(t *testing.T) {
	e, agent := dockerEngine(t)
	ctx := context.Background()
	base := t.TempDir()
	src, outside := filepath.Join(base, "root", "s"), filepath.Join(base, "outside")
	must(t, os.MkdirAll(src, 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(outside+"/f", []byte("secret"), 0o644))
	dir, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	vol := BindVolumePrefix + strings.ReplaceAll(agent, "_", "-")
	_, err = e.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: vol, Driver: "local", Labels: map[string]string{runtime.LabelAgent: agent},
		DriverOpts: map[string]string{"type": "none", "o": "bind", "device": fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), dir.Fd())}})
	must(t, err)
	must(t, os.Remove(src))
	must(t, os.Symlink(outside, src+" (deleted)"))
	res, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: testbox, Cmd: []string{"cat", "/data/f"}, Labels: map[string]string{runtime.LabelAgent: agent}},
		HostConfig: &container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/data", ReadOnly: true}}}})
	must(t, err)
	var out bytes.Buffer
	if _, err := e.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err == nil { // Docker may refuse a removed directory
		waitExit(t, e, res.ID)
		rc, err := e.cli.ContainerLogs(ctx, res.ID, client.ContainerLogsOptions{ShowStdout: true})
		must(t, err)
		_, _ = stdcopy.StdCopy(&out, &out, rc)
		rc.Close()
	}
	kind, _ := e.kindNow()
	t.Logf("on %v, the container printed %q", kind, out.String())
	saw := strings.Contains(out.String(), "secret")
	switch {
	case onPodman(e) && !saw:
		t.Fatalf("Podman mounted the removed directory, not the link in its place (the container printed %q): "+
			"the reason bind roots are refused there (engine_binds.go, checkPeer) no longer holds on this Podman", out.String())
	case !onPodman(e) && saw:
		t.Fatal("the engine mounted the link put in place of the removed directory: a bind source can leave its root")
	}
}
