package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Claims others make on the images the agent pulled (issue 41). The image list does not show
// all of them: an operator's `docker pull REG/app@sha256:…` of an image already present adds
// nothing to it (the agent's pull recorded that digest already), yet untagging the agent's
// last tag of REG/app drops the digest reference with it, and the image goes. The engine does
// say it, in its events: a `pull` for every pull (of whatever reference, also one that found
// the image up to date), a `tag` for every new name, a `load` for every image loaded.
//
// The invariant kept here: an image the agent fetched is never removed when anyone else
// pulled, tagged or loaded it after the agent's pull fetched it — RemoveImage answers
// ErrImageInUse naming who and when, and the agent's claim ends. The agent's own pulls are
// told apart by time: a pull event for a reference is the agent's when the agent was pulling
// that reference at the event's time (its own clock and the engine's are the host's). Every
// doubt leans to keeping: a pull event the agent cannot place is someone else's, and while
// the events are not followed (the stream broke and is not back), nothing is removed.
//
// What the events cannot show: claims made while the agent was not running (the engine keeps
// its last 256 events; a restart replays none older than the new process), an operator's
// pull of the same reference at the same moment as the agent's, and on Podman a load (its
// event names the archive, not the image).

// imageClaims follows the engine's image events and remembers the claims of others.
type imageClaims struct {
	mu       sync.Mutex
	started  time.Time            // when this process began following (earlier claims are unknown)
	watching bool                 // the event stream is subscribed now
	lastSeen int64                // the last event's time (Unix ns): a resubscription replays from it
	pulling  []ownPull            // the agent's pulls, in flight or ended lately
	pulls    int                  // the agent's pulls begun: each one's number
	fetched  map[string]time.Time // images the agent's pulls fetched, by id: when that pull began
	refs     map[string]claim     // references others pulled, by canonical reference: the latest
	named    map[string][]claim   // images others tagged or loaded, by id: each tag's name, or the load
	done     chan struct{}        // closed when the follower ends
}

// ownPull is one of the agent's pulls: its reference (canonical) from start to end (zero: in
// flight).
type ownPull struct {
	n          int
	ref        string
	start, end time.Time
}

// claim is another's pull, tag or load: what the engine's event said.
type claim struct {
	action, name string
	at           time.Time
}

// ownPullKept is how long an ended pull of the agent's still claims its events: one the stream
// delivers later than this is taken for someone else's (a kept image, never a lost one).
const ownPullKept = 10 * time.Minute

func newImageClaims(now time.Time) *imageClaims {
	return &imageClaims{started: now, lastSeen: now.UnixNano(), fetched: map[string]time.Time{},
		refs: map[string]claim{}, named: map[string][]claim{}, done: make(chan struct{})}
}

// followClaims starts following the engine's image events, until Close.
func (e *Engine) followClaims() {
	ctx, cancel := context.WithCancel(context.Background())
	e.claims, e.stopFollowing = newImageClaims(time.Now()), cancel
	go e.claims.follow(ctx, e.cli)
}

// unfollowClaims stops following, and waits for the follower to end.
func (e *Engine) unfollowClaims() {
	if e.claims != nil {
		e.stopFollowing()
		<-e.claims.done
	}
}

// follow subscribes to the engine's image events until ctx ends, subscribing again from the
// last event seen whenever the stream breaks (the engine replays what it still holds).
func (c *imageClaims) follow(ctx context.Context, cli *client.Client) {
	defer close(c.done)
	wait := time.Second
	for ctx.Err() == nil {
		c.mu.Lock()
		since := c.lastSeen
		c.mu.Unlock()
		sctx, cancel := context.WithCancel(ctx)
		res := cli.Events(sctx, client.EventsListOptions{Since: stamp(since), Filters: claimEvents})
		c.setWatching(true)
		delivered := c.take(sctx, res)
		c.setWatching(false)
		cancel()
		if delivered {
			wait = time.Second // it ran: the next break starts the backoff afresh
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			wait = min(2*wait, 30*time.Second)
		}
	}
}

// take reads one subscription until it breaks; it says whether it delivered anything.
func (c *imageClaims) take(ctx context.Context, res client.EventsResult) (delivered bool) {
	for {
		select {
		case <-ctx.Done():
			return delivered
		case <-res.Err:
			return delivered
		case m := <-res.Messages:
			delivered = true
			c.saw(m)
		}
	}
}

// catchUp reads what the engine's events hold from the last one seen until now (and ahead
// beyond it), so that a decision made now also sees a claim the stream has not delivered yet.
// Podman replays nothing up to an end already past when it reads it: its catch-up reads up
// to a second ahead (podmanAhead), which Docker would wait out.
func (c *imageClaims) catchUp(ctx context.Context, cli *client.Client, ahead time.Duration) error {
	if c == nil {
		return nil // othersClaim says why nothing can be told
	}
	c.mu.Lock()
	since := c.lastSeen
	c.mu.Unlock()
	now := time.Now().Add(ahead).UnixNano()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second+ahead)
	defer cancel()
	res := cli.Events(ctx, client.EventsListOptions{Since: stamp(since), Until: stamp(now), Filters: claimEvents})
	for {
		select {
		case err := <-res.Err:
			if err == nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read the engine's image events since %s: %w", time.Unix(0, since).UTC().Format(time.RFC3339Nano), err)
		case m := <-res.Messages:
			c.saw(m)
		}
	}
}

// podmanAhead is how far past now the catch-up reads on Podman (catchUp).
const podmanAhead = time.Second

