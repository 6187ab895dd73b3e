package journal_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// TestMain lets the test binary double as the crash child: with AGENTD_CRASH_CHILD set it
// appends forever and prints each acknowledged sequence number.
func TestMain(m *testing.M) {
	if path := os.Getenv("AGENTD_CRASH_CHILD"); path != "" {
		crashChild(path)
		return
	}
	os.Exit(m.Run())
}

func crashChild(path string) {
	j, err := journal.Open(path, journal.Options{Timeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	// Eight appenders, some appending three records at once, so kills land inside group commits
	// of multi-record appends.
	for p := 0; p < 8; p++ {
		go func() {
			for i := 0; ; i++ {
				recs := []event.Record{transition(fmt.Sprintf("task/%d", p), "app", event.StatusNone, event.StatusPulled, i)}
				if p%2 == 0 {
					recs = append(recs, recs[0], recs[0])
				}
				got, err := j.Append(context.Background(), recs...)
				if err != nil {
					os.Exit(4)
				}
				mu.Lock()
				fmt.Fprintf(out, "%d %d\n", got[0].Seq, got[len(got)-1].Seq)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	select {}
}

func TestCrashKeepsEveryAcknowledgedAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test spawns processes")
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), journal.FileName)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "AGENTD_CRASH_CHILD="+path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[[2]uint64]bool{}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill after a random number of acknowledged appends, counted, not timed.
		killAt := 50 + rng.IntN(2000)
		deadline := time.After(60 * time.Second)
	read:
		for len(acked) < killAt {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				var a, b uint64
				if _, err := fmt.Sscanf(l, "%d %d", &a, &b); err != nil {
					t.Fatalf("child printed %q", l)
				}
				acked[[2]uint64{a, b}] = true
			case <-deadline:
				t.Fatalf("round %d: child acknowledged only %d appends in 60 s; stderr: %s", round, len(acked), stderr.String())
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for range lines {
		}
		_ = cmd.Wait()
		if len(acked) < killAt {
			t.Fatalf("round %d: child died early; stderr: %s", round, stderr.String())
		}

		j, err := journal.Open(path, journal.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		v, err := j.Verify(nil)
		if err != nil || len(v.Problems) != 0 {
			t.Fatalf("round %d: verify after kill: %v %v", round, v.Problems, err)
		}
		last := j.LastSeq()
		if v.Records != int(last) || (last > 0 && v.FirstSeq != 1) {
			t.Fatalf("round %d: %d records from %d to %d: not a contiguous prefix", round, v.Records, v.FirstSeq, last)
		}
		for r := range acked {
			if r[1] > last {
				t.Fatalf("round %d: append %d..%d was acknowledged but is gone (last %d)", round, r[0], r[1], last)
			}
		}
		// All-or-nothing: every three-record append is whole; a torn one would leave the last
		// records of a task's triple missing or mixed with another task's.
		recs := collect(t, j, 1)
		for i := 0; i < len(recs); i++ {
			if p, _ := strconv.Atoi(strings.TrimPrefix(recs[i].Task, "task/")); p%2 == 0 {
				if i+2 >= len(recs) || recs[i+1].Task != recs[i].Task || recs[i+2].Task != recs[i].Task {
					t.Fatalf("round %d: record %d starts a torn three-record append", round, recs[i].Seq)
				}
				i += 2
			}
		}
		j.Close()
	}
}
