package docker

// Bind roots are refused on Podman (4.3): a bind volume there mounts a path again, not the
// directory the agent opened. Docker's local volume driver calls mount(2) with the volume's
// device, /proc/<agent pid>/fd/<n>, and the kernel follows that magic link to the opened
// directory itself. Podman's runs mount(8) (`mount -o bind -t none /proc/<pid>/fd/<n> …`),
// and util-linux canonicalizes a bind source first: it reads the link as a string — the
// directory's path as of now — and resolves that string again, through whatever links are
// on it by then, before calling mount(2) with the result. A task with a writable bind of a
// directory above its source can put a link there: removing the source and linking
// "<source> (deleted)" to /etc shows a container /etc, every time
// (TestDockerBindVolumeOfARemovedDirectoryNeverMountsALinkInItsPlace), and exchanging the source with a link
// races the same way (what TestDockerBindSourceRacingLinkSwapNeverLeavesTheRoot saw).
// Making it safe would mean handing Podman a path no task can change (the directory mounted
// by the agent beneath a root-only directory first): not done.

import "fmt"

func errPodmanBinds(host string) error {
	return fmt.Errorf("--allow-bind-root: not on Podman (%s): its bind volumes mount the source's path again, through whatever links are on it by then, not the directory opened beneath the root", host)
}
