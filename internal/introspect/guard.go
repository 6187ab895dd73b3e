package introspect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/datadir"
	"github.com/agentd/agentd/internal/sockowner"
)

// Who may reach the API, and where: Guard refuses an address beyond loopback without a token
// file (or a unix socket instead), Listen opens the listener (a socket only its owner and
// --api-group may use; a stale socket replaced, a live one never), and Server serves it with
// timeouts a slow or hostile client cannot outlast. The pools of requests are in bounds.go.

// Limits of a connection: a client may be slow or hostile, the agent must not care.
const (
	maxConnsPerUser = 32 // connections open at once of one local user other than root and the agent's
	readTimeout     = 30 * time.Second
	writeTimeout    = 90 * time.Second // longer than the longest long poll (60 s)
	idleTimeout     = 60 * time.Second
	headerTimeout   = 10 * time.Second
	apiTokenLimit   = 64 << 10 // bytes of --api-token-file at most
)

// Options are the API's settings: --listen, --api-token-file, --api-host, --api-group.
type Options struct {
	Listen    string
	Flag      string   // the flag that gave Listen, for errors ("" : --listen)
	TokenFile string   // "" : no token (then only a loopback address or a unix socket is allowed)
	Hosts     []string // names the API answers to besides localhost and IP literals (--api-host)
	Group     string   // group that may use the unix socket (mode 0660 instead of 0600)
	Limits    Limits
}

// API is where and how the introspection API may be reached, and who may read what there
// (access.go): loopback TCP, any other address only with a bearer token, or a unix socket.
type API struct {
	network, addr string
	flag          string   // --listen or --api-socket
	loopback      bool     // a TCP listener on loopback: callers without credentials see the open pages
	token         []byte   // nil: no token configured
	hosts         []string // lower-case, without port
	gid           int      // -1: no --api-group
	limits        Limits
}

// Guard checks the options. An address that is not loopback (0.0.0.0, a host's own address,
// a name) needs a token file, or a unix socket instead; otherwise the agent refuses to start
// with an error naming both ways.
func Guard(o Options) (*API, error) {
	a := &API{network: "tcp", addr: o.Listen, flag: o.Flag, gid: -1, limits: o.Limits.withDefaults()}
	if a.flag == "" {
		a.flag = "--listen"
	}
	if path, ok := strings.CutPrefix(o.Listen, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("--listen %q: want unix:/path/to/socket", o.Listen)
		}
		a.network, a.addr = "unix", path
	}
	if o.TokenFile != "" {
		// The token opens logs and the journal to any local user who has it: its file gets the
		// seal key's checks (the agent's own, 0600, no link, never blocking, bounded).
		b, _, err := datadir.ReadPrivate(o.TokenFile, apiTokenLimit)
		if err != nil {
			return nil, fmt.Errorf("--api-token-file %s: %w", o.TokenFile, err)
		}
		if a.token = []byte(strings.TrimSpace(string(b))); len(a.token) == 0 {
			return nil, fmt.Errorf("--api-token-file %s is empty", o.TokenFile)
		}
	}
	a.loopback = a.network == "tcp" && loopback(o.Listen)
	if a.network == "tcp" && a.token == nil && !a.loopback {
		return nil, fmt.Errorf("--listen %s is not a loopback address: anyone who reaches it could read every task and the journal. Give --api-token-file FILE (clients then send Authorization: Bearer <its content>), or listen on a unix socket (--listen unix:/run/agentd/api.sock), or on 127.0.0.1", o.Listen)
	}
	for _, h := range o.Hosts {
		name := strings.ToLower(strings.TrimSpace(h))
		if name == "" || strings.ContainsAny(name, "/:[]@ ") {
			return nil, fmt.Errorf("--api-host %q: want a host name without port or scheme (e.g. agent.internal)", h)
		}
		a.hosts = append(a.hosts, name)
	}
	if o.Group != "" {
		if a.network != "unix" {
			return nil, fmt.Errorf("--api-group %s: applies to a unix socket only (--listen unix:PATH); a TCP listener has no file mode", o.Group)
		}
		g, err := user.LookupGroup(o.Group)
		if err != nil {
			if g, err = user.LookupGroupId(o.Group); err != nil {
				return nil, fmt.Errorf("--api-group %s: no such group", o.Group)
			}
		}
		if a.gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, fmt.Errorf("--api-group %s: group id %q: %w", o.Group, g.Gid, err)
		}
	}
	return a, nil
}

// Addr is the address the API is to listen on, as configured (unix:PATH for a socket).
func (a *API) Addr() string {
	if a.network == "unix" {
		return "unix:" + a.addr
	}
	return a.addr
}

