package backend

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
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
