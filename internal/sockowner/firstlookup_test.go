package sockowner_test

import (
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"

	_ "github.com/agentd/agentd/internal/sockowner"
)

// The netlink library learns the host's byte order on first use, writing a package variable
// unguarded, and every lookup reads it: sockowner learns it at its init, before any lookup, so
// lookups at once (connections to the agent's API as it starts) only read it. Under -race
// (make test-race) this fails if the init is gone (as introspect's TestCallerOverIPv6Loopback
// once caught through two lookups at once): in a child of its own, so that nothing else has
// used the library first, the goroutines below are its first users.
func TestNetlinkByteOrderLearntBeforeAnyLookup(t *testing.T) {
	if os.Getenv("AGENTD_BYTE_ORDER_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNetlinkByteOrderLearntBeforeAnyLookup$", "-test.count=1")
		cmd.Env = append(os.Environ(), "AGENTD_BYTE_ORDER_CHILD=1")
		cmd.WaitDelay = time.Minute
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("first users of the library at once: %v\n%s", err, out)
		}
		return
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			nl.NativeEndian()
		})
	}
	close(start)
	wg.Wait()
}
