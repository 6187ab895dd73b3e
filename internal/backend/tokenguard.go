package backend

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// errRedirect is a 3xx answer: PROTOCOL.md 1.1 makes it an error of that request, so the
// token is only ever sent to the --backend it was configured for.
var errRedirect = errors.New("redirect refused (PROTOCOL.md 1.1): the token is only sent to --backend")

// noRedirects is the client's CheckRedirect: no redirect is followed, whatever its target —
// Go itself keeps the Authorization header on a redirect to the same host on another port, or
// from https to http.
func noRedirects(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("%w (answer pointed to %s)", errRedirect, req.URL.Redacted())
}

// checkPlainToken refuses a token over plain http to a host that is not loopback, unless the
// operator said so explicitly: anyone on the path could read it.
func checkPlainToken(u *url.URL, tokenFile string, allow bool) error {
	if u.Scheme != "http" || tokenFile == "" || allow || isLoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("--backend %s: the bearer token would be sent in the clear over http:// to a host that is not loopback; use https://, or pass --allow-plain-token to accept that", u.Redacted())
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ParseURL checks --backend: an http:// or https:// URL with a host and no userinfo. Credentials
// in the URL (http://user:pass@host) are refused: they would be printed by --print-config and
// logged at start, and Go would send them as Basic auth beside the bearer token; the token
// belongs in --token-file. Errors name the flag and never show the credentials.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--backend %q: want an http:// or https:// URL", RedactURL(raw))
	}
	if u.User != nil {
		return nil, fmt.Errorf("--backend %q: credentials in the URL (user:password@) are refused: they would be printed and logged; put the bearer token in a file (mode 0600) and name it with --token-file", RedactURL(raw))
	}
	return u, nil
}

// RedactURL is raw with the userinfo of a scheme:userinfo@host URL replaced by "REDACTED",
// whether or not the rest parses; any other string comes back as it is. The authority is
// found as a browser finds it (WHATWG URL), not only after "://": "http:/u:p@h", "http:u:p@h"
// and `http:\\u:p@h` all mean user u, password p there, though Go's url.Parse reads none of
// them so — an operator who typed one must not see the password echoed in the refusal.
func RedactURL(raw string) string {
	i := schemeEnd(raw)
	if i < 0 {
		return raw
	}
	start := i + 1
	for start < len(raw) && (raw[start] == '/' || raw[start] == '\\') {
		start++
	}
	authority := raw[start:]
	if end := strings.IndexAny(authority, "/?#\\"); end >= 0 {
		authority = authority[:end]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return raw
	}
	return raw[:start] + "REDACTED" + raw[start+at:]
}

// schemeEnd is the index of the colon ending raw's scheme (RFC 3986: a letter, then letters,
// digits, "+", "-", "."), or -1 when raw does not start with one.
func schemeEnd(raw string) int {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			return i
		default:
			return -1
		}
	}
	return -1
}
