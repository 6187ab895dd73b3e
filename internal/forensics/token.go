package forensics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// APIClient reaches a running agent's API at addr: a base URL (http://127.0.0.1:51678), or
// unix:/path/to/socket for an agent listening there (--listen unix:PATH), whose mode and
// --api-group decide who may connect. It returns the client and the base URL to ask.
func APIClient(addr string) (*http.Client, string) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return http.DefaultClient, strings.TrimRight(addr, "/")
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial}}, "http://agentd"
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
