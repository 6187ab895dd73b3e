package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// parseRun parses an `agentd run` command line as main does, with the default settings file
// at defaultFile, and returns the command and kong's context.
func parseRun(t *testing.T, defaultFile string, args ...string) (*runCmd, *kong.Context, error) {
	t.Helper()
	old := configDefaultPath
	configDefaultPath = defaultFile
	t.Cleanup(func() { configDefaultPath = old })
	var c cli
	var out bytes.Buffer
	parser, err := newParser(&c, kong.Writers(&out, &out), kong.Exit(func(int) { t.Fatalf("kong exited: %s", out.String()) }))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := parser.Parse(append([]string{"run"}, args...))
	return &c.Run, kctx, err
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clearEnv unsets every AGENTD_* variable for the test (CI may set some).
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AGENTD_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func printed(t *testing.T, r *runCmd, kctx *kong.Context) map[string]configSetting {
	t.Helper()
	var b bytes.Buffer
	if err := r.printConfig(&b, kctx); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Settings map[string]configSetting `json:"settings"`
	}
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("--print-config is not JSON: %v\n%s", err, b.String())
	}
	return out.Settings
}

// TestConfigPrecedence: a flag beats its AGENTD_* variable, which beats the file, which beats
// the default; --print-config says where each value came from.
func TestConfigPrecedence(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, "agentd.json", `{
		"backend": "http://file:1", "runtime": "sim", "cleanup_wait": "1h", "listen": "127.0.0.1:7001",
		"log_level": "debug", "snapshot_every": 500, "token_file": "/etc/agentd/token"}`)
	t.Setenv("AGENTD_LISTEN", "127.0.0.1:7002")
	t.Setenv("AGENTD_CLEANUP_WAIT", "2h")
	r, kctx, err := parseRun(t, "/nonexistent/agentd.json", "--config", file, "--cleanup-wait", "3m")
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend != "http://file:1" || r.Runtime != "sim" || r.LogLevel != "debug" || r.SnapshotEvery != 500 || r.TokenFile != "/etc/agentd/token" {
		t.Errorf("file values not applied: %+v", r)
	}
	if r.Listen != "127.0.0.1:7002" {
		t.Errorf("listen %q: the environment must beat the file", r.Listen)
	}
	if r.CleanupWait != 3*time.Minute {
		t.Errorf("cleanup wait %v: the flag must beat the environment and the file", r.CleanupWait)
	}
	if r.Retention != 168*time.Hour {
		t.Errorf("retention %v: want the default", r.Retention)
	}
	got := printed(t, r, kctx)
	for key, want := range map[string]configSetting{
		"cleanup_wait": {"3m0s", "flag"},
		"listen":       {"127.0.0.1:7002", "env AGENTD_LISTEN"},
		"backend":      {"http://file:1", "file " + file},
		"token_file":   {"/etc/agentd/token", "file " + file},
		"retention":    {"168h0m0s", "default"},
		"agent_id":     {"", "unset"},
	} {
		if g := got[key]; g.Value != want.Value || g.Source != want.Source {
			t.Errorf("--print-config %s = %+v; want %+v", key, g, want)
		}
	}
	if _, ok := got["config"]; ok {
		t.Error("--print-config lists config itself as a setting")
	}
}

// TestConfigDefaultFile: /etc/agentd/agentd.json is read when it exists and nothing else is
// named; its absence is no error.
func TestConfigDefaultFile(t *testing.T) {
	clearEnv(t)
	def := writeFile(t, "agentd.json", `{"backend": "http://default-file:1"}`)
	r, kctx, err := parseRun(t, def)
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend != "http://default-file:1" || printed(t, r, kctx)["backend"].Source != "file "+def {
		t.Errorf("the default file was not read: backend %q", r.Backend)
	}
	r, _, err = parseRun(t, filepath.Join(t.TempDir(), "absent.json"), "--backend", "http://flag:1")
	if err != nil || r.Backend != "http://flag:1" {
		t.Fatalf("without a default file: %v, backend %q", err, r.Backend)
	}
	// AGENTD_CONFIG names the file as --config does.
	t.Setenv("AGENTD_CONFIG", writeFile(t, "env.json", `{"backend": "http://env-file:1"}`))
	r, _, err = parseRun(t, def)
	if err != nil || r.Backend != "http://env-file:1" {
		t.Fatalf("AGENTD_CONFIG: %v, backend %q", err, r.Backend)
	}
}

