package journal_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

const pageSize = 4096

// flipPatterns are XORed into each byte of every page header. make test uses one; set
// AGENTD_DAMAGE_ALL=1 for the low bit too (counts and overflows off by one).
var flipPatterns = func() []byte {
	if os.Getenv("AGENTD_DAMAGE_ALL") != "" {
		return []byte{0xff, 0x01, 0x80}
	}
	return []byte{0xff}
}()

// realJournals are the journals the sweeps damage: two the agent itself wrote (testdata) and
// one written here with snapshots big enough for overflow pages and a compaction cut.
func realJournals(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range []string{"dev.db", "crash.db"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "journals", name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	path := filepath.Join(fastTempDir(t), journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 300; i += 3 {
		var recs []event.Record
		for k := i; k < i+3; k++ {
			recs = append(recs, transition(fmt.Sprintf("task/%d", k%40), "app", event.StatusNone, event.StatusPulled, k))
		}
		if _, err := j.Append(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	big := []byte(strings.Repeat("snapshot state ", 2700)) // 40 KB: chunks spanning overflow pages
	if _, err := j.SaveSnapshot(ctx, j.LastSeq(), big, event.Record{Time: t0, Event: &event.SnapshotTaken{AtSeq: j.LastSeq()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Compact(ctx, 100, func(h journal.Header) bool { return h.Task == "task/1" }); err != nil {
		t.Fatal(err)
	}
	if err := j.SetMeta(ctx, "agent_id", "agent-sweep"); err != nil {
		t.Fatal(err)
	}
	// The daemon's file grows in 16 MB steps of unused pages; its consistent copy (what export
	// writes) holds just the pages in use, which is what is worth damaging.
	var copyBuf bytes.Buffer
	if _, err := j.CopyTo(&copyBuf); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	out["written"] = copyBuf.Bytes()
	return out
}

// damageCase is one damaged copy of a journal.
type damageCase struct {
	name  string
	bytes []byte
	// truncated cases must be refused; a flip may land where nothing reads it.
	mustRefuse bool
}

// damageCases flips bytes of every page header (each of the 16 bytes, two patterns) and cuts
// the file at every 4 KB boundary and just past it, and empties it.
func damageCases(t *testing.T) []damageCase {
	var cases []damageCase
	for name, b := range realJournals(t) {
		if len(b)%pageSize != 0 {
			t.Fatalf("%s: %d bytes is not whole pages", name, len(b))
		}
		for page := 0; page < len(b)/pageSize; page++ {
			for off := 0; off < 16; off++ {
				for _, x := range flipPatterns {
					c := append([]byte(nil), b...)
					c[page*pageSize+off] ^= x
					cases = append(cases, damageCase{name: fmt.Sprintf("%s page %d header byte %d ^%#x", name, page, off, x), bytes: c})
				}
			}
		}
		for cut := 0; cut < len(b); cut += pageSize {
			cases = append(cases, damageCase{name: fmt.Sprintf("%s cut to %d bytes", name, cut), bytes: b[:cut], mustRefuse: true})
			if cut > 0 {
				cases = append(cases, damageCase{name: fmt.Sprintf("%s cut to %d bytes", name, cut+100), bytes: b[:cut+100], mustRefuse: true})
			}
		}
	}
	return cases
}

// Every damaged copy of a real journal either opens (the damage lies where nothing reads it)
// and then verifies, reads and appends without a crash, or is refused with an error naming the
// file; a truncated or empty file is always refused, never started afresh. The opens run in a
// child process, so a panic in a bbolt goroutine or a SIGBUS (what this did before the file
// was checked ahead of bbolt) fails the test naming the case instead of killing it.
func TestDamagedJournalIsNamedNeverACrash(t *testing.T) {
	if os.Getenv("AGENTD_DAMAGE_CHILD") != "" {
		t.Skip("the child runs the cases")
	}
	dir := fastTempDir(t)
	start := time.Now()
	cases := damageCases(t)
	t.Logf("cases made in %v", time.Since(start))
	var list strings.Builder
	for i, c := range cases {
		p := filepath.Join(dir, strconv.Itoa(i)+".db")
		if err := os.WriteFile(p, c.bytes, 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&list, "%s\n", p)
	}
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	damageCaseNames = names
	// Two children, each with half the cases: the sweep is bound by one core per child.
	results := map[int]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	lines := strings.Split(strings.TrimSpace(list.String()), "\n")
	for half := 0; half < 2; half++ {
		var mine strings.Builder
		for i := half; i < len(lines); i += 2 {
			fmt.Fprintf(&mine, "%d %s\n", i, lines[i])
		}
		listFile := filepath.Join(dir, fmt.Sprintf("cases-%d", half))
		if err := os.WriteFile(listFile, []byte(mine.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := runDamageChild(listFile)
			mu.Lock()
			defer mu.Unlock()
			for i, r := range got {
				results[i] = r
			}
			if err != nil {
				t.Errorf("the child died at %s", err)
			}
		}()
	}
	wg.Wait()
	t.Logf("children done at %v", time.Since(start))
	if t.Failed() {
		t.FailNow()
	}
	refused := 0
	for i, c := range cases {
		r, ok := results[i]
		if !ok {
			t.Fatalf("%s: no result", c.name)
		}
		switch {
		case strings.HasPrefix(r, "refused "):
			refused++
			msg := strings.TrimPrefix(r, "refused ")
			if !strings.Contains(msg, filepath.Join(dir, strconv.Itoa(i)+".db")) || strings.Contains(msg, "goroutine ") {
				t.Errorf("%s: the error does not name the file: %s", c.name, msg)
			}
			if c.mustRefuse && !strings.Contains(msg, "damaged journal file") {
				t.Errorf("%s: refused, but not as damage: %s", c.name, msg)
			}
		case r == "opened":
			if c.mustRefuse {
				t.Errorf("%s: opened a truncated file", c.name)
			}
		default:
			t.Errorf("%s: %s", c.name, r)
		}
		if c.mustRefuse {
			if b, _ := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".db")); len(b) != len(c.bytes) {
				t.Errorf("%s: the refused file changed size to %d", c.name, len(b))
			}
		}
	}
	t.Logf("%d damaged copies: %d refused with an error naming the damage, %d opened and read without a crash", len(cases), refused, len(cases)-refused)
}

var damageCaseNames []string

// runDamageChild runs the child over one list of "index path" lines and returns its results by
// case index; an error names the case it died at and its output.
func runDamageChild(listFile string) (map[int]string, error) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDamageChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTD_DAMAGE_CHILD="+listFile)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	results := map[int]string{}
	started := -1
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 3)
		if len(f) < 2 {
			continue
		}
		i, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "case":
			started = i
		case "result":
			if len(f) == 3 {
				results[i] = f[2]
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		name := "before the first case"
		if started >= 0 {
			name = damageCaseNames[started]
		}
		out := stderr.String()
		if len(out) > 3000 {
			out = out[:3000]
		}
		return results, fmt.Errorf("%s: %v\n%s", name, err, out)
	}
	return results, nil
}

// TestDamageChild is the child of TestDamagedJournalIsNamedNeverACrash: for each file it prints
// "case N" before touching it, then "result N refused <error>" or "result N opened".
func TestDamageChild(t *testing.T) {
	listFile := os.Getenv("AGENTD_DAMAGE_CHILD")
	if listFile == "" {
		t.Skip("only as the child of TestDamagedJournalIsNamedNeverACrash")
	}
	b, err := os.ReadFile(listFile)
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var i int
		var p string
		if _, err := fmt.Sscanf(line, "%d %s", &i, &p); err != nil {
			t.Fatalf("case line %q: %v", line, err)
		}
		fmt.Fprintf(out, "case\t%d\n", i)
		out.Flush()
		res := "opened"
		for _, ro := range []bool{true, false} {
			if err := exercise(p, ro); err != nil {
				res = "refused " + strings.ReplaceAll(err.Error(), "\n", " ")
				break
			}
		}
		fmt.Fprintf(out, "result\t%d\t%s\n", i, res)
		out.Flush()
	}
}

// exercise opens the file as forensics (read-only) or the daemon (read-write) would and, if
// it opens, reads all of it and, read-write, appends a record.
func exercise(path string, readOnly bool) error {
	j, err := journal.Open(path, journal.Options{ReadOnly: readOnly, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer j.Close()
	if _, err := j.Verify(nil); err != nil {
		return err
	}
	_ = j.Iterate(0, func(event.Record) error { return nil })
	_, _, _ = j.SnapshotAtOrBefore(math.MaxUint64)
	if !readOnly {
		_, err := j.Append(context.Background(), transition("task/after", "app", event.StatusNone, event.StatusPulled, 1))
		if err != nil && !errors.Is(err, journal.ErrClosed) {
			return err
		}
	}
	return nil
}

// An empty journal.db is refused by name, never replaced by a new journal (with a new journal
// id, and so a new agent id).
func TestEmptyJournalFileIsRefused(t *testing.T) {
	path := filepath.Join(fastTempDir(t), journal.FileName)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := journal.Open(path, journal.Options{ReadOnly: ro})
		if !errors.Is(err, journal.ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "empty") {
			t.Fatalf("read-only %v: %v", ro, err)
		}
	}
	if st, _ := os.Stat(path); st.Size() != 0 {
		t.Fatalf("the refused empty file was written: %d bytes", st.Size())
	}
}

// fastTempDir is a temporary directory on tmpfs when there is one: the sweep opens thousands of
// files read-write, and each open commits, which on a disk costs two fsyncs.
func fastTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "agentd-damage-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
