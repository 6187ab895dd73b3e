//go:build syncbug

package powerloss

import (
	"strings"
	"testing"
)

func init() { plantedSyncBug = true }

// The suite's test of itself: with the journal's record commits skipping their fdatasync
// (internal/journal/syncbug.go), some crash state must lose an acknowledged record.
func TestTheSuiteFindsTheMissingFsync(t *testing.T) {
	res := crashSuite(t, 1)
	t.Log(res)
	if res.failed == 0 {
		t.Fatal("the crash states of a journal that acknowledges unsynced records all passed: the suite cannot see a missing fsync")
	}
	if !strings.Contains(strings.Join(res.failures, "\n"), "is lost") {
		t.Fatalf("failures, but none names a lost acknowledged record:\n%s", strings.Join(res.failures, "\n"))
	}
	t.Logf("found, as it must be; the first:\n%s", res.failures[0])
}
