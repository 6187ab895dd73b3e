package sockowner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/sockowner"
)

// TestALongSocketPathIsJudgedByItsDirectory (issue 41): a socket path longer than a socket
// address holds (≥ 108 bytes: a data directory deep in a file system) is dialled through its
// directory's descriptor; the directory CheckServer judges is that one, as it was then — an
// agent running as its own user in a directory only it writes passes, one in a directory
// others may write is refused, at any length.
func TestALongSocketPathIsJudgedByItsDirectory(t *testing.T) {
	base, err := os.MkdirTemp("", "sockowner-long-") // not t.TempDir: uid 65534 must pass through
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	deep := filepath.Join(base, strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{base, filepath.Dir(deep), deep} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		dir     string
		mode    os.FileMode
		refused bool
	}{{"private", 0o700, false}, {"shared", 0o1777, true}} {
		dir := filepath.Join(deep, tc.dir)
		if err := os.Mkdir(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Skipf("needs root: %v", err)
		}
		path := filepath.Join(dir, "api.sock")
		if len(path) < 108 {
			t.Fatalf("%s is %d bytes: not longer than a socket address", path, len(path))
		}
		holdSocketsAt(t, 65534, 2, path)
		c, err := sockowner.DialUnix(context.Background(), path)
		if err != nil {
			t.Fatalf("dial %s: %v", path, err)
		}
		err = sockowner.CheckServer(c)
		c.Close()
		if (err != nil) != tc.refused || tc.refused && !strings.Contains(err.Error(), "unix:"+path+" is served by") {
			t.Errorf("uid 65534's socket in its %s directory (%d-byte path): %v; refused: %v", tc.dir, len(path), err, tc.refused)
		}
	}
}
