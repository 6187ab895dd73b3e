package docker

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/rs/zerolog"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// replaceFile swaps the file's content the way config management does (a new inode).
func replaceFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestRegistryAuthMatchesTheReferencesRegistry(t *testing.T) {
	// A password whose standard base64 has '+' and '/': the header must be base64url JSON.
	const hubPass = "p>?>?~~~"
	file := `{"auths": {
		"https://index.docker.io/v1/": {"auth": "` + b64("hubuser:"+hubPass) + `"},
		"Registry.Example.com:5000": {"username": "u1", "password": "p1"},
		"http://127.0.0.1:5000/v2/": {"auth": "` + b64("local:pw:with:colons") + `"},
		"[::1]:5000": {"identitytoken": "tok-123"},
		"store.example": {}
	}, "credsStore": "desktop"}`
	path := filepath.Join(t.TempDir(), "config.json")
	replaceFile(t, path, file)
	a, err := LoadRegistryAuth(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ image, user, pass, token string }{
		{"busybox", "hubuser", hubPass, ""},
		{"library/busybox:1", "hubuser", hubPass, ""},
		{"docker.io/team/app:1", "hubuser", hubPass, ""},
		{"index.docker.io/team/app:1", "hubuser", hubPass, ""},
		{"registry.example.com:5000/app:1", "u1", "p1", ""},
		{"REGISTRY.example.com:5000/app:1", "u1", "p1", ""},
		{"127.0.0.1:5000/app@sha256:" + strings.Repeat("b", 64), "local", "pw:with:colons", ""},
		{"[::1]:5000/app:1", "", "", "tok-123"},
		{"registry.example.com/app:1", "", "", ""}, // another port is another registry
		{"127.0.0.1:5001/app:1", "", "", ""},
		{"store.example/app:1", "", "", ""}, // nothing but a pointer to a credential store
		{"quay.io/app:1", "", "", ""},
	}
	for _, c := range cases {
		enc, _, err := a.Encoded(c.image)
		if err != nil {
			t.Fatalf("%s: %v", c.image, err)
		}
		if c.user == "" && c.token == "" {
			if enc != "" {
				t.Errorf("%s: credentials %q sent to a registry the file does not name", c.image, enc)
			}
			continue
		}
		if _, err := base64.URLEncoding.DecodeString(enc); err != nil {
			t.Errorf("%s: %q is not base64url: %v", c.image, enc, err)
		}
		ac, err := authconfig.Decode(enc)
		if err != nil || ac.Username != c.user || ac.Password != c.pass || ac.IdentityToken != c.token {
			t.Errorf("%s: decoded %+v, %v; want %s / %s / %s", c.image, ac, err, c.user, c.pass, c.token)
		}
	}
	var none *RegistryAuth
	if enc, _, err := none.Encoded("busybox"); enc != "" || err != nil {
		t.Fatalf("no file: %q, %v", enc, err)
	}
}

