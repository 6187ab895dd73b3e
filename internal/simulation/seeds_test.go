package simulation

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Which seeds the tests run. TestSim runs offset+1 … offset+seeds: offset 0 (the default) is
// the fixed quick set `make test` runs every time; `make test-sim` passes "random", so each
// CI run explores seeds no run before it tried, and prints where it started.
var (
	seed   = flag.Uint64("seed", 0, "replay one seed")
	seeds  = flag.Int("seeds", 500, "how many seeds TestSim runs (make test: seeds 1…500; make test-sim: a fresh stretch)")
	offset = flag.String("seed-offset", os.Getenv("AGENTD_SIM_OFFSET"),
		`TestSim runs seeds offset+1 … offset+seeds; "random" draws a fresh offset (default $AGENTD_SIM_OFFSET, else 0)`)
)

// offsetStride spaces random offsets: a run of fewer seeds than this never overlaps another
// run's stretch partly, and the seeds it names stay readable (734000001, not 9313887301726).
const offsetStride = 1_000_000

// seedRange resolves -seed-offset (or $AGENTD_SIM_OFFSET) for n seeds: the offset to add to
// 1 … n. A value that is neither a number nor "random", or that would overflow, is an error
// naming the flag, the variable and the value.
func seedRange(value string, n int, draw func() uint64) (uint64, error) {
	var off uint64
	switch value {
	case "":
	case "random":
		off = draw() * offsetStride
	default:
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("-seed-offset (or AGENTD_SIM_OFFSET) %q: want a number of seeds to skip, or \"random\"", value)
		}
		off = v
	}
	if n < 0 || off > math.MaxUint64-uint64(n) {
		return 0, fmt.Errorf("-seed-offset %d with -seeds %d: seeds past the largest uint64", off, n)
	}
	return off, nil
}

// freshOffset draws a stride index from the global generator, which Go seeds randomly
// at every start.
func freshOffset() uint64 { return rand.Uint64N(1_000_000) }

// The seed range: the fixed set by default, a given offset, a fresh one on "random", and a
// clear error for anything else.
func TestSeedRange(t *testing.T) {
	draw := func() uint64 { return 734 }
	for _, c := range []struct {
		value string
		want  uint64
	}{{"", 0}, {"0", 0}, {"10000", 10000}, {"random", 734 * offsetStride}} {
		if got, err := seedRange(c.value, 1000, draw); err != nil || got != c.want {
			t.Errorf("seedRange(%q) = %d, %v; want %d", c.value, got, err, c.want)
		}
	}
	for _, bad := range []string{"-1", "lots", "1e6", "18446744073709551615"} {
		if _, err := seedRange(bad, 1000, draw); err == nil || !strings.Contains(err.Error(), "-seed-offset") {
			t.Errorf("seedRange(%q) = %v; want an error naming -seed-offset", bad, err)
		}
	}
	// Two fresh offsets are (almost surely) different stretches.
	if a, b := freshOffset(), freshOffset(); a == b && freshOffset() == a {
		t.Errorf("freshOffset gives %d three times", a)
	}
}
