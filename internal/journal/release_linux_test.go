package journal_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// mappedRSS is the resident bytes of the process's mapping that starts at addr (from
// /proc/self/smaps): the journal's own pages, whatever else the test process holds.
func mappedRSS(t *testing.T, addr uintptr) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	head := fmt.Sprintf("%x-", addr)
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasPrefix(line, head)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %x in /proc/self/smaps", addr)
	return 0
}

// Opening a journal reads every page of it (bbolt rebuilds its free list by walking the tree),
// but the pages do not stay in the agent's resident set: an agent with a 100 MB journal does
// not show 100 MB more RSS for it (issue 25). Without the release the mapping's RSS is the
// whole file.
func TestOpenLeavesTheJournalOutOfTheResidentSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := open(t, path)
	for b := 0; b < 20; b++ {
		appendThousand(t, j, b)
	}
	size, err := j.Size()
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, path)
	rss := mappedRSS(t, j.DB().Info().Data)
	t.Logf("journal %d bytes, resident after open %d", size, rss)
	if size < 1<<20 {
		t.Fatalf("the journal is only %d bytes: too small to tell", size)
	}
	if rss > size/4 {
		t.Errorf("after open %d of the journal's %d bytes are resident in the process", rss, size)
	}
}

// While the agent writes, the pages it writes do not pile up in its resident set: each commit
// reads the newest pages back through the mapping, so without a bound a burst of 20,000 tasks
// left 30 MB of journal resident (issue 25, bench rss). With the default bound (8 MiB of
// pages written between releases) the mapping's RSS stays near it however much is written.
func TestWritingKeepsTheJournalsResidentPagesBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := open(t, path)
	var peak int64
	for b := 0; b < 500; b++ {
		appendThousand(t, j, b)
		peak = max(peak, mappedRSS(t, j.DB().Info().Data))
	}
	size, err := j.Size()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("journal %d bytes written, mapping resident at most %d", size, peak)
	if size < 48<<20 {
		t.Fatalf("the journal is only %d bytes: too small to tell", size)
	}
	if peak > 10<<20 {
		t.Errorf("while %d bytes were written, up to %d of them were resident in the process (bound 8 MiB of writes and the pages in use)", size, peak)
	}
}

// appendThousand appends the b-th thousand of a run of transitions, in one commit.
func appendThousand(t *testing.T, j *journal.Journal, b int) {
	t.Helper()
	recs := make([]event.Record, 0, 1000)
	for i := 0; i < 1000; i++ {
		recs = append(recs, transition(fmt.Sprintf("task/%07d", b*1000+i), "app", event.StatusNone, event.StatusPulled, b*1000+i))
	}
	if _, err := j.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
}
