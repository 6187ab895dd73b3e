package protocol

import (
	"strings"
	"testing"
	"time"
)

// One reading of Retry-After for both wires: what RFC 9110 allows, the protocol's decimal
// seconds, and for anything else the wait the agent would choose without the header (0) —
// never negative, never past the ceiling.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	const ceiling = 10 * time.Minute
	for _, c := range []struct {
		name, v string
		want    time.Duration
	}{
		{"absent", "", 0},
		{"zero", "0", 0},
		{"integer", "2", 2 * time.Second},
		{"spaces around", " 7 ", 7 * time.Second},
		{"decimal, as the reference control plane names a turn", "0.250", 250 * time.Millisecond},
		{"one and a half", "1.5", 1500 * time.Millisecond},
		{"negative", "-1", 0},
		{"explicit plus", "+2", 0},
		{"exponent", "1e3", 0},
		{"bare fraction", ".5", 0},
		{"trailing point", "5.", 0},
		{"infinity", "Inf", 0},
		{"not a number", "NaN", 0},
		{"hex", "0x10", 0},
		{"at the ceiling", "600", ceiling},
		{"over the ceiling", "99999", ceiling},
		{"past int64 nanoseconds", "99999999999999999999999", ceiling},
		{"past float64", "1" + strings.Repeat("0", 400), ceiling},
		{"HTTP-date ahead", now.Add(90 * time.Second).Format(httpDate), 90 * time.Second},
		{"HTTP-date a day ahead", now.Add(24 * time.Hour).Format(httpDate), ceiling},
		{"HTTP-date in the past", now.Add(-time.Hour).Format(httpDate), 0},
		{"RFC 850 date", now.Add(30 * time.Second).Format(time.RFC850), 30 * time.Second},
		{"asctime date", now.Add(30 * time.Second).Format(time.ANSIC), 30 * time.Second},
		{"garbage", "soon", 0},
		{"seconds with a unit", "5s", 0},
	} {
		if got := ParseRetryAfter(c.v, now, ceiling); got != c.want {
			t.Errorf("%s: Retry-After %q gave %v; want %v", c.name, c.v, got, c.want)
		}
	}
}

const httpDate = "Mon, 02 Jan 2006 15:04:05 GMT"
