package docker

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Issue 41, on the real engine: once a container's start has been answered, its bind volume's
// descriptor number never names another directory — not when the agent opens another right
// after (a number closed is the next one handed out), and not for an operator's `docker start`
// of the stopped container or `docker cp` out of it, which make the engine mount the volume
// again. The other directory here holds f = "secret".
func TestDockerABindsNumberNeverNamesAnotherDirectoryAfterTheStart(t *testing.T) {
	r := newBindRig(t)
	ctx := context.Background()
	id := mustCreate(t, r.e, catSpec("restarted", r.insideDir(t, "shared/first")))
	t.Cleanup(func() { must(t, r.e.Remove(context.Background(), id)) })
	must(t, r.e.Start(ctx, id))
	if st := waitExit(t, r.e, id); st.ExitCode != 0 {
		t.Fatalf("the first run exited %d", st.ExitCode)
	}
	n := r.boundNumber(t, id)

	// The agent opens directories on: whatever number the kernel hands out next.
	for range n + 16 {
		fd, err := unix.Open(r.outside, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		if fd == n {
			t.Logf("descriptor %d, which the bind volume names, now names %s", n, r.outside)
			break
		}
	}

	out, _ := exec.Command("docker", "start", "-a", id).CombinedOutput()
	if strings.Contains(string(out), "secret") {
		t.Fatalf("docker start of the stopped container printed %q: its bind reached the directory its descriptor number names now", out)
	}
	out, _ = exec.Command("docker", "cp", id+":/data/f", "-").CombinedOutput()
	if strings.Contains(string(out), "secret") {
		t.Fatalf("docker cp out of the stopped container gave %q: its bind reached the directory its descriptor number names now", out)
	}
	t.Logf("docker start and docker cp after the start: %s", strings.TrimSpace(string(out)))
}

// boundNumber is the descriptor number the container's one bind volume names
// (/proc/<agent pid>/fd/<n>).
func (r *bindRig) boundNumber(t *testing.T, id string) int {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", `{{range .Mounts}}{{.Name}}{{end}}`, id).Output()
	must(t, err)
	dev, err := exec.Command("docker", "volume", "inspect", "-f", `{{index .Options "device"}}`, strings.TrimSpace(string(out))).Output()
	must(t, err)
	_, num, _ := strings.Cut(strings.TrimSpace(string(dev)), "/fd/")
	n, err := strconv.Atoi(num)
	if err != nil {
		t.Fatalf("bind volume device %q names no descriptor", dev)
	}
	return n
}
