package controlplane

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// reportAt posts one change for agent at the control plane's (virtual) now and returns the
// status and the Retry-After it named.
func reportAt(t *testing.T, s *Server, agent, id string) (int, time.Duration) {
	t.Helper()
	w := httptest.NewRecorder()
	body := fmt.Sprintf(`{"changes":[{"id":%q,"task_arn":"task/%s","status":"RUNNING","at":"2026-01-01T00:00:00Z"}]}`, id, agent)
	s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/agents/"+agent+"/state-changes", strings.NewReader(body)))
	ra := time.Duration(0)
	if v := w.Header().Get("Retry-After"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("Retry-After %q: %v", v, err)
		}
		ra = time.Duration(f * float64(time.Second))
	}
	return w.Code, ra
}

func throttledPlane(t *testing.T, mode string, clients int) (*Server, *time.Time) {
	s := New("", Faults{ThrottleRPS: 10, ThrottleBurst: 1, RetryAfter: mode})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.SetClock(func() time.Time { return now })
	for i := 0; i < clients; i++ {
		a := fmt.Sprintf("a%02d", i)
		_ = s.AddTask(a, protocol.Task{ARN: "task/" + a, DesiredStatus: "RUNNING"}, nil)
	}
	return s, &now
}

// In turn mode (the default), 20 clients throttled at one instant are told 20 distinct turns,
// one 1/rps apart in the order they asked, and each that comes back at its turn is served:
// the fleet needs one 429 per client, not a wave of them.
func TestThrottleHandsOutTurns(t *testing.T) {
	s, now := throttledPlane(t, "", 21)
	if code, _ := reportAt(t, s, "a00", "c-first"); code != 200 {
		t.Fatalf("the burst's token: HTTP %d", code)
	}
	turns := map[string]time.Duration{}
	for i := 1; i <= 20; i++ {
		a := fmt.Sprintf("a%02d", i)
		code, ra := reportAt(t, s, a, "c-"+a)
		if code != 429 {
			t.Fatalf("%s: HTTP %d, want 429", a, code)
		}
		if want := time.Duration(i) * 100 * time.Millisecond; ra < want || ra > want+time.Millisecond {
			t.Fatalf("%s (the %d-th throttled) is told Retry-After %v; want its turn, %v", a, i, ra, want)
		}
		turns[a] = ra
	}
	// a05 comes back early: the rest of the same turn, not a new one behind the others.
	*now = now.Add(200 * time.Millisecond)
	if code, ra := reportAt(t, s, "a05", "c-a05"); code != 429 || ra < 300*time.Millisecond || ra > 301*time.Millisecond {
		t.Fatalf("a05 back 300 ms before its turn: HTTP %d, Retry-After %v; want 429 with the 300 ms left", code, ra)
	}
	*now = now.Add(-200 * time.Millisecond)
	order := make([]string, 0, len(turns))
	for a := range turns {
		order = append(order, a)
	}
	slices.SortFunc(order, func(x, y string) int { return int(turns[x] - turns[y]) })
	start := *now
	for _, a := range order {
		*now = start.Add(turns[a])
		if code, ra := reportAt(t, s, a, "c-"+a); code != 200 {
			t.Fatalf("%s back at its turn (+%v): HTTP %d, Retry-After %v; want it served", a, turns[a], code, ra)
		}
	}
	// The rate holds: a newcomer right after the last turn waits for a token of its own.
	if code, _ := reportAt(t, s, "a00", "c-late"); code != 429 {
		t.Fatalf("a request beside the last turn: HTTP %d; the throttle served more than its rate", code)
	}
	if n := s.Stats().Throttled; n != 22 {
		t.Fatalf("%d answers 429; want 22 (20 first tries, the early one, the newcomer)", n)
	}
}

