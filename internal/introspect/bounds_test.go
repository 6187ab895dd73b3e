package introspect_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/introspect"
)

// TestFollowsHaveTheirOwnPool: followed logs and record long polls are bounded each in its own
// pool: a full pool of quiet follows, and one more refused, leaves record long polls and plain
// log reads going; a full pool of long polls refuses the next one.
func TestFollowsHaveTheirOwnPool(t *testing.T) {
	const follows, polls = 3, 2
	release := make(chan struct{})
	var followsIn, pollsIn sync.WaitGroup
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("follow") == "1":
			followsIn.Done()
		case r.URL.Query().Get("wait") != "":
			pollsIn.Done()
		default:
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	api, _ := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0", Limits: introspect.Limits{Follows: follows, LongPolls: polls}})
	ln, _ := serve(t, api, h)
	logs := fmt.Sprintf("http://%s/v1/tasks/task/1/containers/app/logs", ln.Addr())
	records := fmt.Sprintf("http://%s/v1/journal/records?from=1&wait=60", ln.Addr())
	c := ownClient(30 * time.Second)
	done := make(chan int, follows+polls)
	hold := func(url string) {
		go func() {
			resp, err := c.Get(url)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	followsIn.Add(follows)
	for range follows {
		hold(logs + "?follow=1")
	}
	waitAll(t, &followsIn, "every follow slot held by a quiet follow")
	if code := status(t, c, logs+"?follow=1", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("a follow past its pool: HTTP %d, want 503", code)
	}
	pollsIn.Add(polls)
	for range polls {
		hold(records)
	}
	waitAll(t, &pollsIn, "the record long polls in while the follows hold their slots")
	if code := status(t, c, records, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("a long poll past its pool: HTTP %d, want 503", code)
	}
	if code := status(t, c, logs+"?tail=5", ""); code != http.StatusOK {
		t.Fatalf("a plain log read while the pools are full: HTTP %d, want 200", code)
	}
	close(release)
	for range follows + polls {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("a request within its pool: HTTP %d", code)
		}
	}
}

// waitAll waits for wg, at most 20 s.
func waitAll(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("not within 20 s: %s", what)
	}
}

// followUntilEnd follows a log from a server with the limits and returns the body and the
// trailer saying why the agent ended it; handler is the log.
func followUntilEnd(t *testing.T, limits introspect.Limits, handler http.HandlerFunc) (string, string) {
	t.Helper()
	api, _ := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0", Limits: limits})
	ln, _ := serve(t, api, handler)
	c := ownClient(30 * time.Second) // the bound of this wait: a follow never ended fails here
	resp, err := c.Get(fmt.Sprintf("http://%s/v1/tasks/task/1/containers/app/logs?follow=1", ln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the follow was not ended by the agent: %v", err)
	}
	return string(b), resp.Trailer.Get(introspect.FollowEndTrailer)
}

// TestIdleFollowIsEnded: a follow of a container that writes nothing more is ended after the
// idle limit, with a trailer naming it.
func TestIdleFollowIsEnded(t *testing.T) {
	t.Parallel()
	quiet := func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first line\n"))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // a container that says nothing more; the runtime's stream ends with the context
	}
	body, why := followUntilEnd(t, introspect.Limits{Follows: 1, FollowIdle: 300 * time.Millisecond}, quiet)
	if body != "first line\n" || !strings.Contains(why, "idle limit 300ms") {
		t.Fatalf("idle follow: body %q, trailer %q; want the line and the idle limit named", body, why)
	}
}

// TestFollowLifetimeIsBounded: a follow that keeps writing is ended at its lifetime limit.
func TestFollowLifetimeIsBounded(t *testing.T) {
	t.Parallel()
	chatty := func(w http.ResponseWriter, r *http.Request) {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				w.Write([]byte("line\n"))
				http.NewResponseController(w).Flush()
			}
		}
	}
	body, why := followUntilEnd(t, introspect.Limits{FollowIdle: time.Hour, FollowLifetime: 500 * time.Millisecond}, chatty)
	if !strings.HasPrefix(body, "line\n") || !strings.Contains(why, "lifetime limit 500ms") {
		t.Fatalf("chatty follow: body %.40q, trailer %q; want lines and the lifetime limit named", body, why)
	}
}
