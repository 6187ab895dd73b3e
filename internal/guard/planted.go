//go:build plantedbugs

package guard

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// The only way to switch a guard off: a test binary built with -tags plantedbugs, run with
// AGENTD_PLANTED_BUGS naming the guards to switch off (comma-separated, e.g.
// AGENTD_PLANTED_BUGS=cleanup-after-ack). Read once, before any package that reads a guard
// initialises, so a guard is the same for the whole run.
func init() {
	for _, n := range strings.Split(os.Getenv(Env), ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(All, Name(n)) {
			fmt.Fprintf(os.Stderr, "guard: %s=%q: no guard named %q (guards: %v)\n", Env, os.Getenv(Env), n, All)
			os.Exit(2)
		}
		off[Name(n)] = true
	}
}
