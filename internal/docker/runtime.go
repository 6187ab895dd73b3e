// Package docker holds agentd's container runtime interface (Runtime and the optional
// interfaces beside it, the types they speak, and the rules every runtime shares: Name,
// CheckStart, StopTimeout, BindRoots) and its Docker Engine runtime, a real engine through its
// API socket. The simulated runtime (package simruntime) implements the same interfaces over
// the same rules; package runtimetest holds the contract tests both pass.
//
// Every runtime promises: containers carry the agent id, task ARN and container name as
// labels, and a runtime only ever touches containers labelled with its own agent id; Create is
// idempotent by (task, container) so a crash between create and journaling the id never makes
// a second container; Remove of a container that is already gone succeeds.
//
// Images (issue 17): PullImage pulls as a pull policy says and reports the digest it used
// (pull.go: retries of transient failures, an inactivity timeout instead of a deadline, a
// cached image when "always" cannot reach the registry); registry credentials come from a
// Docker config.json re-read when it changes (registryauth.go) and never appear in an error
// or a log line; an image is the agent's only when its pull fetched an id the engine lacked,
// and RemoveImage takes back only the agent's names of it (an untag, never forced: Docker
// deletes the image with its last name; images.go). The simulated runtime models the same.
package docker

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
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

// ErrNotFound is returned (wrapped) for a container the runtime does not have.
var ErrNotFound = errors.New("container not found")

// ErrImageInUse is returned (wrapped) by RemoveImage for an image a container (running or
// not) still uses, or one other references still name: it is left as it is (never forced),
// and the agent's claim on it ends.
var ErrImageInUse = errors.New("image in use")

// ErrNameTaken is returned (wrapped) by Create when the container's name is held by a
// container that is not this one (another agent's, or not agentd's): a failure of this
// container alone, which the error names, never of the runtime.
var ErrNameTaken = errors.New("name taken")

// ErrUnavailable is returned (wrapped) when the runtime itself cannot be reached: the call may
// succeed later and says nothing about the container.
var ErrUnavailable = errors.New("runtime unavailable")

// CreateSpec is everything a container is made from: what the protocol carries, nothing else.
type CreateSpec struct {
	Task      string
	Container event.ContainerSpec
	// ImageID is the image the container's pull resolved its reference to (empty: not
	// known). The container is made from it, not from the reference, which may have moved to
	// another image since (a re-push pulled by another task): what runs is what was journaled.
	ImageID string
}

// Name is the runtime name of a task's container:
// agentd-<agent id>-<task id>-<container name>-<digest>, where agent id and task id are the
// readable tails of the agent id and the task ARN (only characters Docker allows in a name,
// at most nameAgentLen and nameTaskLen of them) and digest is the first 64 bits of SHA-256
// over the whole agent id and ARN, in hex. Two containers share a name only if they are the
// same container of the same task of the same agent, or SHA-256 collides in 64 bits: neither
// two ARNs (the 32-bit FNV of the names before broke in a second's search) nor one ARN on two
// agents sharing an engine (an agent re-registered under a new id while its old containers
// run) can take each other's names. The agent finds its containers by label, never by name,
// so containers made under the names of an older agent are still found and adopted.
func Name(agent, task, container string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(agent), agent) // length-prefixed: ("a", "b/c") and ("ab", "/c") differ
	h.Write([]byte(task))
	return fmt.Sprintf("agentd-%s-%s-%s-%x", nameTail(agent, "", nameAgentLen), nameTail(task, "/:", nameTaskLen), container, h.Sum(nil)[:8])
}

// The readable parts of a name are bounded, so a long ARN or agent id never makes a name
// nobody can read in `docker ps`; the digest carries the rest.
const (
	nameAgentLen = 24
	nameTaskLen  = 40
)

// nameTail is s after its last cut character (none: all of s), kept to the characters Docker
// allows in a container name, at most max of them from the end.
func nameTail(s, cut string, max int) string {
	if i := strings.LastIndexAny(s, cut); cut != "" && i >= 0 {
		s = s[i+1:]
	}
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		}
	}
	out := b.String()
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
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
	// first verdict); Bindings the host ports bound for it while it runs.
	Health   event.Health
	Bindings []event.NetworkBinding
}