// loopback reports whether a host:port names only the loopback interface.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen opens the listener. A unix socket is made 0600 (0660 and the --api-group's with one)
// before its name appears (listenUnix). A loopback listener knows who owns each connection
// and bounds the connections of each user without credentials (owners.go).
// Only a stale socket — nothing answers a connection to it — is replaced: a socket another
// live process serves is refused, never deleted, and so is anything that is not a socket (a
// file, a link).
func (a *API) Listen() (net.Listener, error) {
	if a.network == "unix" {
		if err := clearStaleSocket(a.flag, a.addr); err != nil {
			return nil, err
		}
		return a.listenUnix()
	}
	ln, err := net.Listen(a.network, a.addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", a.flag, a.addr, err)
	}
	if a.loopback {
		return newOwnedListener(ln), nil
	}
	return ln, nil
}

// listenUnix makes the socket in a directory of its own (0700, beside the path), gives it
// its mode and group there, and only then links it at the path: nobody else can connect to
// it before it has its mode, whatever the process's umask (bind makes it 0777 minus the
// umask: with umask 0, anyone who raced the chmod kept a connection with the socket's full
// access), and no link swapped in at the path redirects the chmod or chown. The link does
// not replace whatever appeared at the path meanwhile. Closing the listener removes the
// path only while it is still this socket.
func (a *API) listenUnix() (net.Listener, error) {
	fail := func(err error) (net.Listener, error) { return nil, fmt.Errorf("%s unix:%s: %w", a.flag, a.addr, err) }
	private, err := os.MkdirTemp(filepath.Dir(a.addr), ".agentd-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	bindAt := tmp
	if len(tmp) >= maxSocketPath {
		// Longer than a socket address holds, though the path itself fits: bind through the
		// directory's descriptor, whose name under /proc is short.
		d, err := os.Open(private)
		if err != nil {
			return fail(err)
		}
		defer d.Close()
		bindAt = "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/s"
	}
	ln, err := net.Listen("unix", bindAt)
	if err != nil {
		return fail(err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	mode := os.FileMode(0o600)
	if a.gid >= 0 {
		mode = 0o660
		if err := os.Chown(tmp, -1, a.gid); err != nil {
			ln.Close()
			return fail(fmt.Errorf("giving it to --api-group: %w", err))
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		ln.Close()
		return fail(err)
	}
	if err := os.Link(tmp, a.addr); err != nil {
		ln.Close()
		return fail(err)
	}
	st, err := os.Lstat(a.addr)
	if err != nil {
		ln.Close()
		return fail(err)
	}
	return &unixListener{UnixListener: ul, path: a.addr, st: st}, nil
}

// maxSocketPath is the longest path a unix socket address holds (sun_path, with its NUL).
const maxSocketPath = 108

// unixListener removes its socket's path when closed, unless something else is there by then,
// and gives that path as its address.
type unixListener struct {
	*net.UnixListener
	path string
	st   os.FileInfo
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	if st, err := os.Lstat(l.path); err == nil && os.SameFile(st, l.st) {
		_ = os.Remove(l.path)
	}
	return l.UnixListener.Close()
}

// clearStaleSocket removes what is at path only when it is a socket nobody answers on.
func clearStaleSocket(flag, path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s unix:%s: %w", flag, path, err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s unix:%s: a file that is not a socket is in the way (%s); remove it or choose another path", flag, path, st.Mode().Type())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	c, err := sockowner.DialUnix(ctx, path)
	cancel()
	if err == nil {
		h, herr := sockowner.UnixPeer(c.UnixConn)
		c.Close()
		who := "a live process"
		if herr == nil {
			who += ", " + h.String() + ","
		}
		return fmt.Errorf("%s unix:%s: %s answers on this socket (another agentd?); stop it or choose another path — it is not removed", flag, path, who)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s unix:%s: cannot tell whether a live process answers on this socket (%v); it is not removed", flag, path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s unix:%s: removing the stale socket: %w", flag, path, err)
	}
	return nil
}

// Server wraps h with the access rules and the bounds (Wrap), in a server with read, write
// and idle timeouts. Each connection carries itself in its context, so the access rules can
// ask who is at the other end of a loopback connection.
func (a *API) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           a.Wrap(h),
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		// OPTIONS * too goes through the access rules: no answer of the API grants a preflight.
		DisableGeneralOptionsHandler: true,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
}

// errSlowClient is an export cut off because the client stopped reading.
var errSlowClient = errors.New("client stopped reading")
