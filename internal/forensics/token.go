package forensics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/agentd/agentd/internal/sockowner"
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
//
// Nothing is sent before the server is known: a connection is used only when root or this
// user holds its other end (sockowner.CheckServer), so a local user who took the agent's
// address while it was down gets neither the header nor a token.
func APIClient(addr string) (*http.Client, string) {
	path, unix := strings.CutPrefix(addr, "unix:")
	dial := func(ctx context.Context, network, hostport string) (net.Conn, error) {
		var c net.Conn
		var err error
		if unix {
			c, err = sockowner.DialUnix(ctx, path)
		} else {
			c, err = (&net.Dialer{}).DialContext(ctx, network, hostport)
		}
		if err != nil {
			return nil, err
		}
		if err := sockowner.CheckServer(c); err != nil {
			c.Close()
			return nil, fmt.Errorf("the agent's API at %s: %w", addr, err)
		}
		return c, nil
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.DialContext, base.Proxy = dial, nil // a proxy would hide who serves
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
