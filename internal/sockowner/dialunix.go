package sockowner

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// maxSocketPath is the longest path a unix socket address holds (sun_path, with its NUL).
const maxSocketPath = 108

// DialUnix connects to the unix socket at path, also when the path is longer than a socket
// address holds (a data directory deep in a file system): then through its directory's
// descriptor, whose name under /proc is short.
func DialUnix(ctx context.Context, path string) (*net.UnixConn, error) {
	at := path
	if len(path) >= maxSocketPath {
		d, err := os.Open(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		at = "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + filepath.Base(path)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", at)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: unwrapOp(err)}
	}
	return c.(*net.UnixConn), nil
}

func unwrapOp(err error) error {
	if op, ok := err.(*net.OpError); ok {
		return op.Err
	}
	return err
}
