package protocol

import "strings"

// isIPLiteral says whether s is an IPv4 address in dotted decimal or an IPv6 address in the
// text forms of RFC 4291 §2.2 (with "::" and a trailing dotted IPv4 allowed, no zone).
//
// It is written out rather than taken from net/netip because the projection, which decodes
// tasks, must not depend on any net package (internal/fsm's TestProjectionImportsNoIO); the
// tests check it against netip.ParseAddr, fuzzing included.
func isIPLiteral(s string) bool {
	if strings.Contains(s, ":") {
		return isIPv6(s)
	}
	return isIPv4(s)
}

func isIPv4(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if len(p) == 0 || len(p) > 3 || (len(p) > 1 && p[0] == '0') {
			return false // netip refuses leading zeros: they read as octal elsewhere
		}
		n := 0
		for _, c := range []byte(p) {
			if c < '0' || c > '9' {
				return false
			}
			n = n*10 + int(c-'0')
		}
		if n > 255 {
			return false
		}
	}
	return true
}

func isIPv6(s string) bool {
	groups := 8
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.Contains(s[i+1:], ".") {
		if !isIPv4(s[i+1:]) {
			return false
		}
		// The IPv4 tail stands for two groups: put one placeholder group in its place and
		// expect one group fewer.
		s, groups = s[:i+1]+"0", 7
	}
	var head, tail []string
	if i := strings.Index(s, "::"); i >= 0 {
		if strings.Contains(s[i+2:], "::") {
			return false
		}
		if s[:i] != "" {
			head = strings.Split(s[:i], ":")
		}
		if s[i+2:] != "" {
			tail = strings.Split(s[i+2:], ":")
		}
		if len(head)+len(tail) > groups-1 {
			return false
		}
	} else {
		head = strings.Split(s, ":")
		if len(head) != groups {
			return false
		}
	}
	for _, g := range append(head, tail...) {
		if len(g) == 0 || len(g) > 4 {
			return false
		}
		for _, c := range []byte(g) {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
