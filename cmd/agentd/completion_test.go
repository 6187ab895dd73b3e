package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// completeWith runs the built binary as a shell's completion request for line.
func completeWith(t *testing.T, line string) []string {
	t.Helper()
	cmd := exec.Command(agentdBinary(t))
	cmd.Env = append(os.Environ(), "COMP_LINE="+line, "COMP_POINT="+strconv.Itoa(len(line)), "AGENTD_DATA_DIR=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("completion of %q: %v", line, err)
	}
	return strings.Fields(string(out))
}

// TestShellCompletion: commands and flags complete from kong's model, and --task completes
// with the task ARNs of the journal the command line names (live tasks and tombstones alike,
// here a rejected task too); a journal that is not there offers nothing and fails nothing.
func TestShellCompletion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spec := []event.ContainerSpec{{Name: "app", Image: "web", Essential: true}}
	if _, err := j.Append(context.Background(),
		event.Record{Time: now, Task: "task/alpha", Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}},
		event.Record{Time: now, Task: "task/beta", Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}},
		event.Record{Time: now, Task: "web/gamma", Event: &event.TaskRejected{Reason: "containers: none"}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string][]string{
		"agentd journal ti":                                              {"timeline"},
		"agentd journal timeline --fi":                                   {"--file"},
		"agentd journal timeline --file " + path + " --task ":            {"task/alpha", "task/beta", "web/gamma"},
		"agentd journal timeline --file " + path + " --task task/a":      {"task/alpha"},
		"agentd journal dump --data-dir " + dir + " --task t":            {"task/alpha", "task/beta"},
		"agentd journal replay --data-dir=" + dir + " --task w":          {"web/gamma"},
		"agentd journal timeline --data-dir " + t.TempDir() + " --task ": nil,
		"agentd ver": {"version"},
	} {
		got := completeWith(t, line)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("completing %q: %q; want %q", line, got, want)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, err := exec.Command(agentdBinary(t), "completion", shell).Output()
		if err != nil {
			t.Fatalf("agentd completion %s: %v", shell, err)
		}
		if !strings.Contains(string(out), agentdBinary(t)) || !strings.Contains(string(out), "complete ") {
			t.Errorf("agentd completion %s: %s", shell, out)
		}
	}
	if out, err := exec.Command(agentdBinary(t), "completion", "tcsh").CombinedOutput(); err == nil || !strings.Contains(string(out), "tcsh") {
		t.Errorf("agentd completion tcsh: %v %s; want an error naming it", err, out)
	}
}

// TestInstallUnit writes the shipped unit, refuses to overwrite it without --force, and
// points ExecStart at --binary.
func TestInstallUnit(t *testing.T) {
	dir := t.TempDir()
	if err := (&installUnitCmd{Dir: dir}).install(io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "agentd.service"))
	if err != nil || !strings.Contains(string(b), "Type=notify") {
		t.Fatalf("installed unit: %v\n%s", err, b)
	}
	if err := (&installUnitCmd{Dir: dir}).install(io.Discard); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second install without --force: %v", err)
	}
	if err := (&installUnitCmd{Dir: dir, Force: true, Binary: "/opt/agentd/bin/agentd"}).install(io.Discard); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "agentd.service"))
	if !strings.Contains(string(b), "ExecStart=/opt/agentd/bin/agentd run") {
		t.Errorf("--binary not applied:\n%s", b)
	}
	if err := (&installUnitCmd{Dir: dir, Force: true, Binary: "agentd"}).install(io.Discard); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative --binary: %v", err)
	}
	if err := (&installUnitCmd{Dir: filepath.Join(dir, "missing")}).install(io.Discard); err == nil || !strings.Contains(err.Error(), "--dir") {
		t.Errorf("missing --dir: %v", err)
	}
}