// TestConfigErrors: every way a settings file can be wrong is refused with the file, the key
// and the reason.
func TestConfigErrors(t *testing.T) {
	clearEnv(t)
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"unknown key", `{"backend": "http://x:1", "cleanup_wiat": "1h"}`, []string{`key "cleanup_wiat"`, "no such setting", "cleanup_wait"}},
		{"bad duration", `{"backend": "http://x:1", "cleanup_wait": "soon"}`, []string{`key "cleanup_wait"`, "soon"}},
		{"duration as number", `{"backend": "http://x:1", "cleanup_wait": 3600}`, []string{`key "cleanup_wait"`, "duration string", "3600"}},
		{"string for a number", `{"backend": "http://x:1", "snapshot_every": "many"}`, []string{`key "snapshot_every"`, "want a number"}},
		{"negative for unsigned", `{"backend": "http://x:1", "snapshot_every": -1}`, []string{`key "snapshot_every"`}},
		{"number for a string", `{"backend": 8080}`, []string{`key "backend"`, "want a string", "8080"}},
		{"enum", `{"backend": "http://x:1", "runtime": "podman"}`, []string{`key "runtime"`, `"podman" is not one of docker, sim`}},
		{"object", `{"backend": {"url": "http://x:1"}}`, []string{`key "backend"`, "not a JSON object"}},
		{"null", `{"backend": null}`, []string{`key "backend"`, "null"}},
		{"a secret", `{"backend": "http://x:1", "token": "s3cret"}`, []string{`key "token"`, "secrets are never read", "token_file"}},
		{"not JSON", `backend = "http://x:1"`, []string{"not a JSON object of settings"}},
		{"an array", `["backend"]`, []string{"not a JSON object of settings"}},
		{"two objects", `{"backend": "http://x:1"} {"runtime": "sim"}`, []string{"more after the JSON object"}},
		{"a key twice", `{"backend": "http://x:1", "cleanup_wait": "1h", "backend": "http://y:1"}`, []string{`key "backend" appears twice`, "keep one"}},
		{"a key twice, escaped", `{"backend": "http://x:1", "back\u0065nd": "http://y:1"}`, []string{`key "backend" appears twice`}},
		{"a nested key twice", `{"backend": {"url": 1, "url": 2}}`, []string{`key "url" appears twice in "backend"`}},
		{"a list with a number", `{"backend": "http://x:1", "api_host": ["a.example", 3]}`, []string{`key "api_host"`, "item 1: want a string"}},
		{"an object for a list", `{"backend": "http://x:1", "allow_bind_root": {"a": 1}}`, []string{`key "allow_bind_root"`, "want a list of strings", "not a JSON object"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := writeFile(t, "agentd.json", c.text)
			_, _, err := parseRun(t, "/nonexistent", "--config", file)
			if err == nil {
				t.Fatalf("%s accepted", c.text)
			}
			for _, w := range append([]string{file}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q repeats the secret", err)
			}
		})
	}
	_, _, err := parseRun(t, "/nonexistent", "--config", "/nonexistent/agentd.json", "--backend", "http://x:1")
	if err == nil || !strings.Contains(err.Error(), "--config /nonexistent/agentd.json: no such file") {
		t.Errorf("a missing --config file: %v", err)
	}
	dir := t.TempDir()
	_, _, err = parseRun(t, "/nonexistent", "--config", dir, "--backend", "http://x:1")
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("a directory as --config: %v", err)
	}
	// A bad value in the file does not matter when the environment or a flag overrides it.
	file := writeFile(t, "agentd.json", `{"backend": "http://x:1", "cleanup_wait": "soon"}`)
	t.Setenv("AGENTD_CLEANUP_WAIT", "5m")
	if r, _, err := parseRun(t, "/nonexistent", "--config", file); err != nil || r.CleanupWait != 5*time.Minute {
		t.Errorf("file value overridden by the environment: %v, %v", err, r.CleanupWait)
	}
}

