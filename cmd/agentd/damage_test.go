package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/journal"
)

// The built binary on damaged copies of a real journal (the agent's own dev.db): a flipped
// type byte in every page header, the file cut at every 4 KB boundary, and an empty file.
// `agentd run` and `agentd journal verify` (and, on the empty and 4 KB files, every journal
// command) each end with exit 1 and a message naming
// the file — never a panic, never a signal — or, where the damage lies in a page nothing
// reads, run starts under the journal's own agent id (never a new one) and stops cleanly on
// SIGTERM. Before the journal was checked ahead of bbolt, flips panicked in a bbolt goroutine
// and cuts died of SIGBUS; an empty file was silently started afresh under a new agent id.
func TestDamagedJournalEndsInAClearError(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	t.Parallel()
	bin := agentdBinary(t)
	orig, err := os.ReadFile(filepath.Join("..", "..", "testdata", "journals", "dev.db"))
	if err != nil {
		t.Fatal(err)
	}
	const ps = 4096
	type damaged struct {
		name       string
		bytes      []byte
		mustRefuse bool
	}
	var cases []damaged
	for page := 0; page < len(orig)/ps; page++ {
		c := append([]byte(nil), orig...)
		c[page*ps+8] ^= 0xff // the page type
		cases = append(cases, damaged{name: fmt.Sprintf("page %d type flipped", page), bytes: c})
	}
	for cut := 0; cut < len(orig); cut += ps {
		cases = append(cases, damaged{name: fmt.Sprintf("cut to %d bytes", cut), bytes: orig[:cut], mustRefuse: true})
	}
	agentID := storedAgentID(t, orig)
	root := t.TempDir()
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, c := range cases {
		data := filepath.Join(root, fmt.Sprint(i))
		if err := os.MkdirAll(data, 0o700); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(data, journal.FileName)
		if err := os.WriteFile(file, c.bytes, 0o600); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cmds := []string{"verify"}
			if len(c.bytes) <= ps { // every forensics command goes through the same open
				cmds = []string{"verify", "dump", "stats", "replay", "timeline --task task/dev-003"}
			}
			for _, cmd := range cmds {
				args := append(append([]string{"journal"}, strings.Fields(cmd)...), "--data-dir", data)
				out, err := exec.Command(bin, args...).CombinedOutput()
				if err := clearEnd(err, out, file, c.mustRefuse); err != nil {
					t.Errorf("%s: agentd journal %s: %v", c.name, cmd, err)
				}
			}
			if err := runOnDamaged(bin, data, file, agentID, c.mustRefuse); err != nil {
				t.Errorf("%s: agentd run: %v", c.name, err)
			}
			if c.mustRefuse {
				if b, _ := os.ReadFile(file); len(b) != len(c.bytes) {
					t.Errorf("%s: the refused journal changed size to %d", c.name, len(b))
				}
			}
		}()
	}
	wg.Wait()
}

// clearEnd checks how a command ended on a damaged journal: success (the damage lies where it
// does not read; not allowed when mustRefuse), or exit 1 with a message naming the file —
// never a signal, a panic or a stack trace.
func clearEnd(err error, out []byte, file string, mustRefuse bool) error {
	s := string(out)
	if strings.Contains(s, "goroutine ") || strings.Contains(s, "panic") || strings.Contains(s, "SIGBUS") {
		return fmt.Errorf("crashed:\n%.2000s", s)
	}
	if err == nil {
		if mustRefuse {
			return fmt.Errorf("succeeded on a truncated journal:\n%.2000s", s)
		}
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Errorf("died of %v:\n%.2000s", ws.Signal(), s)
	}
	if ee.ExitCode() != 1 {
		return fmt.Errorf("exit %d:\n%.2000s", ee.ExitCode(), s)
	}
	if mustRefuse && (!strings.Contains(s, file) || !strings.Contains(s, "damaged journal file")) {
		return fmt.Errorf("the error does not name the damaged file:\n%.2000s", s)
	}
	return nil
}

// runOnDamaged runs `agentd run` on the data dir: it must end with a clear error, or come up
// under the journal's own agent id and stop cleanly on SIGTERM.
func runOnDamaged(bin, data, file, agentID string, mustRefuse bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--runtime", "sim", "--data-dir", data, "--backend", "http://127.0.0.1:1",
		"--listen", "127.0.0.1:0", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var out strings.Builder
	running := false
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), `"message":"agent running"`) && !running {
			running = true
			if !strings.Contains(sc.Text(), `"agent":"`+agentID+`"`) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return fmt.Errorf("started under another agent id than the journal's %q:\n%s", agentID, sc.Text())
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	err = cmd.Wait()
	if running && mustRefuse {
		return fmt.Errorf("started on a truncated journal:\n%.2000s", out.String())
	}
	return clearEnd(err, []byte(out.String()), file, mustRefuse)
}

// storedAgentID is the agent id the undamaged journal keeps.
func storedAgentID(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), journal.FileName)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(p, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	id, err := j.Meta("agent_id")
	if err != nil || id == "" {
		t.Fatalf("the golden journal keeps no agent id: %q %v", id, err)
	}
	return id
}
