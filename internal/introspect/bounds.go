package introspect

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// FollowEndTrailer is the HTTP trailer a followed log ends with when the agent ended it (idle
// or lifetime limit), so a client can tell that from the container's end.
const FollowEndTrailer = "Agentd-Follow-End"

// Pools of the API: a client may be slow or hostile, the agent must not care.
const (
	maxInFlight       = 64 // requests of callers with credentials served at once; more get 503
	maxPublicInFlight = 16 // requests of callers without (the open pages on loopback) at once
	maxExports        = 2  // /v1/journal/export copies at once
)

// Limits bound the requests that hold a connection for long: record long polls and followed
// container logs each have their own pool, so no number of follows keeps a record poll out;
// a follow that writes nothing for FollowIdle, or has run for FollowLifetime, is ended.
// Zero fields take the defaults.
type Limits struct {
	LongPolls      int           // /v1/journal/records?wait=… at once (default 8)
	Follows        int           // …/logs?follow=1 at once (default 8)
	FollowIdle     time.Duration // a follow that wrote nothing for this long is ended (default 5m)
	FollowLifetime time.Duration // a follow is ended after this long whatever it writes (default 1h)
	OpenPagesEvery time.Duration // callers without credentials share each open page this long (default 1s)
}

func (l Limits) withDefaults() Limits {
	if l.LongPolls <= 0 {
		l.LongPolls = 8
	}
	if l.Follows <= 0 {
		l.Follows = 8
	}
	if l.FollowIdle <= 0 {
		l.FollowIdle = 5 * time.Minute
	}
	if l.FollowLifetime <= 0 {
		l.FollowLifetime = time.Hour
	}
	if l.OpenPagesEvery <= 0 {
		l.OpenPagesEvery = time.Second
	}
	return l
}

// bounds are the pools of Wrap: requests at once (callers without credentials have their own,
// smaller pool, so they cannot crowd out the rest), exports, record long polls, and followed
// logs, each with its own pool: no kind of long request can take the slots of another.
type bounds struct {
	limits                                    Limits
	inFlight, public, exports, polls, follows chan struct{}
	open                                      *openCache // the open pages' shared answers
}

func newBounds(l Limits) *bounds {
	return &bounds{limits: l, inFlight: make(chan struct{}, maxInFlight), public: make(chan struct{}, maxPublicInFlight),
		exports: make(chan struct{}, maxExports), polls: make(chan struct{}, l.LongPolls), follows: make(chan struct{}, l.Follows),
		open: newOpenCache(l.OpenPagesEvery)}
}

func take(pool chan struct{}) (release func(), ok bool) {
	select {
	case pool <- struct{}{}:
		return func() { <-pool }, true
	default:
		return nil, false
	}
}

func busy(w http.ResponseWriter, what string) {
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "too many " + what + " at once; try again"})
}

func isFollow(r *http.Request) bool {
	f := r.URL.Query().Get("follow")
	return strings.HasSuffix(r.URL.Path, "/logs") && (f == "1" || f == "true")
}

func isLongPoll(r *http.Request) bool {
	wait := r.URL.Query().Get("wait")
	return r.URL.Path == "/v1/journal/records" && wait != "" && wait != "0"
}

// serve runs h within the pools; a follow also within its idle and lifetime limits.
func (b *bounds) serve(h http.Handler, w http.ResponseWriter, r *http.Request, full bool) {
	pool, what := b.inFlight, "requests"
	if !full {
		pool, what = b.public, "requests without credentials"
	}
	release, ok := take(pool)
	if !ok {
		busy(w, what)
		return
	}
	defer release()
	if !full {
		b.open.serve(h, w, r) // the open pages, shared (opencache.go)
		return
	}
	var extra chan struct{}
	switch {
	case r.URL.Path == "/v1/journal/export":
		extra, what = b.exports, "journal exports"
	case isLongPoll(r):
		extra, what = b.polls, "record long polls"
	case isFollow(r):
		extra, what = b.follows, "followed logs"
	}
	if extra != nil {
		release, ok := take(extra)
		if !ok {
			busy(w, what)
			return
		}
		defer release()
	}
	if extra == b.follows && extra != nil {
		b.follow(h, w, r)
		return
	}
	h.ServeHTTP(w, r)
}

// follow serves a followed log that ends when it has written nothing for FollowIdle or has
// run for FollowLifetime: its request's context is cancelled, which ends the runtime's log
// stream, and the answer's trailer says why.
func (b *bounds) follow(h http.Handler, w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), b.limits.FollowLifetime)
	defer cancel()
	w.Header().Set("Trailer", FollowEndTrailer)
	aw := &activityWriter{ResponseWriter: w, last: time.Now()}
	var why string
	var mu sync.Mutex
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(min(b.limits.FollowIdle/4, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if aw.idleFor() >= b.limits.FollowIdle {
					mu.Lock()
					why = "idle limit " + b.limits.FollowIdle.String() + " (nothing written)"
					mu.Unlock()
					cancel()
					return
				}
			}
		}
	}()
	h.ServeHTTP(aw, r.WithContext(ctx))
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	if why == "" && ctx.Err() == context.DeadlineExceeded {
		why = "lifetime limit " + b.limits.FollowLifetime.String()
	}
	if why != "" {
		w.Header().Set(FollowEndTrailer, why)
	}
}

// activityWriter notes when a response was last written to.
type activityWriter struct {
	http.ResponseWriter
	mu   sync.Mutex
	last time.Time
}

func (a *activityWriter) Write(p []byte) (int, error) {
	n, err := a.ResponseWriter.Write(p)
	a.mu.Lock()
	a.last = time.Now()
	a.mu.Unlock()
	return n, err
}

func (a *activityWriter) idleFor() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Since(a.last)
}

// Unwrap lets http.ResponseController reach the connection (flushes, write deadlines).
func (a *activityWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
