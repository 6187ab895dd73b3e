package docker

// Which engine serves the address: Docker or Podman, read from the engine's own answers and
// never guessed (issue 46). Taking Podman for Docker would run no health checks and allow
// bind roots where they are refused, so until the engine is named, nothing that depends on
// which it is runs: a create, a start, a health or exit subscription, a bind mount are each
// runtime.ErrUnavailable, naming the address, and the agent is unhealthy while it keeps asking, with
// backoff. The engine is named again whenever it was lost — a call that could not connect, or
// the exit stream broken — since the socket may be served by another engine by then (Docker's
// replaced by Podman's), and so is the socket's peer (checkPeer).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/runtime"
)

type engineKind uint8

const (
	kindUnknown engineKind = iota
	kindDocker
	kindPodman
)

func (k engineKind) String() string { return [...]string{"unknown", "Docker", "Podman"}[k] }

// identifyWait bounds one attempt to name the engine. The /_ping it reads answers at once
// even on a loaded host; Podman's /version, read only when the ping names no engine, runs its
// package manager and took over 30 s under load.
var identifyWait = 30 * time.Second

// identity is what the engine at the address was last named, and why not while it is not.
type identity struct {
	mu      sync.Mutex
	kind    engineKind
	problem string        // while unknown: the last attempt's failure
	asking  bool          // a keepIdentifying loop runs
	changed chan struct{} // closed, and replaced, at every naming and every loss
	// dataRoot is the engine's data root as this naming of it said (dataRoot): Podman's
	// /info takes seconds, and the root changes only with the engine.
	dataRoot string
	ctx      context.Context
	stop     context.CancelFunc
	loops    sync.WaitGroup // the keepIdentifying loop, waited for by stopIdentifying
}

// startIdentifying names the engine once, now, and keeps asking in the background if it
// cannot (knownKind's error, naming the address, says why).
func (e *Engine) startIdentifying(ctx context.Context) error {
	err := e.identify(ctx)
	if err != nil {
		e.lost(err)
		_, err = e.knownKind()
	}
	return err
}

// identify asks the engine once which it is: the headers of its /_ping (Podman names its
// libpod API, Docker its server), else the components its /version names. An engine that
// answers yet names neither stays unknown.
func (e *Engine) identify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, identifyWait)
	defer cancel()
	kind, err := e.pingKind(ctx)
	if err == nil && kind == kindUnknown {
		var v client.ServerVersionResult
		if v, err = e.cli.ServerVersion(ctx, client.ServerVersionOptions{}); err == nil {
			kind = versionKind(v.Components)
		}
	}
	if err != nil {
		return fmt.Errorf("asking which engine it is: %w", err)
	}
	if kind == kindUnknown {
		return errors.New("it names itself neither Docker nor Podman (its /_ping and /version)")
	}
	e.ident.mu.Lock()
	defer e.ident.mu.Unlock()
	e.ident.kind, e.ident.problem, e.ident.dataRoot = kind, "", ""
	e.ident.signal()
	return nil
}

// pingKind reads the headers of the engine's /_ping, through the client's own dialer.
func (e *Engine) pingKind(ctx context.Context) (engineKind, error) {
	dial := e.cli.Dialer()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://engine/_ping", nil)
	if err != nil {
		return kindUnknown, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return kindUnknown, err
	}
	res.Body.Close()
	return headerKind(res.Header), nil
}

// headerKind names the engine by its /_ping headers: Podman's carry its libpod API version
// (its Server header says Libpod), Docker's a Server header "Docker/<version>".
func headerKind(h http.Header) engineKind {
	switch {
	case h.Get("Libpod-Api-Version") != "":
		return kindPodman
	case strings.HasPrefix(h.Get("Server"), "Docker/"):
		return kindDocker
	}
	return kindUnknown
}

