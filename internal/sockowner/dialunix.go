package sockowner

import (
	"context"
	"net"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Dialling a unix socket through its directory's descriptor. The invariant: the owner and mode
// CheckServer judges a socket's directory by are those of the very directory the connection
// went through, read while its descriptor was open — never a path looked up again later (a
// path longer than a socket address reaches the socket through /proc/self/fd/N, a name that
// means nothing once N is closed, or another directory once N is reused).

// Conn is a connection DialUnix made: the path asked for, and the owner of the directory it
// was reached through when nobody else may write there (-1 otherwise: socketDirOwner).
type Conn struct {
	*net.UnixConn
	Path     string
	dirOwner int64
}

// DialUnix connects to the unix socket at path, through its directory opened O_PATH (so also
// when the path is longer than a socket address holds: a data directory deep in a file
// system), and keeps that directory's owner with the connection.
func DialUnix(ctx context.Context, path string) (*Conn, error) {
	fail := func(err error) (*Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: unwrapOp(err)}
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(fd)
	owner := int64(-1)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&0o022 == 0 {
		owner = int64(st.Uid)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd)+"/"+filepath.Base(path))
	if err != nil {
		return fail(err)
	}
	return &Conn{UnixConn: c.(*net.UnixConn), Path: path, dirOwner: owner}, nil
}

func unwrapOp(err error) error {
	if op, ok := err.(*net.OpError); ok {
		return op.Err
	}
	return err
}
