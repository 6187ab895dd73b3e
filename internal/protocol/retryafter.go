package protocol

// Every Retry-After the agent reads — a 429 to its reports (section 3), a 429 or 503 to its
// shipped logs (section 5) — is read by ParseRetryAfter, so both wires agree on every value.
// RFC 9110 §10.2.3 allows delay-seconds (digits) or an HTTP-date; this protocol's "<seconds>"
// may also carry a decimal fraction ("0.250": the reference control plane names turns to the
// millisecond). Whatever cannot be read is as if absent (0: the agent backs off on its own),
// never a panic or a negative wait, and no value waits past the caller's ceiling.

import (
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter is the wait a Retry-After value v names at now: 0 when v is absent, in the
// past or unreadable; at most ceiling.
func ParseRetryAfter(v string, now time.Time, ceiling time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if decimalSeconds(v) {
		// Digits only: the one error is a range, n then +Inf. The ceiling is checked before the
		// conversion, as a float past int64 converts to garbage.
		n, _ := strconv.ParseFloat(v, 64)
		if n >= ceiling.Seconds() {
			return max(ceiling, 0)
		}
		return min(max(time.Duration(n*float64(time.Second)), 0), ceiling)
	}
	if t, err := parseHTTPDate(v); err == nil {
		return min(max(t.Sub(now), 0), ceiling)
	}
	return 0
}

// decimalSeconds is whether v is digits with at most one fraction of digits ("2", "0.250"):
// no sign, exponent, hex, Inf or NaN, which strconv.ParseFloat would take.
func decimalSeconds(v string) bool {
	whole, frac, dotted := strings.Cut(v, ".")
	return digits(whole) && (!dotted || digits(frac))
}

func digits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// parseHTTPDate reads the three date forms HTTP/1.1 allows (RFC 9110 §5.6.7), as net/http's
// ParseTime does — here so that the protocol's rules, which the pure projection uses, pull in
// no networking package.
func parseHTTPDate(v string) (time.Time, error) {
	var err error
	for _, layout := range []string{"Mon, 02 Jan 2006 15:04:05 GMT", time.RFC850, time.ANSIC} {
		var t time.Time
		if t, err = time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}