// TestConfigLists: a repeatable setting is a JSON list in the file (or one string), each item
// taken whole: a comma in a path is part of it, not a separator.
func TestConfigLists(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, "agentd.json", `{"backend": "http://x:1", "allow_bind_root": ["/srv/a,b", "/srv/c"], "api_host": "agent.example"}`)
	r, _, err := parseRun(t, "/nonexistent", "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.AllowBindRoot, []string{"/srv/a,b", "/srv/c"}) || !slices.Equal(r.APIHost, []string{"agent.example"}) {
		t.Errorf("allow_bind_root %q, api_host %q; want the file's lists, items whole", r.AllowBindRoot, r.APIHost)
	}
}

// TestConfigThroughTheBinary: `agentd run --print-config` prints the settings and their
// sources and starts nothing; a bad settings file stops `agentd run` with the file, the key
// and the reason, before anything is opened.
func TestConfigThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	data := filepath.Join(t.TempDir(), "data")
	file := writeFile(t, "agentd.json", `{"backend": "http://file:1", "runtime": "sim", "data_dir": "`+data+`"}`)
	cmd := exec.Command(agentdBinary(t), "run", "--config", file, "--print-config", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGENTD_CLEANUP_WAIT=10m")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("--print-config: %v\n%s", err, out)
	}
	var printedOut struct {
		ConfigFile string                   `json:"config_file"`
		Settings   map[string]configSetting `json:"settings"`
	}
	if err := json.Unmarshal(out, &printedOut); err != nil {
		t.Fatalf("--print-config: %v\n%s", err, out)
	}
	if printedOut.ConfigFile != file || printedOut.Settings["backend"].Source != "file "+file ||
		printedOut.Settings["cleanup_wait"] != (configSetting{"10m0s", "env AGENTD_CLEANUP_WAIT"}) ||
		printedOut.Settings["listen"] != (configSetting{"127.0.0.1:0", "flag"}) {
		t.Errorf("--print-config:\n%s", out)
	}
	if _, err := os.Stat(data); err == nil {
		t.Error("--print-config created the data directory: it must start nothing")
	}
	bad := writeFile(t, "bad.json", `{"backend": "http://file:1", "retention": "a week"}`)
	out, err = exec.Command(agentdBinary(t), "run", "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), bad) || !strings.Contains(string(out), `key "retention"`) || !strings.Contains(string(out), "a week") {
		t.Errorf("a bad settings file: %v\n%s", err, out)
	}
}

// TestConfigDuplicateKeys: a key named twice in one object, at any depth, is found and named
// with where it is; the same key in different objects is no duplicate.
func TestConfigDuplicateKeys(t *testing.T) {
	for text, want := range map[string]string{
		`{"a": 1, "b": 2}`:                           "",
		`{"a": {"x": 1}, "b": {"x": 1}, "x": 0}`:     "",
		`{"a": [{"x": 1}, {"x": 1}], "b": [1, 1]}`:   "",
		`{"a": [], "b": {}, "c": [[{}]], "d": null}`: "",
		`{"a": 1, "a": 1}`:                           `key "a" appears twice:`,
		`{"a": {"b": {"c": 1, "c": 2}}}`:             `key "c" appears twice in "a.b"`,
		`{"a": [{"x": 1, "y": [], "x": 2}]}`:         `key "x" appears twice in "a[]"`,
		`{"a": {"x": [1, {"y": 1}], "x": 2}}`:        `key "x" appears twice in "a"`,
		`{"a": [1, 2], "b": {"c": {}}, "a": true}`:   `key "a" appears twice:`,
		`{"a": 1, "b": `:                             "", // a syntax error, named by the decoder
	} {
		err := checkDuplicateKeys([]byte(text))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v; want %q", text, err, want)
		}
	}
}

