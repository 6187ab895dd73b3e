// Package runtime is agentd's container runtime contract: Runtime, the one interface every
// runtime implements, the types it speaks, its errors and the rules every runtime shares
// (Name, CheckStart, CheckPullPolicy, StopTimeout, SortBindings). Package docker implements
// it over a real Docker Engine, package simruntime in memory; package runtimetest holds the
// contract tests both pass.
//
// Every runtime promises: containers carry the agent id, task ARN and container name as
// labels, and a runtime only ever touches containers labelled with its own agent id; Create is
// idempotent by (task, container) so a crash between create and journaling the id never makes
// a second container; Remove of a container that is already gone succeeds; a container that
// has run is never started again (CheckStart); PullImage pulls as a pull policy says and
// reports the digest it used; RemoveImage takes back only the agent's names of an image.
package runtime

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Labels put on every container agentd creates.
const (
	LabelAgent     = "io.agentd.agent"
	LabelTask      = "io.agentd.task-arn"
	LabelContainer = "io.agentd.container"
	// LabelStopTimeout holds the container's own stop_timeout_s, on a container that has one.
	LabelStopTimeout = "io.agentd.stop-timeout-s"
)

// Runtime is a container runtime with every answer of protocol.md §4. Calls may block on I/O;
// every call takes a context.
type Runtime interface {
	// Name says which runtime this is ("sim", "docker").
	Name() string
	// PullImage makes the image present as policy says ("always", "never", "if-not-present";
	// empty: the runtime's default policy). Transient failures (5xx, broken connections,
	// timeouts, a pull that stops making progress) are retried inside, a bounded number of
	// times; permanent ones (unauthorized, unknown manifest, a bad reference) end it at once.
	// Its errors name the image and the cause; ErrUnavailable only when the runtime itself
	// does not answer. With "always", a pull that failed transiently falls back to the
	// image the runtime has (Pulled false, Note says so).
	PullImage(ctx context.Context, image, policy string) (PullOutcome, error)
	// Create makes the container, or returns the existing one of the same task and name.
	Create(ctx context.Context, spec CreateSpec) (id string, err error)
	// Start starts a container that never ran; a running one is left as it is (nil); one
	// that has run and stopped is never started again: ErrAlreadyStarted.
	Start(ctx context.Context, id string) error
	// NeverStarted says the agent will never start the container: it was recorded stopped
	// before it ever started (durably: after the commit), so what the runtime holds for that
	// start (the Docker runtime: the descriptors of its bind sources) can go. Local and quick
	// (no call to the engine); idempotent.
	NeverStarted(id string)
	// Stop signals the container with its stop signal and kills it after stopTimeout.
	Stop(ctx context.Context, id string, timeout time.Duration) error
	// Remove deletes the container and its anonymous volumes; gone already is success.
	Remove(ctx context.Context, id string) error
	// RemoveUnlessStarted is the fence against a start asked earlier (by a process that
	// died, or a call whose answer was lost) landing late: it deletes the container unless
	// it has started — a remove that is not forced, after an inspect that shows it never
	// started — so that no start can land on it after, and one that ran is never taken for
	// one that did not (the agent may make a fenced container again). ErrRunning: it runs or
	// ran (the start landed); ErrNotFound: it is gone — also one a start ran between that
	// inspect and the remove (the engine's events tell), which must not be made again.
	RemoveUnlessStarted(ctx context.Context, id string) error
	Inspect(ctx context.Context, id string) (State, error)
	// Find returns the container of a task by name, or ErrNotFound.
	Find(ctx context.Context, task, container string) (State, error)
	// List returns every container carrying this agent's id.
	List(ctx context.Context) ([]State, error)
	// Exits streams container exits at or after cursor until ctx ends; the channel closes on
	// error or end, and the caller resubscribes from the last cursor it saw, dropping the
	// exits it already took at that cursor (ExitMark).
	Exits(ctx context.Context, cursor int64) (<-chan Exit, error)
	// Health streams health verdicts of this agent's containers until ctx ends: first the
	// current verdict of every running container that has one, then each change. The
	// channel closes on error or end; the caller resubscribes, and since every subscription
	// starts with the current verdicts, it needs no cursor (handling must be idempotent).
	Health(ctx context.Context) (<-chan HealthChange, error)
	// Logs returns a container's stdout and stderr multiplexed in the Docker Engine's
	// stream format (demultiplex with github.com/moby/moby/api/pkg/stdcopy).
	Logs(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, error)
	// RemoveImage takes back the agent's names of an image it pulled: each of refs that still
	// names the image is removed (an untag, never forced), and the engine deletes the image
	// with its last name, when no other name holds it and no container uses it. ErrNotFound:
	// it is gone already; ErrImageInUse: the engine keeps it, held by another name or a
	// container (the error says which) — no longer the agent's to remove.
	RemoveImage(ctx context.Context, imageID string, refs []string) error
	// ImageDiskFree is the free and total bytes of the file system images are kept on.
	ImageDiskFree(ctx context.Context) (free, total uint64, err error)
	Close() error
}

// CreateSpec is everything a container is made from: what the protocol carries, nothing else.
type CreateSpec struct {
	Task      string
	Container event.ContainerSpec
	// ImageID is the image the container's pull resolved its reference to (empty: not
	// known). The container is made from it, not from the reference, which may have moved to
	// another image since (a re-push pulled by another task): what runs is what was journaled.
	ImageID string
}

// State is what the runtime knows of one container.
type State struct {
	ID         string
	Task       string
	Container  string
	Running    bool
	Exited     bool      // has run and stopped
	StartedAt  time.Time // when it was last started (zero: never)
	ExitCode   int
	OOMKilled  bool // the kernel killed it for going over its memory limit
	FinishedAt time.Time
	// Health is the verdict of its health check (HealthUnknown without one, or before the
	// first verdict); Bindings the host ports bound for it while it runs (SortBindings).
	Health   event.Health
	Bindings []event.NetworkBinding
}

// SortBindings puts a container's host bindings in the one order every runtime reports them
// in (container port, protocol, host IP, host port), so equal bindings compare equal.
func SortBindings(bs []event.NetworkBinding) {
	slices.SortFunc(bs, func(a, b event.NetworkBinding) int {
		return cmp.Or(cmp.Compare(a.ContainerPort, b.ContainerPort), strings.Compare(a.Protocol, b.Protocol),
			strings.Compare(a.HostIP, b.HostIP), cmp.Compare(a.HostPort, b.HostPort))
	})
}

// LogOptions select a container's log: the last Tail lines (negative: all), and with Follow
// what it writes after, until the container stops or the context ends.
type LogOptions struct {
	Tail   int
	Follow bool
}

// StopTimeout is how long a stop waits between the stop signal and the kill, the one rule every
// runtime follows: the container's own stop_timeout_s (own) when it was created with one, else
// the caller's timeout (the agent's).
func StopTimeout(own *int, timeout time.Duration) time.Duration {
	if own != nil {
		return time.Duration(*own) * time.Second
	}
	return timeout
}
