//go:build plantedbugs

package explore

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func TestScratchPlanted(t *testing.T) {
	tasks, _ := strconv.Atoi(os.Getenv("T"))
	ctrs, _ := strconv.Atoi(os.Getenv("C"))
	b := Bounds{Tasks: tasks, Containers: ctrs, Depth: 30, Faults: 2, Crashes: 1, Timeout: 90 * time.Second, LivenessEvery: 0}
	r := Search(b)
	t.Log(os.Getenv("AGENTD_PLANTED_BUGS"), r)
	for k, m := range r.Trace {
		t.Logf("%d %s", k+1, m)
	}
}
