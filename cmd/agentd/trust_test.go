package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/seal"
)

const plantedSecret = "planted-secret-c0ffee-9d1e"

// goldenSecret is the env value planted in testdata/journals/pre-seal.db, a journal written by
// agentd before sealing existed (two payloads, a task with env, a rejected task with env, two
// snapshots), made with `agentd run --runtime sim` at commit 86c16e0.
const goldenSecret = "golden-planted-secret-7f3a"

type trustRig struct {
	t     *testing.T
	cp    *httptest.Server
	agent *agent
	api   string
	log   *bytes.Buffer
	dir   string
	stop  func()
}

func startTrustRig(t *testing.T, dir string, cfg agentConfig) *trustRig {
	t.Helper()
	cp := httptest.NewServer(controlplane.New("", controlplane.Faults{}).Handler())
	t.Cleanup(cp.Close)
	r := &trustRig{t: t, cp: cp, log: &bytes.Buffer{}, dir: dir}
	cfg.DataDir, cfg.Backend = dir, cp.URL
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Runtime == "" {
		cfg.Runtime = "sim"
	}
	if cfg.AgentID == "" {
		cfg.AgentID = "agent-trust"
	}
	cfg.CleanupWait = time.Hour
	// The golden journal's times are fixed in the past: however old it grows, its tasks'
	// tombstones must stay to be looked at.
	cfg.Engine.Retention = -1
	cfg.Engine.PollWait = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	a, err := startAgent(ctx, cfg, zerolog.New(r.log))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r.agent, r.api = a, "http://"+strings.Replace(a.listen, "[::]", "127.0.0.1", 1)
	var once bool
	r.stop = func() {
		if !once {
			once = true
			cancel()
			_ = a.wait(ctx)
		}
	}
	t.Cleanup(r.stop)
	return r
}

func (r *trustRig) assign(arn string, containers ...map[string]any) {
	r.t.Helper()
	postJSON(r.t, r.cp.URL+"/v1/tasks", map[string]any{"agent": r.agent.eng.AgentID(), "task": map[string]any{"arn": arn, "desired_status": "RUNNING", "containers": containers}})
}