// Exit is a container that stopped, as seen in the runtime's event stream.
type Exit struct {
	ID        string
	Task      string
	Container string
	ExitCode  int
	OOMKilled bool // killed for going over its memory limit: report a reason starting OutOfMemory
	// Reason says what is known of an exit's cause where that matters ("": nothing to add):
	// a SIGKILL under a memory limit that neither the engine nor the kernel's OOM
	// notification could be asked about is said to be of unknown cause (OOMUnknown).
	Reason string
	At     time.Time
	Cursor int64 // the stream's position at this exit: it resumes here (ExitMark)
}

// OOMUnknown is the reason of an exit 137 under a memory limit whose cause no one could tell:
// the engine did not say OOM and the kernel's OOM notification was not watched (oomwatch.go).
const OOMUnknown = "killed (SIGKILL) under a memory limit: whether for going over it is unknown (neither the engine nor the kernel's OOM notification could be read)"

// ExitMark is how far a reader of the exit stream has come: the cursor of the exits it took
// last, and which containers' exits it took at exactly that cursor. Two containers can exit in
// the same nanosecond (Docker's die times are the daemon's wall clock), so a stream resumed
// only after the cursor could skip the second for good — its container would stay RUNNING in
// the agent. Runtime.Exits therefore gives every exit at or after its cursor, and the reader
// drops the ones it already took there (Taken). The set is reset whenever the cursor moves on.
type ExitMark struct {
	Cursor int64
	taken  []string // ids of the containers whose exits at Cursor were taken
}

// Taken says whether x is an exit at the mark's cursor that the reader already took.
func (m *ExitMark) Taken(x Exit) bool {
	return x.Cursor == m.Cursor && slices.Contains(m.taken, x.ID)
}

// Take notes x as taken. An exit behind the mark (a stream gives none) leaves it as it is.
func (m *ExitMark) Take(x Exit) {
	switch {
	case x.Cursor > m.Cursor:
		m.Cursor, m.taken = x.Cursor, []string{x.ID}
	case x.Cursor == m.Cursor && !slices.Contains(m.taken, x.ID):
		m.taken = append(slices.Clip(m.taken), x.ID) // a copy of the mark keeps its own set
	}
}

// HealthChange is a container's health check reaching a verdict (PROTOCOL.md §4).
type HealthChange struct {
	ID        string
	Task      string
	Container string
	Health    event.Health // HealthHealthy or HealthUnhealthy
	At        time.Time
}

// LogOptions select a container's log: the last Tail lines (negative: all), and with Follow
// what it writes after, until the container stops or the context ends.
type LogOptions struct {
	Tail   int
	Follow bool
}

// Runtime is a container runtime. Calls may block on I/O; every call takes a context.
type Runtime interface {
	// Name says which runtime this is ("sim", "docker").
	Name() string
	// Pull makes the image present (no-op when it already is).
	Pull(ctx context.Context, image string) error
	// Create makes the container, or returns the existing one of the same task and name.
	Create(ctx context.Context, spec CreateSpec) (id string, err error)
	// Start starts a container that never ran; a running one is left as it is (nil); one
	// that has run and stopped is never started again: ErrAlreadyStarted.
	Start(ctx context.Context, id string) error
	// Stop signals the container with its stop signal and kills it after stopTimeout.
	Stop(ctx context.Context, id string, timeout time.Duration) error
	// Remove deletes the container and its anonymous volumes; gone already is success.
	Remove(ctx context.Context, id string) error
	Inspect(ctx context.Context, id string) (State, error)
	// Find returns the container of a task by name, or ErrNotFound.
	Find(ctx context.Context, task, container string) (State, error)
	// List returns every container carrying this agent's id.
	List(ctx context.Context) ([]State, error)
	// Exits streams container exits at or after cursor until ctx ends; the channel closes on
	// error or end, and the caller resubscribes from the last cursor it saw, dropping the
	// exits it already took at that cursor (ExitMark).
	Exits(ctx context.Context, cursor int64) (<-chan Exit, error)
	Close() error
}

// The runtime's answers to PROTOCOL.md §4 beyond Runtime, each its own interface so that a
// runtime (or a test's stand-in) without them still is a Runtime: callers ask with a type
// assertion. Both Engine and the simulated runtime have them all.

