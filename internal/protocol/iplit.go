package protocol

import "strings"

// ipLiteral is a parsed IP address: 16 bytes, an IPv4 address (and an IPv4-mapped IPv6 one,
// which binds as IPv4) in the ::ffff:a.b.c.d form, so two spellings of one address compare equal.
type ipLiteral struct {
	addr [16]byte
	v4   bool
}

// unspecified reports 0.0.0.0 or ::, the addresses a bind takes every address of with.
func (ip ipLiteral) unspecified() bool {
	if ip.v4 {
		return ip.addr[12]|ip.addr[13]|ip.addr[14]|ip.addr[15] == 0
	}
	return ip.addr == [16]byte{}
}

// isIPLiteral says whether s is an IPv4 address in dotted decimal or an IPv6 address in the
// text forms of RFC 4291 §2.2 (with "::" and a trailing dotted IPv4 allowed, no zone).
func isIPLiteral(s string) bool {
	_, ok := parseIPLiteral(s)
	return ok
}

// parseIPLiteral reads what isIPLiteral accepts.
//
// It is written out rather than taken from net/netip because the projection, which decodes
// tasks, must not depend on any net package (internal/fsm's TestProjectionImportsNoIO); the
// tests check it against netip.ParseAddr, fuzzing included.
func parseIPLiteral(s string) (ipLiteral, bool) {
	var ip ipLiteral
	if strings.Contains(s, ":") {
		a, ok := parseIPv6(s)
		if !ok {
			return ip, false
		}
		ip.addr = a
		ip.v4 = a[10] == 0xff && a[11] == 0xff && [10]byte(a[:10]) == [10]byte{}
		return ip, true
	}
	a, ok := parseIPv4(s)
	if !ok {
		return ip, false
	}
	ip.addr[10], ip.addr[11], ip.v4 = 0xff, 0xff, true
	copy(ip.addr[12:], a[:])
	return ip, true
}

func parseIPv4(s string) ([4]byte, bool) {
	var out [4]byte
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return out, false
	}
	for i, p := range parts {
		if len(p) == 0 || len(p) > 3 || (len(p) > 1 && p[0] == '0') {
			return out, false // netip refuses leading zeros: they read as octal elsewhere
		}
		n := 0
		for _, c := range []byte(p) {
			if c < '0' || c > '9' {
				return out, false
			}
			n = n*10 + int(c-'0')
		}
		if n > 255 {
			return out, false
		}
		out[i] = byte(n)
	}
	return out, true
}

func parseIPv6(s string) ([16]byte, bool) {
	var out [16]byte
	groups := 8
	var v4 [4]byte
	hasV4 := false
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.Contains(s[i+1:], ".") {
		var ok bool
		if v4, ok = parseIPv4(s[i+1:]); !ok {
			return out, false
		}
		// The IPv4 tail stands for the last two groups: put one placeholder group in its place,
		// expect one group fewer, and write the IPv4 bytes over the last two at the end.
		s, groups, hasV4 = s[:i+1]+"0", 7, true
	}
	var head, tail []string
	if i := strings.Index(s, "::"); i >= 0 {
		if strings.Contains(s[i+2:], "::") {
			return out, false
		}
		if s[:i] != "" {
			head = strings.Split(s[:i], ":")
		}
		if s[i+2:] != "" {
			tail = strings.Split(s[i+2:], ":")
		}
		if len(head)+len(tail) > groups-1 {
			return out, false
		}
	} else {
		head = strings.Split(s, ":")
		if len(head) != groups {
			return out, false
		}
	}
	var words [8]uint16
	for i, g := range head {
		w, ok := hexGroup(g)
		if !ok {
			return out, false
		}
		words[i] = w
	}
	for i, g := range tail {
		w, ok := hexGroup(g)
		if !ok {
			return out, false
		}
		words[groups-len(tail)+i] = w
	}
	for i, w := range words {
		out[2*i], out[2*i+1] = byte(w>>8), byte(w)
	}
	if hasV4 {
		copy(out[12:], v4[:])
	}
	return out, true
}

func hexGroup(g string) (uint16, bool) {
	if len(g) == 0 || len(g) > 4 {
		return 0, false
	}
	var w uint16
	for _, c := range []byte(g) {
		switch {
		case '0' <= c && c <= '9':
			w = w<<4 | uint16(c-'0')
		case 'a' <= c && c <= 'f':
			w = w<<4 | uint16(c-'a'+10)
		case 'A' <= c && c <= 'F':
			w = w<<4 | uint16(c-'A'+10)
		default:
			return 0, false
		}
	}
	return w, true
}
