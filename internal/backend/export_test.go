package backend

import (
	"context"
	"net"
	"net/http"
)

// DialWith has c dial its connections through dial (a test's host that reads them late).
func DialWith(c *Client, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	c.http.Transport.(*http.Transport).DialContext = dial
}
