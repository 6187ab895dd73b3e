package docker

// Bind roots are refused on Podman: its bind volumes do not keep the directory the agent
// opened. TODO reason
import "fmt"

func errPodmanBinds(host string) error {
	return fmt.Errorf("--allow-bind-root: not on Podman (%s): its bind volumes are not proven to stay beneath the root", host)
}
