package main

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/model"
	"github.com/agentd/agentd/internal/simruntime"
)

// previousRelease is the release an upgrade starts from: the last commit that wrote journal
// schema 1 (e341f98 "journal: drop the on-disk per-task index (schema 2)" came next). Move it
// forward when a release changes what an upgrade must carry (a schema, the runtime's file).
const previousRelease = "86c16e063a5017a5f10bf0a97c67a3b51dd482f4"

// buildRelease builds agentd as it was at a commit (git archive into a temporary directory, so
// the repository's worktrees are not touched), or skips saying why it cannot.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run() != nil {
		t.Skipf("upgrade test: commit %s is not in this clone (shallow?): git fetch --unshallow", commit)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	bin := filepath.Join(t.TempDir(), "agentd-"+commit[:7])
	build := exec.Command("go", "build", "-o", bin, "./cmd/agentd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agentd at %s: %v\n%s", commit, err, out)
	}
	return bin
}

// journalLayout is what an upgrade may change in the file, read with bbolt directly: the
// schema, whether schema 1's index buckets are there, the journal's id, its inode (a rewrite
// makes a new one), and a digest of every record by sequence number.
type journalLayout struct {
	schema  uint32
	index   bool
	id      string
	inode   uint64
	records map[uint64][32]byte
}

func (l journalLayout) String() string {
	return fmt.Sprintf("schema %d, index %v, journal id %q, inode %d, %d records", l.schema, l.index, l.id, l.inode, len(l.records))
}

