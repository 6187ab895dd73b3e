package submit

import (
	"testing"
	"time"
)

// An arrival the transport measured counts only when it is plausible: not after the read, not
// more than maxArrivalLag before it (a stepped clock, a test's virtual one).
func TestAnArrivalCountsOnlyWhenPlausible(t *testing.T) {
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name          string
		received, got time.Time
	}{
		{"unknown", time.Time{}, now},
		{"read at once", now, now},
		{"read 2 s late", now.Add(-2 * time.Second), now.Add(-2 * time.Second)},
		{"read at the longest lag", now.Add(-maxArrivalLag), now.Add(-maxArrivalLag)},
		{"further back than any busy host", now.Add(-maxArrivalLag - time.Millisecond), now},
		{"after the read", now.Add(time.Millisecond), now},
	} {
		if got := arrivedAt(now, tc.received); !got.Equal(tc.got) {
			t.Errorf("%s: arrivedAt = %v from now; want %v", tc.name, got.Sub(now), tc.got.Sub(now))
		}
	}
}
