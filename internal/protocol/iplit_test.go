package protocol

import (
	"net/netip"
	"testing"
)

var ipSeeds = []string{"127.0.0.1", "0.0.0.0", "255.255.255.255", "256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1..2.3",
	"::", "::1", "fe80::1", "fe80::1%eth0", "2001:db8::8a2e:370:7334", "2001:0db8:0000:0000:0000:ff00:0042:8329",
	"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "1::2::3", ":1::", "1:::2",
	"::ffff:192.0.2.1", "::ffff:192.0.2.256", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4", "::1.2.3.4", "12345::",
	"g::1", "", "localhost", " 1.2.3.4", "1:2:3:4:5:6::1.2.3.4", "1::1.2.3.4"}

// isIPLiteral agrees with net/netip (zones aside: a bind address has none).
func agreesWithNetip(t *testing.T, s string) {
	a, err := netip.ParseAddr(s)
	want := err == nil && a.Zone() == ""
	if got := isIPLiteral(s); got != want {
		t.Fatalf("isIPLiteral(%q) = %v; netip says %v (%v)", s, got, want, err)
	}
}

func TestIPLiteralsAsNetipReadsThem(t *testing.T) {
	for _, s := range ipSeeds {
		agreesWithNetip(t, s)
	}
}

func FuzzIPLiteral(f *testing.F) {
	for _, s := range ipSeeds {
		f.Add(s)
	}
	f.Fuzz(agreesWithNetip)
}
