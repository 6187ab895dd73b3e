package powerloss

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/lazyfs"
)

var (
	tasks   = flag.Int("powerloss-tasks", 120, "task lifecycles the workload journals (14 records each)")
	workers = flag.Int("powerloss-workers", runtime.NumCPU(), "crash states checked at once")
)

// suiteResult is what a run of the crash states found.
type suiteResult struct {
	ops      int
	barriers int
	states   map[lazyfs.StateKind]int // distinct states checked, by kind
	outcomes map[outcome]int
	dups     int
	failures []string // the first of them, each naming its state
	refusals []string // the first journals refused, with the error
	failed   int
	took     time.Duration
}

// crashSuite runs the workload on a lazy mount, then builds every crash state of its log and
// checks each distinct one.
func crashSuite(t *testing.T, seed uint64) suiteResult {
	t.Helper()
	if os.Getenv("AGENTD_POWERLOSS") != "1" {
		t.Skip("the crash-state suite: run with make test-powerloss")
	}
	if err := lazyfs.Available(); err != nil {
		t.Skipf("power-loss tests need FUSE: %v (make test-powerloss installs fuse3 and runs as root)", err)
	}
	start := time.Now()
	backing, mnt := t.TempDir(), t.TempDir()
	fsys, err := lazyfs.Mount(backing, mnt, lazyfs.Options{KeepLog: true})
	if err != nil {
		t.Fatal(err)
	}
	base := lazyfs.NewImage()
	r, err := runWorkloadChild(filepath.Join(mnt, "data"), workloadOptions{Seed: seed, Tasks: *tasks, SnapshotEvery: 150}, fsys)
	if cerr := fsys.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("the workload on the lazy mount: %v", err)
	}
	res := suiteResult{states: map[lazyfs.StateKind]int{}, outcomes: map[outcome]int{}}
	log := fsys.Tracker().Log()
	res.ops = len(log)
	for _, op := range log {
		if op.IsBarrier() {
			res.barriers++
		}
	}
	scratch, err := os.MkdirTemp(scratchParent(), "agentd-powerloss-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(scratch)

	type job struct {
		n     int
		state lazyfs.CrashState
	}
	jobs := make(chan job, 64)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(1, *workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range jobs {
				dir := filepath.Join(scratch, fmt.Sprint(jb.n))
				out, note, bad := materializeAndCheck(dir, jb.state, r)
				mu.Lock()
				if note != "" && len(res.refusals) < 3 {
					res.refusals = append(res.refusals, jb.state.What+": "+note)
				}
				res.outcomes[out]++
				res.states[jb.state.Kind]++
				if len(bad) > 0 {
					res.failed++
					if len(res.failures) < 10 {
						res.failures = append(res.failures, jb.state.What+":\n\t"+strings.Join(bad, "\n\t"))
					}
				}
				mu.Unlock()
			}
		}()
	}
	seen := map[uint64]bool{}
	n := 0
	err = lazyfs.CrashStates(base, log, lazyfs.StateOptions{}, func(s lazyfs.CrashState) error {
		// The same bytes at a later cut are another state: more had been acknowledged.
		h := s.Image.Hash() ^ uint64(r.ackedBy(s.Cut))*0x9E3779B97F4A7C15
		if seen[h] {
			res.dups++
			return nil
		}
		seen[h] = true
		s.Image = s.Image.Clone()
		n++
		jobs <- job{n, s}
		return nil
	})
	close(jobs)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	res.took = time.Since(start)
	return res
}

func materializeAndCheck(dir string, s lazyfs.CrashState, r *run) (outcome, string, []string) {
	defer os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return refused, "", []string{err.Error()}
	}
	if err := s.Image.Materialize(dir); err != nil {
		return refused, "", []string{err.Error()}
	}
	return checkState(filepath.Join(dir, "data"), r, s.Cut)
}

// scratchParent is where crash states are written to be checked: memory when there is some.
func scratchParent() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

func (res suiteResult) String() string {
	var b strings.Builder
	total := 0
	for _, k := range lazyfs.Kinds {
		total += res.states[k]
	}
	fmt.Fprintf(&b, "%d distinct crash states (%d duplicates skipped) from %d ops and %d barriers, in %v:", total, res.dups, res.ops, res.barriers, res.took.Round(time.Second))
	for _, k := range lazyfs.Kinds {
		fmt.Fprintf(&b, " %s %d,", k, res.states[k])
	}
	fmt.Fprintf(&b, " opened %d, refused by name %d, no journal yet %d; %d failed", res.outcomes[opened], res.outcomes[refused], res.outcomes[absent], res.failed)
	return b.String()
}

// TestEveryCrashStateOfAJournalRun is the crash-state suite: every state must keep every
// acknowledged record, verify, and hold a whole seal key and a saved shipping position.
func TestEveryCrashStateOfAJournalRun(t *testing.T) {
	if plantedSyncBug {
		t.Skip("built with syncbug: TestTheSuiteFindsTheMissingFsync runs instead")
	}
	res := crashSuite(t, 1)
	t.Log(res)
	for _, r := range res.refusals {
		t.Log("refused: " + r)
	}
	if res.failed > 0 {
		t.Fatalf("%d crash states broke a promise; the first:\n%s", res.failed, strings.Join(res.failures, "\n"))
	}
	// Refusing by name keeps a promise, but on a disk that honours flushes no state needs it:
	// bbolt's two-phase commit and the whole-or-nothing creation of the journal leave none.
	if res.outcomes[refused] > 0 {
		t.Fatalf("%d crash states left a journal agentd refuses to open; the first:\n%s", res.outcomes[refused], strings.Join(res.refusals, "\n"))
	}
}

// plantedSyncBug is set when the journal is built with its planted missing fsync (syncbug_test.go).
var plantedSyncBug bool

// TestMain doubles as the workload's process (runWorkloadChild).
func TestMain(m *testing.M) {
	if env := os.Getenv("AGENTD_POWERLOSS_WORKLOAD"); env != "" {
		var o workloadOptions
		if err := json.Unmarshal([]byte(env), &o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		in := bufio.NewReader(os.Stdin)
		err := runWorkload(context.Background(), o.Dir, o, func(a ack) error {
			b, _ := json.Marshal(a)
			if _, err := fmt.Printf("%s\n", b); err != nil {
				return err
			}
			_, err := in.ReadString('\n') // the mount has noted how far its log got
			return err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runWorkloadChild runs the workload in a child process on the mount, noting at each of its
// acknowledgements how far the mount's log had got.
func runWorkloadChild(dataDir string, o workloadOptions, fsys *lazyfs.FS) (*run, error) {
	o.Dir = dataDir
	env, _ := json.Marshal(o)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AGENTD_POWERLOSS_WORKLOAD="+string(env))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &run{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var a ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("the workload's report %q: %w", sc.Text(), err)
		}
		a.LogLen = fsys.LogLen()
		r.acks = append(r.acks, a)
		if _, err := in.Write([]byte("\n")); err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("the workload: %v: %s", err, stderr.String())
	}
	return r, nil
}
