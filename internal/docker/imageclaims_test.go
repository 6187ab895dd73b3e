package docker

import (
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"

	"github.com/agentd/agentd/internal/runtime"
)

// TestImageClaimsTellOthersFromTheAgent: which of the engine's image events keep an image the
// agent fetched from collection. The agent pulls reg/app:1 (image sha256:app); then one event
// each scenario. Only another's claim made after the agent's pull keeps it, and the reason
// names it; the agent's own pull event never does.
func TestImageClaimsTellOthersFromTheAgent(t *testing.T) {
	const hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const id, ref, pin = "sha256:" + hex, "reg.example/app:1", "reg.example/app@sha256:0123456789012345678901234567890123456789012345678901234567890123"
	resolve := func(r string) (string, error) {
		if r == ref || r == pin {
			return id, nil
		}
		return "", runtime.ErrNotFound
	}
	pull := func(name string) events.Message {
		return events.Message{Action: events.ActionPull, Actor: events.Actor{ID: name}}
	}
	tag := func(name string) events.Message {
		return events.Message{Action: events.ActionTag, Actor: events.Actor{ID: id, Attributes: map[string]string{"name": name}}}
	}
	// Podman's: a pull names the reference in "name" and has no id; ids lack "sha256:".
	podmanPull := func(name string) events.Message {
		return events.Message{Action: events.ActionPull, Actor: events.Actor{Attributes: map[string]string{"name": name}}}
	}
	podmanTag := func(name string) events.Message {
		return events.Message{Action: events.ActionTag, Actor: events.Actor{ID: hex, Attributes: map[string]string{"name": name}}}
	}
	for _, tc := range []struct {
		name   string
		during bool           // the event comes while the agent's pull is out
		event  events.Message // its time is set by the test
		kept   string         // what the reason names; "" removable
	}{
		{"the agent's own pull event", true, pull(ref), ""},
		{"an operator's pull by digest after the agent's", false, pull(pin), "pulled " + pin},
		{"an operator's pull of the agent's tag after the agent's", false, pull(ref), "pulled " + ref},
		{"an operator's pull by digest while the agent pulls the tag", true, pull(pin), "pulled " + pin},
		{"a pull of a reference that names another image now", false, pull("reg.example/other:1"), ""},
		{"an operator's tag of the agent's own name", false, tag("reg.example/app:1"), "tagged reg.example/app:1"},
		{"an operator's tag of another name (the image list shows it)", false, tag("ops/keep:1"), ""},
		{"Podman: the agent's own pull event", true, podmanPull(ref), ""},
		{"Podman: an operator's pull by digest after the agent's", false, podmanPull(pin), "pulled " + pin},
		{"Podman: an operator's tag of the agent's own name", false, podmanTag("reg.example/app:1"), "tagged reg.example/app:1"},
		{"a load of the image", false, events.Message{Action: events.ActionLoad, Actor: events.Actor{ID: id, Attributes: map[string]string{"name": id}}}, "loaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newImageClaims(time.Now().Add(-time.Minute))
			c.watching = true
			ended := c.pull(ref)
			tc.event.TimeNano = time.Now().UnixNano()
			if !tc.during {
				ended(id)
				tc.event.TimeNano = time.Now().Add(time.Millisecond).UnixNano()
			}
			c.saw(tc.event)
			if tc.during {
				ended(id)
			}
			why, err := c.othersClaim(id, []string{ref}, resolve)
			if err != nil {
				t.Fatal(err)
			}
			if tc.kept == "" && why != "" || tc.kept != "" && !strings.Contains(why, tc.kept) {
				t.Fatalf("kept for %q; want %q", why, tc.kept)
			}
		})
	}
	// A deletion ends the claims on the image: Docker's names the image by its id, as Podman's
	// does when the image goes; Podman's at an untag names the tag, and the image stays.
	for _, tc := range []struct {
		name  string
		del   events.Actor
		ended bool
	}{
		{"Docker: the image deleted", events.Actor{ID: id, Attributes: map[string]string{"name": id}}, true},
		{"Podman: the image deleted", events.Actor{ID: hex, Attributes: map[string]string{"name": hex}}, true},
		{"Podman: a tag untagged, the image kept", events.Actor{ID: hex, Attributes: map[string]string{"name": "ops/keep:2"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newImageClaims(time.Now().Add(-time.Minute))
			c.watching = true
			c.pull(ref)(id)
			c.saw(events.Message{Action: events.ActionTag, Actor: events.Actor{ID: hex, Attributes: map[string]string{"name": ref}}, TimeNano: time.Now().Add(time.Millisecond).UnixNano()})
			c.saw(events.Message{Action: events.ActionDelete, Actor: tc.del, TimeNano: time.Now().Add(2 * time.Millisecond).UnixNano()})
			why, err := c.othersClaim(id, []string{ref}, resolve)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ended != (why == "") {
				t.Fatalf("after the delete %+v: kept for %q; want the operator's tag claim ended: %v", tc.del, why, tc.ended)
			}
		})
	}
	t.Run("the events not followed: nothing is removed", func(t *testing.T) {
		if _, err := newImageClaims(time.Now()).othersClaim(id, []string{ref}, resolve); err == nil || !strings.Contains(err.Error(), "not being followed") {
			t.Fatalf("err %v; want one saying the events are not followed", err)
		}
	})
}
