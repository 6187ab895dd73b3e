package introspect

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/sockowner"
)

// The API never decides whether the agent runs (issue 41): a listener that cannot be bound —
// its port held by another user during a restart or a boot, a live process on its socket
// path — is a degraded health problem naming who holds it, tried again with backoff until it
// binds, while the agent takes and reports tasks as ever. Exiting instead handed the port to
// whoever held it, and after five exits the unit gave up for good.

// The health sources of the API's listeners: degraded only (the agent works without them).
const (
	HealthListen engine.HealthSource = "api_listen" // --listen
	HealthSocket engine.HealthSource = "api_socket" // --api-socket, the trusted local socket
)

// Retry bounds: the first retry soon (a restart's old process may just be leaving), then
// every ten seconds at most.
const (
	retryFirst = 500 * time.Millisecond
	retryMax   = 10 * time.Second
)

// KeepTrying binds the listener again after the first attempt failed with err, until it binds
// (returned) or ctx ends (nil). Each failure is reported as a problem naming the address and
// who holds it; report("") once bound.
func (a *API) KeepTrying(ctx context.Context, err error, report func(problem string)) net.Listener {
	b := jitter.NewBackoff(retryFirst, retryMax, jitter.Rand(rand.Uint64())) // never gives up
	for {
		report(a.Unbound(err))
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		var ln net.Listener
		if ln, err = a.Listen(); err == nil {
			report("")
			return ln
		}
	}
}

// Unbound words a failure to bind the listener as a health problem: the error, and for a TCP
// port in use, who holds it (a unix socket's live holder is named by Listen's error).
func (a *API) Unbound(err error) string {
	problem := fmt.Sprintf("not listening, tried again every %s at most: %v", retryMax, err)
	if a.network != "tcp" || !errors.Is(err, syscall.EADDRINUSE) {
		return problem
	}
	addr, rerr := net.ResolveTCPAddr("tcp", a.addr)
	if rerr != nil {
		return problem
	}
	h, herr := sockowner.ListenerHolder(addr)
	if herr != nil {
		return problem + "; who holds it is not known (" + herr.Error() + ": bound without listening?)"
	}
	return fmt.Sprintf("%s; held by %s", problem, h)
}