func TestRegistryAuthFileFaultsNameTheFileNotTheSecret(t *testing.T) {
	dir := t.TempDir()
	const secret = "hunter2-Secret"
	cases := map[string]struct{ text, want string }{
		"missing":      {"", "no such file"},
		"not json":     {`{"auths": {"r.example": {"auth": "` + secret + `"`, "invalid JSON"},
		"not an obj":   {`["` + secret + `"]`, "not a Docker config.json"},
		"no auths":     {`{"credsStore": "desktop"}`, `no "auths"`},
		"bad base64":   {`{"auths": {"r.example": {"auth": "!!` + secret + `"}}}`, `auths["r.example"].auth: not base64`},
		"no colon":     {`{"auths": {"r.example": {"auth": "` + b64(secret) + `"}}}`, `auths["r.example"].auth: not base64 of user:password`},
		"bad registry": {`{"auths": {"https://": {"username": "u", "password": "` + secret + `"}}}`, `auths["https://"]`},
	}
	for name, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if c.text != "" {
			replaceFile(t, path, c.text)
		}
		_, err := LoadRegistryAuth(path, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), "--registry-auth-file "+path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want it to name the flag, %s and %q", name, err, path, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), b64(secret))) {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

func TestRegistryAuthIsReReadWhenTheFileChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	replaceFile(t, path, `{"auths": {"r.example": {"username": "u", "password": "old-pass"}}}`)
	var logs bytes.Buffer
	pass := passwordOf(t, path, &logs)
	if p := pass(); p != "old-pass" {
		t.Fatalf("password %q", p)
	}
	replaceFile(t, path, `{"auths": {"r.example": {"username": "u", "password": "new-pass"}}}`)
	if p := pass(); p != "new-pass" {
		t.Fatalf("after a rotation: password %q, want new-pass", p)
	}
	// A broken rewrite: the last good credentials stay, and the fault is said once.
	replaceFile(t, path, `{"auths": {"r.example": {"username": "u", "password": "half-writ`)
	for range 3 {
		if p := pass(); p != "new-pass" {
			t.Fatalf("after a broken rewrite: password %q, want the last good one", p)
		}
	}
	if n := strings.Count(logs.String(), "cannot re-read"); n != 1 || !strings.Contains(logs.String(), path) {
		t.Fatalf("%d log lines about the broken file (want 1, naming %s):\n%s", n, path, logs.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if p := pass(); p != "new-pass" {
		t.Fatalf("after the file went: password %q, want the last good one", p)
	}
	replaceFile(t, path, `{"auths": {"r.example": {"username": "u", "password": "third-pass"}}}`)
	if p := pass(); p != "third-pass" {
		t.Fatalf("after the file came back: password %q", p)
	}
	for _, s := range []string{"old-pass", "new-pass", "half-writ", "third-pass"} {
		if strings.Contains(logs.String(), s) {
			t.Fatalf("a password in the log: %s", logs.String())
		}
	}
}

func TestPullErrorsAreSortedPermanentOrTransient(t *testing.T) {
	cases := []struct {
		msg       string
		permanent bool
		kind      string
	}{
		{`Head "http://127.0.0.1:5000/v2/app/manifests/1": no basic auth credentials`, true, "unauthorized"},
		{"pull access denied for app, repository does not exist or may require 'docker login': denied: requested access to the resource is denied", true, "unauthorized"},
		{"manifest for 127.0.0.1:5000/app:9 not found: manifest unknown: manifest unknown", true, "manifest unknown"},
		{"invalid reference format", true, "bad reference"},
		{"received unexpected HTTP status: 503 Service Unavailable", false, ""},
		{`Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host`, false, ""},
		{"read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer", false, ""},
		{"net/http: TLS handshake timeout", false, ""},
		{"unexpected EOF", false, ""},
	}
	for _, c := range cases {
		pe := classify(&streamError{msg: c.msg})
		if pe.permanent != c.permanent || pe.kind != c.kind {
			t.Errorf("%q: permanent %v kind %q; want %v %q", c.msg, pe.permanent, pe.kind, c.permanent, c.kind)
		}
		if c.kind != "" && !strings.HasPrefix(pe.Error(), c.kind) {
			t.Errorf("%q reads %q: the cause must lead", c.msg, pe.Error())
		}
	}
	if pe := classify(&streamError{code: 401, msg: "whatever"}); !pe.permanent || pe.kind != "unauthorized" {
		t.Errorf("a 401 in the stream: %+v", pe)
	}
}

func TestSecretsAreScrubbedFromMessages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	replaceFile(t, path, `{"auths": {"r.example": {"username": "u", "password": "Pa55-w0rd"}}}`)
	a, err := LoadRegistryAuth(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	enc, _, _ := a.Encoded("r.example/app:1")
	got := secretsOf(enc)("daemon said: bad password Pa55-w0rd in header " + enc)
	if strings.Contains(got, "Pa55-w0rd") || strings.Contains(got, enc) {
		t.Fatalf("not scrubbed: %s", got)
	}
}

// TestRegistryAuthFileGetsTheSealKeysChecks: the credentials file is refused at start, naming
// the flag, unless it is the agent's own 0600 regular file of bounded size; a re-read applies
// the same checks, and a file that fails them keeps the last good credentials (said once).
func TestRegistryAuthFileGetsTheSealKeysChecks(t *testing.T) {
	dir := t.TempDir()
	const body = `{"auths": {"r.example": {"username": "u", "password": "pw"}}}`
	good := filepath.Join(dir, "good.json")
	replaceFile(t, good, body)
	cases := map[string]struct {
		make func(path string) error
		want string
	}{
		"world readable": {func(p string) error { return writeMode(p, body, 0o644) }, "mode 0644"},
		"group readable": {func(p string) error { return writeMode(p, body, 0o640) }, "mode 0640"},
		"a link":         {func(p string) error { return os.Symlink(good, p) }, "symbolic link"},
		"too big": {func(p string) error {
			return os.WriteFile(p, []byte(body+strings.Repeat(" ", registryAuthLimit)), 0o600)
		}, "more than the"},
		"a fifo": {func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file"},
	}
	if os.Geteuid() == 0 {
		cases["owned by nobody"] = struct {
			make func(path string) error
			want string
		}{func(p string) error {
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		}, "owned by uid 65534"}
	}
	for name, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := c.make(path); err != nil {
			t.Fatal(err)
		}
		_, err := LoadRegistryAuth(path, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), "--registry-auth-file "+path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a refusal naming the flag, %s and %q", name, err, path, c.want)
		}
	}
}

// writeMode writes a file with exactly mode (whatever the umask).
func writeMode(path, text string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

func TestRegistryAuthReReadAppliesTheChecks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	replaceFile(t, path, `{"auths": {"r.example": {"username": "u", "password": "good-pass"}}}`)
	var logs bytes.Buffer
	pass := passwordOf(t, path, &logs)
	if p := pass(); p != "good-pass" {
		t.Fatalf("password %q", p)
	}
	// Rewritten world-readable: refused, the last good credentials stay, said once.
	if err := writeMode(path+".tmp", `{"auths": {"r.example": {"username": "u", "password": "open-pass"}}}`, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if p := pass(); p != "good-pass" {
			t.Fatalf("after a world-readable rewrite: password %q, want the last good one", p)
		}
	}
	if n := strings.Count(logs.String(), "cannot re-read"); n != 1 || !strings.Contains(logs.String(), "mode 0644") {
		t.Fatalf("%d log lines about the open file (want 1, saying mode 0644):\n%s", n, logs.String())
	}
	// Swapped for a link to a file of the right mode: refused too.
	other := filepath.Join(dir, "other.json")
	replaceFile(t, other, `{"auths": {"r.example": {"username": "u", "password": "linked-pass"}}}`)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, path); err != nil {
		t.Fatal(err)
	}
	if p := pass(); p != "good-pass" {
		t.Fatalf("after a swap for a link: password %q, want the last good one", p)
	}
	if !strings.Contains(logs.String(), "symbolic link") {
		t.Fatalf("the link was not logged:\n%s", logs.String())
	}
	// A chmod alone (content, size and mtime unchanged) is a change the checks see.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	replaceFile(t, path, `{"auths": {"r.example": {"username": "u", "password": "third-pass"}}}`)
	if p := pass(); p != "third-pass" {
		t.Fatalf("after a good rewrite: password %q", p)
	}
	if err := os.Chmod(path, 0o604); err != nil {
		t.Fatal(err)
	}
	if pass(); !strings.Contains(logs.String(), "mode 0604") {
		t.Fatalf("a chmod 604 went unnoticed:\n%s", logs.String())
	}
}

// passwordOf loads the credentials file at path and returns what reads r.example's password
// now (each call may re-read the file).
func passwordOf(t *testing.T, path string, logs *bytes.Buffer) func() string {
	t.Helper()
	a, err := LoadRegistryAuth(path, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	return func() string {
		t.Helper()
		enc, _, err := a.Encoded("r.example/app:1")
		if err != nil {
			t.Fatal(err)
		}
		ac, err := authconfig.Decode(enc)
		if err != nil {
			t.Fatal(err)
		}
		return ac.Password
	}
}