// awaitKnown waits until the agent shows the task with the status.
func (r *trustRig) awaitKnown(arn string, statuses ...string) {
	r.t.Helper()
	status := strings.Join(statuses, " or ")
	deadline := time.Now().Add(20 * time.Second)
	for {
		var v struct {
			KnownStatus string `json:"known_status"`
		}
		if getJSON(r.t, r.api+"/v1/tasks/"+arn, &v) == 200 && slices.Contains(statuses, v.KnownStatus) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("task %s not %s within 20s (is %q)", arn, status, v.KnownStatus)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := ownClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNoSecretInTheClear: an env value planted in a valid task and in an invalid one is found
// nowhere in the clear — not in the journal file, a snapshot, an export, any introspection
// answer or the log — while it is kept, sealed, and opens with the agent's key.
func TestNoSecretInTheClear(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := startTrustRig(t, dir, agentConfig{Engine: engine.Config{SnapshotEvery: 3}})
	r.assign("task/s1", map[string]any{"name": "app", "image": "web:1", "command": []string{"run"},
		"env": map[string]string{"DB_PASSWORD": plantedSecret, "PORT": "8080"}})
	r.assign("task/s2", map[string]any{"name": "bad name!", "image": "web:1", "env": map[string]string{"API_KEY": plantedSecret}})
	r.awaitKnown("task/s1", "RUNNING")
	r.awaitKnown("task/s2", "STOPPED_ACKED")
	j := r.agent.j
	// A snapshot is taken after the task ran (every 3 records).
	deadline := time.Now().Add(10 * time.Second)
	var snap *journal.Snapshot
	for {
		s, _, err := j.SnapshotAtOrBefore(math.MaxUint64)
		if err != nil {
			t.Fatal(err)
		}
		if s != nil && s.AtSeq > 6 {
			snap = s
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot after the tasks ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !bytes.Contains(snap.Data, []byte("DB_PASSWORD")) {
		t.Fatal("the snapshot does not hold the task's env names: the test would prove nothing")
	}
	answers := map[string][]byte{"snapshot": snap.Data}
	for _, p := range []string{"/healthz", "/v1/metadata", "/v1/tasks", "/v1/tasks/task/s1", "/v1/tasks/task/s2", "/v1/journal/records?from=1", "/metrics", "/v1/journal/export"} {
		answers[p] = get(t, r.api+p)
	}
	if !bytes.Contains(answers["/v1/journal/records?from=1"], []byte(`DB_PASSWORD`)) {
		t.Fatal("the records answer lacks the env names")
	}
	file, err := os.ReadFile(filepath.Join(dir, journal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	answers["journal file"] = file
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != seal.KeyFileName && e.Type().IsRegular() {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			answers["data dir file "+e.Name()] = b
		}
	}
	answers["log"] = r.log.Bytes()
	for what, b := range answers {
		if bytes.Contains(b, []byte(plantedSecret)) {
			t.Errorf("%s holds the planted secret in the clear", what)
		}
	}
	// Kept sealed, not dropped: the task_added value opens with the key, under its name.
	key, err := seal.LoadKey(filepath.Join(dir, seal.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	err = j.Iterate(1, func(rec event.Record) error {
		if ta, ok := rec.Event.(*event.TaskAdded); ok {
			v := ta.Containers[0].Env["DB_PASSWORD"]
			clear, err := key.Open("DB_PASSWORD", v)
			if err != nil || clear != plantedSecret || !seal.IsSealed(v) {
				t.Errorf("task_added env DB_PASSWORD = %.30q: opens to %q, %v", v, clear, err)
			}
			found = true
		}
		return nil
	})
	if err != nil || !found {
		t.Fatalf("no task_added record (%v)", err)
	}
}

// TestPreSealJournalOpensAndIsSealed: a journal written before sealing existed opens; its
// tasks are all there; the values it held in the clear are sealed (records and snapshots) and
// scrubbed from the file; and they still open with the new key.
func TestPreSealJournalOpensAndIsSealed(t *testing.T) {
	golden, err := os.ReadFile("../../testdata/journals/pre-seal.db")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(golden, []byte(goldenSecret)) {
		t.Fatal("the golden journal lost its planted secret: the test would prove nothing")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, journal.FileName)
	if err := os.WriteFile(path, golden, 0o600); err != nil {
		t.Fatal(err)
	}
	r := startTrustRig(t, dir, agentConfig{AgentID: "agent-golden"})
	// Its simulated container was not kept: it is found vanished, reported and settled — and,
	// since the cleanup wait counts from the journal's stop times, which grow older every day,
	// perhaps cleaned already.
	r.awaitKnown("task/golden-1", "STOPPED_ACKED", "CLEANING", "CLEANED")
	r.awaitKnown("task/golden-2", "STOPPED_ACKED", "CLEANING", "CLEANED")
	file, _ := os.ReadFile(path)
	if bytes.Contains(file, []byte(goldenSecret)) {
		t.Fatal("the migrated journal file still holds the secret in the clear")
	}
	if export := get(t, r.api+"/v1/journal/export"); bytes.Contains(export, []byte(goldenSecret)) || len(export) == 0 {
		t.Fatal("the export of the migrated journal holds the secret in the clear (or is empty)")
	}
	key, err := seal.LoadKey(filepath.Join(dir, seal.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	j := r.agent.j
	if id, _ := j.Meta(seal.MetaKeyID); id != key.ID() {
		t.Fatalf("journal records key %q, key file holds %q", id, key.ID())
	}
	seqs, _ := j.SnapshotSeqs()
	if len(seqs) == 0 {
		t.Fatal("the golden journal's snapshots are gone")
	}
	s, _, err := j.SnapshotAtOrBefore(math.MaxUint64)
	if err != nil || s == nil || !bytes.Contains(s.Data, []byte(`"DB_PASSWORD":"agentd-sealed:v1:`)) {
		t.Fatalf("snapshot not sealed: %v", err)
	}
	opened := 0
	err = j.Iterate(1, func(rec event.Record) error {
		rec = key.OpenRecord(rec)
		b, _ := json.Marshal(rec.Event)
		if bytes.Contains(b, []byte(goldenSecret)) {
			opened++
		}
		return nil
	})
	if err != nil || opened != 3 { // two payload_received, one task_added
		t.Fatalf("%d records open to the secret with the key (want 3): %v", opened, err)
	}
}

// TestLostSealKeyIsNamed: a journal whose values are sealed under a key that is gone refuses to
// start with an error naming the key file and the way out; --new-seal-key accepts a new key.
func TestLostSealKeyIsNamed(t *testing.T) {
	dir := t.TempDir()
	r := startTrustRig(t, dir, agentConfig{})
	r.assign("task/k1", map[string]any{"name": "app", "image": "web:1", "env": map[string]string{"PW": plantedSecret}})
	r.awaitKnown("task/k1", "RUNNING")
	r.stop()
	keyPath := filepath.Join(dir, seal.KeyFileName)
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	cfg := agentConfig{DataDir: dir, Backend: r.cp.URL, Runtime: "sim", Listen: "127.0.0.1:0", AgentID: "agent-trust"}
	_, err := startAgent(context.Background(), cfg, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), keyPath) || !strings.Contains(err.Error(), "--new-seal-key") {
		t.Fatalf("start without the key: %v; want an error naming %s and --new-seal-key", err, keyPath)
	}
	r2 := startTrustRig(t, dir, agentConfig{Trust: trustFlags{NewSealKey: true}})
	r2.awaitKnown("task/k1", "RUNNING") // nothing else is lost
}

// TestStartRefusesAnUnsafeDataDir: a world-writable data dir and a symlinked pid file are each
// refused at start with an error naming them; the symlink's target is untouched.
func TestStartRefusesAnUnsafeDataDir(t *testing.T) {
	cfg := agentConfig{Backend: "http://127.0.0.1:1", Runtime: "sim", Listen: "127.0.0.1:0", AgentID: "a"}
	cfg.DataDir = filepath.Join(t.TempDir(), "open")
	os.Mkdir(cfg.DataDir, 0o700)
	os.Chmod(cfg.DataDir, 0o777)
	if _, err := startAgent(context.Background(), cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("world-writable data dir: %v", err)
	}
	cfg.DataDir = t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious"), 0o600)
	os.Symlink(victim, filepath.Join(cfg.DataDir, journal.FileName+".pid"))
	if _, err := startAgent(context.Background(), cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlinked pid file: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatal("the victim was overwritten")
	}
	cfg.DataDir = t.TempDir()
	cfg.Listen = "0.0.0.0:0"
	if _, err := startAgent(context.Background(), cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "--api-token-file") {
		t.Fatalf("non-loopback --listen without a token: %v", err)
	}
}

// TestDumpShowsValuesSealedUnlessUnsealed: forensics shows env values sealed; --unseal on the
// agent's host opens them with its key; through --live it is refused.
func TestDumpShowsValuesSealedUnlessUnsealed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := startTrustRig(t, dir, agentConfig{})
	r.assign("task/d1", map[string]any{"name": "app", "image": "web:1", "env": map[string]string{"PW": plantedSecret}})
	r.awaitKnown("task/d1", "RUNNING")
	r.stop()
	bin := agentdBinary(t)
	for _, format := range [][]string{nil, {"--json"}} {
		args := append([]string{"journal", "dump", "--data-dir", dir}, format...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "task_added") || bytes.Contains(out, []byte(plantedSecret)) {
			t.Fatalf("dump %v: %v: want records without the secret\n%s", format, err, out)
		}
	}
	out, err := exec.Command(bin, "journal", "dump", "--data-dir", dir, "--json", "--unseal").CombinedOutput()
	if err != nil || bytes.Count(out, []byte(plantedSecret)) != 2 { // payload_received and task_added
		t.Fatalf("dump --unseal: %v: want the secret twice\n%s", err, out)
	}
	out, err = exec.Command(bin, "journal", "dump", "--live", "http://127.0.0.1:1", "--unseal").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "never leaves") {
		t.Fatalf("dump --live --unseal: %v\n%s", err, out)
	}
}

// TestTokenGuardedAPI: an agent listening on every interface with --api-token-file answers
// 401 to every request without the token, and the forensics tools read it with the token.
func TestTokenGuardedAPI(t *testing.T) {
	t.Parallel()
	tok := filepath.Join(t.TempDir(), "api-token")
	os.WriteFile(tok, []byte("api-secret\n"), 0o600)
	r := startTrustRig(t, t.TempDir(), agentConfig{Listen: "0.0.0.0:0", Trust: trustFlags{APITokenFile: tok}})
	if strings.Contains(r.api, "0.0.0.0") {
		r.api = strings.Replace(r.api, "0.0.0.0", "127.0.0.1", 1)
	}
	for _, p := range []string{"/healthz", "/v1/metadata", "/v1/tasks", "/v1/journal/records?from=1", "/v1/journal/export", "/metrics"} {
		resp, err := ownClient.Get(r.api + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: HTTP %d, want 401", p, resp.StatusCode)
		}
	}
	bin := agentdBinary(t)
	out := filepath.Join(t.TempDir(), "copy.db")
	if b, err := exec.Command(bin, "journal", "export", "--live", r.api, "--out", out).CombinedOutput(); err == nil || !strings.Contains(string(b), "401") {
		t.Fatalf("export without the token: %v\n%s", err, b)
	}
	if b, err := exec.Command(bin, "journal", "export", "--live", r.api, "--api-token-file", tok, "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("export with the token: %v\n%s", err, b)
	}
}

// TestValueUnderALostKeyStopsOnlyItsTask: a task whose env was sealed under a key that is gone
// (the agent restarted with --new-seal-key) is stopped with a reason naming its container and
// the key file; a task of the same journal without such a value runs as usual.
func TestValueUnderALostKeyStopsOnlyItsTask(t *testing.T) {
	dir := t.TempDir()
	r := startTrustRig(t, dir, agentConfig{})
	r.stop()
	keyPath := filepath.Join(dir, seal.KeyFileName)
	old, err := seal.LoadKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	// Assigned while the old key was in force, not yet created when it was lost.
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sealed, _ := old.Seal("PW", plantedSecret)
	now := time.Now()
	_, err = j.Append(context.Background(),
		event.Record{Time: now, Event: &event.PayloadReceived{MessageID: "m-lost"}},
		event.Record{Time: now, Task: "task/lost", Event: &event.TaskAdded{MessageID: "m-lost", Desired: event.StatusRunning,
			Containers: []event.ContainerSpec{{Name: "app", Image: "web:1", Command: []string{"run"}, Env: map[string]string{"PW": sealed}, Essential: true}}}},
		event.Record{Time: now, Task: "task/fine", Event: &event.TaskAdded{MessageID: "m-lost", Desired: event.StatusRunning,
			Containers: []event.ContainerSpec{{Name: "app", Image: "web:1", Command: []string{"run"}, Essential: true}}}})
	j.Close()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(keyPath)
	r2 := startTrustRig(t, dir, agentConfig{Trust: trustFlags{NewSealKey: true}})
	r2.awaitKnown("task/fine", "RUNNING")
	r2.awaitKnown("task/lost", "STOPPED_ACKED")
	var v struct {
		Containers []struct{ Reason string }
	}
	getJSON(t, r2.api+"/v1/tasks/task/lost", &v)
	if len(v.Containers) != 1 || !strings.Contains(v.Containers[0].Reason, "container app") || !strings.Contains(v.Containers[0].Reason, keyPath) || strings.Contains(v.Containers[0].Reason, plantedSecret) {
		t.Fatalf("stopped task's container: %+v; want a reason naming the container and %s", v, keyPath)
	}
}

// TestMigrationLeavesNoClearByte: right after the migration of a pre-seal journal, before the
// agent writes anything that might reuse free pages, the file holds no clear value: the
// replaced bytes are not left in bbolt's free pages.
func TestMigrationLeavesNoClearByte(t *testing.T) {
	golden, err := os.ReadFile("../../testdata/journals/pre-seal.db")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, journal.FileName)
	os.WriteFile(path, golden, 0o600)
	j, key, err := openSealedJournal(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(goldenSecret)) {
		t.Fatal("clear bytes left in the migrated file")
	}
	// Idempotent: a second start changes nothing and needs no new key.
	j, key2, err := openSealedJournal(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if key2.ID() != key.ID() {
		t.Fatalf("second start uses key %s, first %s", key2.ID(), key.ID())
	}
}

// A --api-socket in a directory others may write is refused at start, naming the flag: there
// anyone could take the socket's name first and keep the trusted socket down for good.
func TestAPISocketDirectoryOthersCanWriteIsRefused(t *testing.T) {
	for _, c := range []struct {
		mode   os.FileMode
		refuse bool
	}{{0o700, false}, {0o755, false}, {0o777, true}, {0o1777, true}, {0o770, true}} {
		dir := filepath.Join(t.TempDir(), "run")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		err := checkAPISocketDir(filepath.Join(dir, "api.sock"))
		if c.refuse != (err != nil) || (err != nil && !strings.Contains(err.Error(), "--api-socket "+dir)) {
			t.Errorf("directory mode %04o: %v; want refused %v, naming the flag and the path", c.mode, err, c.refuse)
		}
	}
}