// TestBackendCredentialsNeverUsedNorPrinted: userinfo in --backend, from a flag, the
// environment or the file, stops `agentd run` before anything is opened, naming the flag and
// --token-file; --print-config shows REDACTED where the password was.
func TestBackendCredentialsNeverUsedNorPrinted(t *testing.T) {
	const secret = "s3cret-Pw"
	backendURL := "http://user:" + secret + "@127.0.0.1:1"
	for _, source := range []string{"flag", "env", "file"} {
		t.Run(source, func(t *testing.T) {
			clearEnv(t)
			data := filepath.Join(t.TempDir(), "data")
			args := []string{"--runtime", "sim", "--data-dir", data, "--listen", "127.0.0.1:0"}
			switch source {
			case "flag":
				args = append(args, "--backend", backendURL)
			case "env":
				t.Setenv("AGENTD_BACKEND", backendURL)
			case "file":
				args = append(args, "--config", writeFile(t, "agentd.json", `{"backend": "`+backendURL+`"}`))
			}
			r, kctx, err := parseRun(t, "/nonexistent", args...)
			if err != nil {
				t.Fatal(err)
			}
			if got := printed(t, r, kctx)["backend"]; got.Value != "http://REDACTED@127.0.0.1:1" {
				t.Errorf("--print-config backend = %+v; want the password REDACTED", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = r.Run(ctx, kctx)
			if err == nil || !strings.Contains(err.Error(), "--backend") || !strings.Contains(err.Error(), "--token-file") {
				t.Errorf("run: %v; want a refusal naming --backend and --token-file", err)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("run: the error shows the password: %v", err)
			}
			if _, err := os.Stat(data); err == nil {
				t.Error("the data directory was created: the refusal must come before anything is opened")
			}
		})
	}
}

// TestSettingsFileOthersCanWriteIsRefused: the settings file decides the backend, the bind
// roots and the engine, so whoever can write it runs the agent as root (a backend of theirs
// sending tasks that bind under "--allow-bind-root /"). One writable by group or others, or
// owned by a user other than root and the agent's, is refused naming the file and the fix; a
// FIFO in its place is refused rather than waited on. Before, all were read (the FIFO for
// ever). A link is followed, to a file that passes (config management links into /etc).
func TestSettingsFileOthersCanWriteIsRefused(t *testing.T) {
	clearEnv(t)
	text := `{"backend": "http://x:1"}`
	for _, c := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"group-writable", func(p string) error { return os.Chmod(p, 0o664) }, "lets group or others write it"},
		{"world-writable", func(p string) error { return os.Chmod(p, 0o646) }, "lets group or others write it"},
		{"a FIFO", func(p string) error { os.Remove(p); return syscall.Mkfifo(p, 0o600) }, "not a regular file"},
		// a 0600 root-owned file others could swap (rename theirs into place) before the start
		{"in a directory others can write", func(p string) error { return os.Chmod(filepath.Dir(p), 0o777) }, "is writable by group or others"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := writeFile(t, "agentd.json", text)
			if err := c.make(file); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, _, err := parseRun(t, "/nonexistent", "--config", file); done <- err }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v; want refused naming the file and %q", c.name, err, c.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: reading the settings file hangs", c.name)
			}
		})
	}
	if os.Geteuid() == 0 {
		file := writeFile(t, "agentd.json", text)
		if err := os.Chown(file, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, _, err := parseRun(t, "/nonexistent", "--config", file); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("a settings file of uid 65534: %v; want refused naming its owner", err)
		}
	}
	good := writeFile(t, "agentd.json", text)
	if err := os.Chmod(good, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "agentd.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{good, link} {
		if r, _, err := parseRun(t, "/nonexistent", "--config", f); err != nil || r.Backend != "http://x:1" {
			t.Errorf("a 0644 settings file of the agent's user (%s): %v", f, err)
		}
	}
}