// HealthWatcher follows containers' health checks.
type HealthWatcher interface {
	// Health streams health verdicts of this agent's containers until ctx ends: first the
	// current verdict of every running container that has one, then each change. The
	// channel closes on error or end; the caller resubscribes, and since every subscription
	// starts with the current verdicts, it needs no cursor (handling must be idempotent).
	Health(ctx context.Context) (<-chan HealthChange, error)
}

// LogReader reads containers' logs.
type LogReader interface {
	// Logs returns a container's stdout and stderr multiplexed in the Docker Engine's
	// stream format (demultiplex with github.com/moby/moby/api/pkg/stdcopy).
	Logs(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, error)
}

// PolicyPuller pulls as a container's pull_policy says. Superseded by ImagePuller, which says
// what it pulled; kept so callers that have not moved yet still honour the policy.
type PolicyPuller interface {
	// PullWith makes the image present as policy says: always, never, if-not-present (Pull).
	PullWith(ctx context.Context, image, policy string) error
}

// PullOutcome is what PullImage did.
type PullOutcome struct {
	// Digest is the content digest actually used, "sha256:…": the repo digest for an image
	// from a registry, the image id otherwise (an image built or loaded on the host).
	Digest string
	// ImageID is the engine's image id ("sha256:…"), which RemoveImage takes.
	ImageID string
	// Pulled says this call fetched the image from a registry: its id was absent before the
	// call, so the image is the agent's (image GC only ever removes such images). An image the
	// engine held under another name (an operator's digest-pinned pull) is not, whatever
	// reference the call found absent.
	Pulled bool
	// RefExisted says the reference named this very image before the call: the call made no
	// name, so collection never takes this one back.
	RefExisted bool
	// Note says what notable happened, e.g. a cached image used after a failed pull; never
	// a credential.
	Note string
}

// ImagePuller makes images present as a container's pull_policy says (PROTOCOL.md §4).
type ImagePuller interface {
	// PullImage makes the image present as policy says ("always", "never", "if-not-present";
	// empty: the runtime's default policy). Transient failures (5xx, broken connections,
	// timeouts, a pull that stops making progress) are retried inside, a bounded number of
	// times; permanent ones (unauthorized, unknown manifest, a bad reference) end it at once.
	// Its errors name the image and the cause; ErrUnavailable only when the runtime itself
	// does not answer. With "always", a pull that failed transiently falls back to the
	// image the runtime has (Pulled false, Note says so).
	PullImage(ctx context.Context, image, policy string) (PullOutcome, error)
}

// ImageCollector removes images and says how full the disk they live on is.
type ImageCollector interface {
	// RemoveImage takes back the agent's names of an image it pulled: each of refs that still
	// names the image is removed (an untag, never forced), and the engine deletes the image
	// with its last name, when no other name holds it and no container uses it. ErrNotFound:
	// it is gone already; ErrImageInUse: the engine keeps it, held by another name or a
	// container (the error says which) — no longer the agent's to remove.
	RemoveImage(ctx context.Context, imageID string, refs []string) error
	// ImageDiskFree is the free and total bytes of the file system images are kept on.
	ImageDiskFree(ctx context.Context) (free, total uint64, err error)
}

// BindHolder is a runtime that holds something for a container until its start (the Docker
// runtime: the descriptors of its bind sources).
type BindHolder interface {
	// NeverStarted says the agent will never start the container: it was recorded stopped
	// before it ever started (durably: after the commit), so what it holds for that start can
	// go. Local and quick (no call to the engine); idempotent.
	NeverStarted(id string)
}

var (
	_ Full       = (*Engine)(nil)
	_ BindHolder = (*Engine)(nil)
)

// Full is a runtime with every answer of PROTOCOL.md §4: what both of agentd's runtimes are.
type Full interface {
	Runtime
	HealthWatcher
	LogReader
	PolicyPuller
	ImagePuller
	ImageCollector
}

// StopTimeout is how long a stop waits between the stop signal and the kill, the one rule both
// runtimes follow: the container's own stop_timeout_s (own) when it was created with one, else
// the caller's timeout (the agent's).
func StopTimeout(own *int, timeout time.Duration) time.Duration {
	if own != nil {
		return time.Duration(*own) * time.Second
	}
	return timeout
}
