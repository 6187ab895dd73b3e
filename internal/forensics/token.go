package forensics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// ClientHeader is the request header every client of the agent's own sends to its API
// (Agentd-Client: 1). On a loopback listener a connection owned by root or the agent's user
// reads everything only with it (introspect/access.go): a process that merely follows URLs
// for someone else — the Docker Engine fetching the token realm a registry names, a package
// manager, a redirect, a page's <img> or form, a cross-origin fetch (which must pass a CORS
// preflight the API never grants) — never sends it, so it cannot lend its owner's trust.
const ClientHeader = "Agentd-Client"

// APIClient reaches a running agent's API at addr: a base URL (http://127.0.0.1:51678), or
// unix:/path/to/socket for an agent listening there (--listen unix:PATH), whose mode and
// --api-group decide who may connect. It returns the client and the base URL to ask. Every
// request carries ClientHeader; redirects are refused, as the API never sends one, so the
// header never travels to an address the caller did not name.
func APIClient(addr string) (*http.Client, string) {
	var base http.RoundTripper = http.DefaultTransport
	path, unix := strings.CutPrefix(addr, "unix:")
	if unix {
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
		base = &http.Transport{DialContext: dial}
	}
	c := &http.Client{Transport: ownClient{base}, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("the agent's API at %s redirected to %s: it never does, so this is not an agent's API", addr, req.URL.Redacted())
	}}
	if unix {
		return c, "http://agentd"
	}
	return c, strings.TrimRight(addr, "/")
}

// ownClient marks each request as the agent's own client's (ClientHeader).
type ownClient struct{ next http.RoundTripper }

func (o ownClient) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(ClientHeader, "1")
	return o.next.RoundTrip(req)
}

// Authorize adds the bearer token of TokenFile to a request to a live agent's API.
func (s Source) Authorize(req *http.Request) error {
	if s.TokenFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return fmt.Errorf("--api-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("--api-token-file %s is empty", s.TokenFile)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return nil
}
