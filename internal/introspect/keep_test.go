package introspect_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/introspect"
)

// TestUnboundListenerIsRetriedNamingItsHolder: an address another process holds is a problem
// naming the address and the holder's pid and uid, tried again until the holder leaves —
// then the listener is returned and the problem cleared; a retry ends with its context.
func TestUnboundListenerIsRetriedNamingItsHolder(t *testing.T) {
	dir := t.TempDir()
	tcpHeld, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	unixHeld, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	holder := fmt.Sprintf("pid %d (uid %d)", os.Getpid(), os.Geteuid())
	for _, c := range []struct {
		listen string
		held   net.Listener
	}{{tcpHeld.Addr().String(), tcpHeld}, {"unix:" + sock, unixHeld}} {
		t.Run(c.listen, func(t *testing.T) {
			api, err := introspect.Guard(introspect.Options{Listen: c.listen})
			if err != nil {
				t.Fatal(err)
			}
			_, first := api.Listen()
			if first == nil {
				t.Fatal("bound an address another listener holds")
			}
			problems := make(chan string, 100)
			got := make(chan net.Listener, 1)
			go func() { got <- api.KeepTrying(context.Background(), first, func(p string) { problems <- p }) }()
			if p := <-problems; !strings.Contains(p, strings.TrimPrefix(c.listen, "unix:")) || !strings.Contains(p, holder) {
				t.Errorf("the problem %q; want it to name %s and %s", p, c.listen, holder)
			}
			c.held.Close()
			select {
			case ln := <-got:
				if ln == nil {
					t.Fatal("no listener once the address was free")
				}
				ln.Close()
			case <-time.After(30 * time.Second):
				t.Fatal("not bound within 30 s of the address coming free")
			}
			last := ""
			for len(problems) > 0 {
				last = <-problems
			}
			if last != "" {
				t.Errorf("the last problem reported %q; want it cleared", last)
			}
		})
	}
	t.Run("ends with its context", func(t *testing.T) {
		held, _ := net.Listen("tcp", "127.0.0.1:0")
		defer held.Close()
		api, _ := introspect.Guard(introspect.Options{Listen: held.Addr().String()})
		_, first := api.Listen()
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan net.Listener, 1)
		go func() { got <- api.KeepTrying(ctx, first, func(string) {}) }()
		cancel()
		select {
		case ln := <-got:
			if ln != nil {
				t.Fatal("bound a held address")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("still trying 30 s after its context ended")
		}
	})
}