// In next-token mode every client throttled at one instant is told the same time, the next
// token's, and only one of them is served when they all come back then: the behaviour the
// agent must still cope with.
func TestThrottleNextTokenTellsEveryoneTheSameTime(t *testing.T) {
	s, now := throttledPlane(t, RetryAfterNextToken, 21)
	reportAt(t, s, "a00", "c-first")
	for i := 1; i <= 20; i++ {
		a := fmt.Sprintf("a%02d", i)
		if code, ra := reportAt(t, s, a, "c-"+a); code != 429 || ra != 100*time.Millisecond {
			t.Fatalf("%s: HTTP %d, Retry-After %v; want 429 and the next token's 100 ms", a, code, ra)
		}
	}
	*now = now.Add(100 * time.Millisecond)
	served := 0
	for i := 1; i <= 20; i++ {
		if code, _ := reportAt(t, s, fmt.Sprintf("a%02d", i), fmt.Sprintf("c-a%02d", i)); code == 200 {
			served++
		}
	}
	if served != 1 {
		t.Fatalf("%d of 20 served at the next token; want 1", served)
	}
}

// In mode none a throttled client is told nothing: a 429 without a Retry-After header (protocol
// 1.3 allows it), and the bucket still serves at its rate — what it served is its burst, then
// one a token.
func TestThrottleNoneNamesNothing(t *testing.T) {
	s, now := throttledPlane(t, RetryAfterNone, 21)
	reportAt(t, s, "a00", "c-first")
	for i := 1; i <= 20; i++ {
		a := fmt.Sprintf("a%02d", i)
		w := httptest.NewRecorder()
		body := fmt.Sprintf(`{"changes":[{"id":"c-%s","task_arn":"task/%s","status":"RUNNING","at":"2026-01-01T00:00:00Z"}]}`, a, a)
		s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/agents/"+a+"/state-changes", strings.NewReader(body)))
		if _, named := w.Result().Header["Retry-After"]; w.Code != 429 || named {
			t.Fatalf("%s: HTTP %d, Retry-After header %q; want 429 with no Retry-After", a, w.Code, w.Header().Get("Retry-After"))
		}
	}
	*now = now.Add(100 * time.Millisecond)
	served := 0
	for i := 1; i <= 20; i++ {
		if code, _ := reportAt(t, s, fmt.Sprintf("a%02d", i), fmt.Sprintf("c-a%02d", i)); code == 200 {
			served++
		}
	}
	if served != 1 {
		t.Fatalf("%d of 20 served 100 ms later at 10/s; want 1 (the throttle's rate holds)", served)
	}
}

// A turn nobody claims is given up after turnHold, and the throttle never serves above its
// rate meanwhile: its token stays spent.
func TestUnclaimedTurnIsGivenUp(t *testing.T) {
	th, err := NewThrottle(10, 1, RetryAfterTurn)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th.Take(at, "a")
	if ok, _ := th.Take(at, "gone"); ok || th.Turns() != 1 {
		t.Fatalf("second request at once: served %v, %d turns held; want a turn held", ok, th.Turns())
	}
	if ok, _ := th.Take(at.Add(150*time.Millisecond), "b"); ok {
		t.Fatal("b was served on the token promised to the vanished client's turn")
	}
	later := at.Add(turnHold + 2*time.Second)
	if ok, _ := th.Take(later, "c"); !ok || th.Turns() != 0 {
		t.Fatalf("long after: c served %v, %d turns still held; want c served and the unclaimed turns given up", ok, th.Turns())
	}
	if err := CheckRetryAfter("soon"); err == nil {
		t.Fatal("retry-after mode \"soon\" accepted")
	}
}

// The queue of turns is at most turnHold deep: past it, a request is told when the queue ends
// but books nothing, so a flood of clients (or of made-up agent ids) cannot push every turn
// further out without end.
func TestTurnsQueueIsBounded(t *testing.T) {
	th, _ := NewThrottle(10, 1, RetryAfterTurn)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var last time.Duration
	for i := 0; i < 1000; i++ {
		_, last = th.Take(at, fmt.Sprintf("c%d", i))
	}
	if limit := turnHold + time.Second; last > limit || th.Turns() > 301 {
		t.Fatalf("1000 clients at once: the last told %v, %d turns held; want at most %v and 300 turns", last, th.Turns(), limit)
	}
}
