//go:build lazyfsforgets

package lazyfs

import "testing"

// The test of the test: a lazy file system whose power cut keeps unsynced writes (forgets.go)
// must fail the file system's own scenario.
func TestAForgetfulFSFailsTheScenario(t *testing.T) {
	f, mnt := mountForTest(t, Options{KeepLog: true})
	err := powerCutScenario(f, mnt)
	if err == nil {
		t.Fatal("a file system that keeps unsynced writes across a power cut passed the scenario")
	}
	t.Logf("caught, as it must be:\n%v", err)
}
