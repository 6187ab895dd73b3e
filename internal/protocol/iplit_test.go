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
	if ip, _ := parseIPLiteral(s); want && (ip.addr != a.As16() || ip.v4 != a.Unmap().Is4()) {
		t.Fatalf("parseIPLiteral(%q) = %x v4=%v; netip says %x v4=%v", s, ip.addr, ip.v4, a.As16(), a.Unmap().Is4())
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

// parseIPLiteral reads the address netip reads: the same 16 bytes, IPv4-mapped read as IPv4.
func TestIPLiteralBytesAsNetipReadsThem(t *testing.T) {
	for _, s := range append(ipSeeds, "::ffff:0.0.0.0", "0:0:0:0:0:0:0:1", "::FFFF:7f00:1", "1:2::3:1.2.3.4", "ABCD::ef01") {
		a, err := netip.ParseAddr(s)
		ip, ok := parseIPLiteral(s)
		if err != nil || a.Zone() != "" {
			continue
		}
		if !ok || ip.addr != a.As16() || ip.v4 != a.Unmap().Is4() {
			t.Errorf("parseIPLiteral(%q) = %x v4=%v, %v; netip says %x v4=%v", s, ip.addr, ip.v4, ok, a.As16(), a.Unmap().Is4())
		}
	}
}