// claimEvents are the engine's events that claim an image, and its deletion (which ends them):
// Podman filters its "delete" by the name "remove" (and sends it as "delete").
var claimEvents = client.Filters{}.Add("type", "image").Add("event", "pull", "tag", "load", "delete", "remove")

func (c *imageClaims) setWatching(on bool) {
	c.mu.Lock()
	c.watching = on
	c.mu.Unlock()
}

// saw notes one image event: a pull not the agent's claims its reference, a tag or a load
// claims the image, a deletion of the image ends its claims. The engines word them apart:
// Docker's pull names the reference as the event's id, Podman's in its "name" (no id); Podman
// gives ids without Docker's "sha256:", and sends a "delete" of an image at every untag too,
// naming the tag, and at the image's removal naming its id.
func (c *imageClaims) saw(m events.Message) {
	at := time.Unix(0, m.TimeNano)
	id, name := imageID(m.Actor.ID), m.Actor.Attributes["name"]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastSeen = max(c.lastSeen, m.TimeNano)
	switch m.Action {
	case events.ActionPull:
		if m.Actor.ID != "" {
			name = m.Actor.ID
		}
		ref := event.CanonicalImageRef(name)
		if !c.ownAt(ref, at) {
			c.refs[ref] = claim{action: "pulled", name: name, at: at}
		}
	case events.ActionDelete:
		if name == "" || imageID(name) == id { // the image gone: whatever claimed it
			delete(c.named, id)
			delete(c.fetched, id)
		}
	case events.ActionTag, events.ActionLoad:
		did := map[events.Action]string{events.ActionTag: "tagged", events.ActionLoad: "loaded"}[m.Action]
		c.named[id] = append(c.named[id], claim{action: did, name: name, at: at})
	}
}

// imageID is an image id as the engine's inspect and list give it: Podman's events give the
// digest's hex without its "sha256:".
func imageID(id string) string {
	if len(id) == 64 && strings.Trim(id, "0123456789abcdef") == "" {
		return "sha256:" + id
	}
	return id
}

// ownAt says whether the agent was pulling ref at t.
func (c *imageClaims) ownAt(ref string, t time.Time) bool {
	for _, p := range c.pulling {
		if p.ref == ref && !t.Before(p.start) && (p.end.IsZero() || !t.After(p.end)) {
			return true
		}
	}
	return false
}

// pull notes the start of one of the agent's pulls; the function it returns notes its end,
// and the image it fetched (empty: none).
func (c *imageClaims) pull(image string) func(fetched string) {
	if c == nil {
		return func(string) {}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pulls++
	p := ownPull{n: c.pulls, ref: event.CanonicalImageRef(image), start: time.Now()}
	c.prune(p.start)
	c.pulling = append(c.pulling, p)
	return func(fetched string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := range c.pulling { // in flight, so not pruned
			if c.pulling[i].n == p.n {
				c.pulling[i].end = time.Now()
			}
		}
		if fetched != "" {
			c.fetched[fetched] = p.start
		}
	}
}

// prune forgets the agent's pulls that ended longer ago than ownPullKept.
func (c *imageClaims) prune(now time.Time) {
	kept := c.pulling[:0]
	for _, p := range c.pulling {
		if p.end.IsZero() || now.Sub(p.end) < ownPullKept {
			kept = append(kept, p)
		}
	}
	c.pulling = kept
}

// othersClaim names a claim someone else made on the image after the agent's pull fetched it
// that taking back the agent's names (refs) would undo ("" when none is known): a pull of any
// reference that names it now (the last tag of a repository takes its digest references
// with it), a load, or a tag of one of the agent's own names. A tag of another name needs no
// word here: the image list shows it, and the image outlives the untag. resolve says which
// image a reference names now (ErrNotFound: none). It is an error when the events are not
// being followed: nobody can say.
func (c *imageClaims) othersClaim(imageID string, refs []string, resolve func(ref string) (string, error)) (string, error) {
	if c == nil {
		return "", fmt.Errorf("the engine's image events are not followed by this runtime, so whether someone else pulled or tagged it cannot be told")
	}
	c.mu.Lock()
	watching, since := c.watching, c.started
	if t, ok := c.fetched[imageID]; ok {
		since = t
	}
	var pulled []claim
	for _, cl := range c.refs {
		if !cl.at.Before(since) {
			pulled = append(pulled, cl)
		}
	}
	var direct []claim
	for _, cl := range c.named[imageID] {
		if cl.action == "loaded" || slices.ContainsFunc(refs, func(r string) bool { return event.CanonicalImageRef(r) == event.CanonicalImageRef(cl.name) }) {
			direct = append(direct, cl)
		}
	}
	c.mu.Unlock()
	if !watching {
		return "", fmt.Errorf("the engine's image events are not being followed now (the stream broke), so whether someone else pulled or tagged it since cannot be told; kept for now")
	}
	for _, cl := range direct {
		if !cl.at.Before(since) {
			return fmt.Sprintf("%s %s by someone else at %s", cl.action, cl.name, cl.at.UTC().Format(time.RFC3339)), nil
		}
	}
	for _, cl := range pulled {
		got, err := resolve(cl.name)
		if errors.Is(err, runtime.ErrNotFound) {
			c.mu.Lock()
			if c.refs[event.CanonicalImageRef(cl.name)] == cl {
				delete(c.refs, event.CanonicalImageRef(cl.name)) // it names nothing now: nothing left to keep
			}
			c.mu.Unlock()
			continue
		}
		if err != nil {
			return "", err
		}
		if got == imageID {
			return fmt.Sprintf("%s %s by someone else at %s", cl.action, cl.name, cl.at.UTC().Format(time.RFC3339)), nil
		}
	}
	return "", nil
}