func readLayout(t *testing.T, path string) journalLayout {
	t.Helper()
	var l journalLayout
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	l.inode = fi.Sys().(*syscall.Stat_t).Ino
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if v := meta.Get([]byte("schema")); len(v) == 4 {
			l.schema = binary.BigEndian.Uint32(v)
		}
		l.id = string(meta.Get([]byte("journal_id")))
		l.index = tx.Bucket([]byte("tasks")) != nil || tx.Bucket([]byte("by-task")) != nil
		l.records = map[uint64][32]byte{}
		return tx.Bucket([]byte("records")).ForEach(func(k, v []byte) error {
			l.records[binary.BigEndian.Uint64(k)] = sha256.Sum256(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stopProc sends SIGTERM, as systemctl restart does for a package upgrade, and waits.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent exited with %v after SIGTERM:\n%s", err, p.log())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("agent did not exit within 60 s of SIGTERM")
	}
}

// awaitStatus waits until the control plane holds each task in the status.
func awaitStatus(t *testing.T, cpURL string, want map[string]string, within time.Duration, diag func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for arn, status := range want {
		for {
			var one cpTask
			getJSON(t, cpURL+"/v1/tasks/"+arn, &one)
			if one.Status == status {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is %q at the control plane; want %s\n%s", arn, one.Status, status, diag())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestUpgradeKeepsEveryTask runs tasks under the previous release (built from its commit),
// replaces the binary with this one while they run (SIGTERM, then the new binary on the same
// data directory, as a package upgrade does), and shows: every running task is adopted (it
// ends STOPPED with the exit code its container gave, without being created again), nothing
// runs twice (one creation per container in the journal, and the runtime made no more), the
// journal is upgraded in place from schema 1 to 2 once (the same file and journal id, the
// index gone, every record the old release wrote as it wrote it, verify clean; a second start
// changes nothing), and the old binary, started again, refuses the upgraded journal naming
// both schema versions and leaves it as it is.
func TestUpgradeKeepsEveryTask(t *testing.T) {
	if os.Getenv("AGENTD_UPGRADE_TEST") == "" {
		t.Skip("upgrade test: set AGENTD_UPGRADE_TEST=1 (make test-upgrade; it builds the previous release)")
	}
	old := buildRelease(t, previousRelease)
	data := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(data, journal.FileName)
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	args := []string{"run", "--runtime", "sim", "--data-dir", data, "--backend", cpURL, "--listen", "127.0.0.1:0",
		"--cleanup-wait", "1s", "--log-format", "json", "--agent-id", "agent-upgrade"}

	before := startBinary(t, old, args...)
	before.await(t, "agent running", 60*time.Second)
	tasks := map[string][]any{
		"task/u-run1":  {"run"},
		"task/u-run2":  {"run"},
		"task/u-exit":  {"exit", "3"},
		"task/u-sleep": {"sleep", "4s", "5"}, // exits while the new binary runs
	}
	for arn, cmd := range tasks {
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": "agent-upgrade", "task": map[string]any{"arn": arn,
			"containers": []map[string]any{{"name": "app", "image": "app:1", "command": cmd}}}})
	}
	awaitStatus(t, cpURL, map[string]string{"task/u-run1": "RUNNING", "task/u-run2": "RUNNING", "task/u-sleep": "RUNNING", "task/u-exit": "STOPPED"}, 60*time.Second, before.log)
	stopProc(t, before)
	was := readLayout(t, path)
	if was.schema != 1 || !was.index {
		t.Fatalf("the previous release wrote schema %d (index %v); this test upgrades from schema 1", was.schema, was.index)
	}

	after := startProc(t, args...)
	api := "http://" + after.await(t, "agent running", 60*time.Second)["listen"].(string)
	postJSON(t, cpURL+"/v1/tasks/task/u-run1/stop", nil)
	postJSON(t, cpURL+"/v1/tasks/task/u-run2/stop", nil)
	awaitSettled(t, cpURL, api, len(tasks), 120*time.Second, after.log)
	noViolations(t, cpURL)
	stopProc(t, after)
	now := readLayout(t, path)
	if now.schema != journal.SchemaVersion || now.index || now.id != was.id {
		t.Errorf("after the upgrade: %v; want schema %d without the index, the journal id %q", now, journal.SchemaVersion, was.id)
	}
	for seq, sum := range was.records {
		if now.records[seq] != sum {
			t.Errorf("record %d of the previous release is not as it wrote it after the upgrade", seq)
		}
	}
	// Once: a second start of this release neither upgrades nor rewrites the file again.
	again := startProc(t, args...)
	again.await(t, "agent running", 60*time.Second)
	stopProc(t, again)
	if l := readLayout(t, path); l.schema != now.schema || l.inode != now.inode || l.id != now.id {
		t.Errorf("a second start of this release changed the journal's layout: %v, was %v", l, now)
	}
	now = readLayout(t, path)
	var view struct{ Tasks []cpTask }
	getJSON(t, cpURL+"/v1/tasks", &view)
	codes := map[string]int{"task/u-run1": 143, "task/u-run2": 143, "task/u-exit": 3, "task/u-sleep": 5}
	for _, v := range view.Tasks {
		if c := v.Containers["app"]; c.Status != "STOPPED" || c.ExitCode == nil || *c.ExitCode != codes[v.ARN] {
			t.Errorf("%s: %+v; want STOPPED with exit code %d", v.ARN, c, codes[v.ARN])
		}
	}
	onceEachInJournal(t, data, len(tasks))

	// A downgrade: the previous release refuses the journal, naming both schemas, and leaves it.
	out, err := exec.Command(old, args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "written by schema 2") || !strings.Contains(string(out), "understands up to 1") {
		t.Errorf("the previous release on the upgraded journal: %v\n%s\nwant a refusal naming schema 2 and schema 1", err, tail(string(out), 10))
	}
	if l := readLayout(t, path); l.String() != now.String() || !sameRecords(l, now) {
		t.Errorf("the refused downgrade changed the journal: %v, was %v", l, now)
	}
}

func sameRecords(a, b journalLayout) bool {
	if len(a.records) != len(b.records) {
		return false
	}
	for seq, sum := range a.records {
		if b.records[seq] != sum {
			return false
		}
	}
	return true
}

// onceEachInJournal: the journal holds one creation per container, verify finds nothing
// wrong, and the simulated runtime (which numbers every container it ever made) made no more.
func onceEachInJournal(t *testing.T, data string, want int) {
	t.Helper()
	created := journalCreations(t, data)
	for k, n := range created {
		if n != 1 {
			t.Errorf("%s created %d times", k, n)
		}
	}
	made, left, err := simruntime.Stats(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != want || made != int64(want) || left != 0 {
		t.Errorf("%d containers created in the journal, %d by the runtime (%d left); want %d, none left", len(created), made, left, want)
	}
}

// journalCreations verifies the journal in data (every checksum and invariant) and counts its
// creations by task/container: what "nothing ran twice" is read from.
func journalCreations(t *testing.T, data string) map[string]int {
	t.Helper()
	j, err := journal.Open(filepath.Join(data, journal.FileName), journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if rep, err := forensics.Verify(j); err != nil || len(rep.Findings) > 0 {
		t.Fatalf("journal verify: %v %v", rep.Findings, err)
	}
	if err := model.Check(j); err != nil {
		t.Fatal(err)
	}
	created := map[string]int{}
	err = j.Iterate(1, func(r event.Record) error {
		if ev, ok := r.Event.(*event.ContainerTransitioned); ok && ev.To == event.StatusCreated {
			created[r.Task+"/"+r.Container]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// TestGoldenJournalsOfEverySchema: testdata/journals holds a journal of every schema this build
// reads (a new schema without one fails here), and each opens, is brought to this schema by a
// writable open, and verifies clean.
func TestGoldenJournalsOfEverySchema(t *testing.T) {
	goldens, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "journals", "*.db"))
	seen := map[uint32][]string{}
	for _, g := range goldens {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), journal.FileName)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		l := readLayout(t, path)
		seen[l.schema] = append(seen[l.schema], filepath.Base(g))
		j, err := journal.Open(path, journal.Options{})
		if err != nil {
			t.Errorf("%s (schema %d): %v", g, l.schema, err)
			continue
		}
		if rep, err := forensics.Verify(j); err != nil || len(rep.Findings) > 0 {
			t.Errorf("%s (schema %d): verify: %v %v", g, l.schema, rep.Findings, err)
		}
		j.Close()
		if got := readLayout(t, path); got.schema != journal.SchemaVersion || got.index || got.id != l.id {
			t.Errorf("%s: after a writable open %v; want schema %d, no index, journal id %q", g, got, journal.SchemaVersion, l.id)
		}
	}
	for s := uint32(1); s <= journal.SchemaVersion; s++ {
		if len(seen[s]) == 0 {
			t.Errorf("no golden journal of schema %d in testdata/journals (have %v)", s, seen)
		}
	}
}
