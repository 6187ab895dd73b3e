//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	mu         sync.Mutex
	counts     = map[string]int{}
	target, at = parse(os.Getenv("AGENTD_FAILPOINT"))
)

func parse(v string) (string, int) {
	name, n, ok := strings.Cut(v, "@")
	if !ok {
		return v, 1
	}
	c, err := strconv.Atoi(n)
	if err != nil || c < 1 {
		return name, 1
	}
	return name, c
}

// Hit kills the process with SIGKILL at the armed point: no defer runs, nothing is flushed.
func Hit(name string) {
	if target == "" || name != target {
		return
	}
	mu.Lock()
	counts[name]++
	n := counts[name]
	mu.Unlock()
	if n == at {
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
