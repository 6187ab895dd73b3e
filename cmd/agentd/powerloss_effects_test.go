package main

// What the runtime did before a power cut has its durable cause in the journal that survived
// it: the agent releases a runtime call only after the records deciding it are committed, so
// a container the engine removed has its task's stopped_acked on disk, and one it started has
// its start intent (call_started). The simulated engine's file lies outside the lazy mount, as
// a real engine's store lies outside the agent's data directory: the cut leaves what the
// runtime did and takes only what the agent had not synced.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/simruntime"
)

// simContainer is what the check reads of a container in the simulated engine's file
// (internal/simruntime/store.go: a line of the whole state, then a put or del line a change).
type simContainer struct {
	ID        string `json:"id"`
	Task      string `json:"task"`
	Container string `json:"container"`
	Runs      int    `json:"runs"`
}

// runtimeEffects is every container the engine was seen to hold, across the cuts, and the
// totals checked.
type runtimeEffects struct {
	dir               string
	seen              map[string]simContainer // by id; Runs is the most seen
	removals, starts  int                     // checked at the last cut
	created, unlearnt int64                   // the engine's count; ids removed before the check ever read them
}

func newRuntimeEffects(dir string) *runtimeEffects {
	return &runtimeEffects{dir: dir, seen: map[string]simContainer{}}
}

// read replays the engine's file and returns the ids it holds now; every container any line
// names is remembered, so one created and removed between two cuts is still known.
func (e *runtimeEffects) read(t *testing.T) (live map[string]bool) {
	t.Helper()
	path := filepath.Join(e.dir, simruntime.FileName)
	live = map[string]bool{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		// The engine writes its file at its first container (off the mount, no cut drops it):
		// an agent cut before it made any has none.
		return live
	} else if err != nil {
		t.Fatalf("the simulated engine's file: %v", err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i, l := range lines {
		var line struct {
			Next       int64                    `json:"next"`
			Containers map[string]*simContainer `json:"containers"`
			Put        *simContainer            `json:"put"`
			Del        string                   `json:"del"`
		}
		if err := json.Unmarshal(l, &line); err != nil {
			if i == len(lines)-1 {
				break // a line the engine was writing when it was killed
			}
			t.Fatalf("%s line %d: %v", path, i+1, err)
		}
		e.created = max(e.created, line.Next)
		for _, c := range line.Containers {
			live[c.ID] = true
			e.learn(*c)
		}
		if line.Put != nil {
			live[line.Put.ID] = true
			e.learn(*line.Put)
		}
		delete(live, line.Del)
	}
	return live
}

func (e *runtimeEffects) learn(c simContainer) {
	if old, ok := e.seen[c.ID]; ok {
		c.Runs = max(c.Runs, old.Runs)
	}
	e.seen[c.ID] = c
}

// check fails the test naming every container the runtime removed or started before cut
// whose cause the journal in dataDir does not hold.
func (e *runtimeEffects) check(t *testing.T, dataDir string, cut int) {
	t.Helper()
	live := e.read(t)
	acked, intents := journaledCauses(t, dataDir, cut)
	var violations []string
	e.removals, e.starts = 0, 0
	for _, c := range e.seen {
		if !live[c.ID] {
			e.removals++
			if !acked[c.Task] {
				violations = append(violations, fmt.Sprintf("the runtime removed container %s (%s of %s), but the journal holds no stopped_acked of %s", c.ID, c.Container, c.Task, c.Task))
			}
		}
		if c.Runs > 0 {
			e.starts++
			if !intents[c.Task+"\x00"+c.Container] {
				violations = append(violations, fmt.Sprintf("the runtime started container %s (%s of %s), but the journal holds no start intent (call_started) of it", c.ID, c.Container, c.Task))
			}
		}
	}
	e.unlearnt = e.created - int64(len(e.seen))
	if len(violations) > 0 {
		sort.Strings(violations)
		t.Fatalf("after power cut %d, an effect without its durable cause (%d):\n%s", cut, len(violations), strings.Join(violations, "\n"))
	}
}

// journaledCauses reads the journal a cut left (in a process of its own, read-only: this one
// serves the mount): the tasks with a stopped_acked, and the task\x00container pairs with a
// start intent.
func journaledCauses(t *testing.T, dataDir string, cut int) (acked, intents map[string]bool) {
	t.Helper()
	cmd := exec.Command(agentdBinary(t), "journal", "dump", "--json", "--type", "stopped_acked,call_started", "--data-dir", dataDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("after power cut %d, journal dump: %v\n%s", cut, err, stderr.Bytes())
	}
	acked, intents = map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Type      string `json:"type"`
			Task      string `json:"task_arn"`
			Container string `json:"container"`
			Call      string `json:"call"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("after power cut %d, journal dump --json: %v\n%s", cut, err, sc.Bytes())
		}
		switch {
		case r.Type == "stopped_acked":
			acked[r.Task] = true
		case r.Type == "call_started" && r.Call == "start":
			intents[r.Task+"\x00"+r.Container] = true
		}
	}
	return acked, intents
}