// versionKind names the engine by the components of its /version.
func versionKind(cs []system.ComponentVersion) engineKind {
	named := func(n string) bool {
		return slices.ContainsFunc(cs, func(c system.ComponentVersion) bool { return c.Name == n })
	}
	switch {
	case named("Podman Engine"):
		return kindPodman
	case named("Engine"):
		return kindDocker
	}
	return kindUnknown
}

// lost forgets which engine serves the address, and who serves its socket, and asks again
// in the background until it is named.
func (e *Engine) lost(why error) {
	e.ident.mu.Lock()
	defer e.ident.mu.Unlock()
	e.ident.signal()
	e.ident.kind, e.ident.problem, e.ident.dataRoot = kindUnknown, why.Error(), ""
	e.peerChecked.Store(false)
	if e.ident.asking || e.ident.ctx == nil || e.ident.ctx.Err() != nil {
		return
	}
	e.ident.asking = true
	e.ident.loops.Add(1)
	go e.keepIdentifying()
}

// stopIdentifying ends the asking, and waits for it to end (Close).
func (e *Engine) stopIdentifying() {
	e.ident.mu.Lock()
	if e.ident.stop != nil {
		e.ident.stop() // under mu: lost starts no loop after this
	}
	e.ident.mu.Unlock()
	e.ident.loops.Wait()
}

// keepIdentifying asks until the engine is named or closed, with backoff.
func (e *Engine) keepIdentifying() {
	defer e.ident.loops.Done()
	bo := jitter.NewBackoff(250*time.Millisecond, 30*time.Second, jitter.Rand(rand.Uint64()))
	for {
		err := e.identify(e.ident.ctx)
		e.ident.mu.Lock()
		if err == nil || e.ident.ctx.Err() != nil {
			e.ident.asking = false
			e.ident.mu.Unlock()
			return
		}
		if e.ident.problem != err.Error() {
			e.ident.problem = err.Error()
			e.ident.signal()
		}
		e.ident.mu.Unlock()
		select {
		case <-e.ident.ctx.Done():
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// signal wakes whoever waits on a change of the kind or of why it is unknown; the caller
// holds mu.
func (id *identity) signal() {
	if id.changed != nil {
		close(id.changed)
	}
	id.changed = make(chan struct{})
}

// kindNow is the engine's kind as last named (kindUnknown while it is not), with a channel
// closed at the next change of it or of why it is unknown.
func (e *Engine) kindNow() (engineKind, <-chan struct{}) {
	e.ident.mu.Lock()
	defer e.ident.mu.Unlock()
	if e.ident.changed == nil {
		e.ident.changed = make(chan struct{})
	}
	return e.ident.kind, e.ident.changed
}

// knownKind is the engine's kind, or, while it is not named, an error wrapping runtime.ErrUnavailable
// that names the address and why.
func (e *Engine) knownKind() (engineKind, error) {
	e.ident.mu.Lock()
	defer e.ident.mu.Unlock()
	if e.ident.kind == kindUnknown {
		return kindUnknown, fmt.Errorf("docker engine at %s is not named yet, Docker or Podman (%s): %w", e.host, e.ident.problem, runtime.ErrUnavailable)
	}
	return e.ident.kind, nil
}

// dataRoot is the directory the engine keeps its images and containers in, as its /info
// names it, asked once for each naming of the engine (identify) and kept until the next.
func (e *Engine) dataRoot(ctx context.Context) (string, error) {
	e.ident.mu.Lock()
	dir, named := e.ident.dataRoot, e.ident.changed
	e.ident.mu.Unlock()
	if dir != "" {
		return dir, nil
	}
	info, err := e.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return "", e.wrap("info", "of the engine (where its data root lies)", err)
	}
	if dir = info.Info.DockerRootDir; dir == "" {
		return "", fmt.Errorf("docker engine at %s names no data root", e.host)
	}
	e.ident.mu.Lock()
	if e.ident.kind != kindUnknown && e.ident.changed == named { // still the engine that answered
		e.ident.dataRoot = dir
	}
	e.ident.mu.Unlock()
	return dir, nil
}
