package docker

import "github.com/moby/moby/api/types/container"

// DefaultPidsLimit bounds the processes of a container whose task sets no limit, so a fork
// bomb in one task cannot exhaust the host's pids.
const DefaultPidsLimit = 4096

// hardened is the host configuration every container starts from: no process in it may gain
// privileges (setuid binaries, file capabilities) beyond those it was started with, and its
// processes are bounded. A task's own settings, applied after, may replace the pids limit.
func hardened() *container.HostConfig {
	limit := int64(DefaultPidsLimit)
	hc := &container.HostConfig{SecurityOpt: []string{"no-new-privileges"}}
	hc.PidsLimit = &limit
	return hc
}
