package seal

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/testrig"
)

const secret = "hunter2-planted-secret"

func newKey(t *testing.T) *Key {
	t.Helper()
	k, err := CreateKey(filepath.Join(t.TempDir(), KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpensUnderItsNameOnly(t *testing.T) {
	k := newKey(t)
	s, err := k.Seal("DB_PASSWORD", secret)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s, secret) || !IsSealed(s) || !strings.Contains(s, k.ID()) {
		t.Fatalf("sealed value %q: want the prefix and key id, no clear text", s)
	}
	if got, err := k.Open("DB_PASSWORD", s); err != nil || got != secret {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := k.Open("OTHER", s); err == nil {
		t.Fatal("a value moved to another env name opened")
	}
	if got, _ := k.Open("PORT", "8080"); got != "8080" {
		t.Fatalf("a clear value from an old journal: got %q", got)
	}
	// A value that merely looks sealed is sealed again and comes back exactly.
	tricky := Prefix + "deadbeef:xyz"
	s2, _ := k.Seal("X", tricky)
	if got, err := k.Open("X", s2); err != nil || got != tricky {
		t.Fatalf("Open(Seal(%q)) = %q, %v", tricky, got, err)
	}
}

func TestAnotherKeyIsNamed(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	s, _ := k1.Seal("A", secret)
	_, err := k2.Open("A", s)
	if !errors.Is(err, ErrOtherKey) || !strings.Contains(err.Error(), k2.Path()) || strings.Contains(err.Error(), secret) {
		t.Fatalf("err = %v: want ErrOtherKey naming the key file, no value", err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFileName)
	if _, err := LoadKey(path); !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), path) {
		t.Fatalf("missing key: %v", err)
	}
	k, err := CreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", st.Mode().Perm())
	}
	k2, err := LoadKey(path)
	if err != nil || k2.ID() != k.ID() {
		t.Fatalf("reload: %v, id %s vs %s", err, k2.ID(), k.ID())
	}
	if _, err := CreateKey(path); err == nil {
		t.Fatal("CreateKey overwrote an existing key")
	}
	os.Chmod(path, 0o644)
	if _, err := LoadKey(path); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("world-readable key: %v", err)
	}
	os.Chmod(path, 0o600)
	link := filepath.Join(dir, "link.key")
	os.Symlink(path, link)
	if _, err := LoadKey(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlinked key: %v", err)
	}
	if _, err := CreateKey(filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(dir, "victim"), filepath.Join(dir, "planted"))
	if _, err := CreateKey(filepath.Join(dir, "planted")); err == nil {
		t.Fatal("CreateKey wrote through a planted symlink")
	}
	if _, err := os.Stat(filepath.Join(dir, "victim")); err == nil {
		t.Fatal("the symlink's target was created")
	}
	if os.Geteuid() == 0 { // a key another user owns (and so could have written) is not the agent's
		other := filepath.Join(dir, "other.key")
		if _, err := CreateKey(other); err != nil {
			t.Fatal(err)
		}
		os.Chown(other, 65534, 65534)
		if _, err := LoadKey(other); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") || !strings.Contains(err.Error(), other) {
			t.Fatalf("a key of uid 65534: %v", err)
		}
	}
	os.WriteFile(filepath.Join(dir, "bad.key"), []byte("garbage"), 0o600)
	if _, err := LoadKey(filepath.Join(dir, "bad.key")); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged key: %v", err)
	}
}

// TestPayloadSealing: every spelling of env that encoding/json would read is sealed; the
// task's meaning (valid or not, its arn, its other fields) is unchanged.
func TestPayloadSealing(t *testing.T) {
	k := newKey(t)
	big := strings.Repeat("s", 60<<10) + secret // within the 64 KiB limit in the clear
	tasks := []string{
		`{"arn":"task/1","desired_status":"RUNNING","containers":[{"name":"a","image":"busybox","env":{"PW":"` + secret + `","PORT":"8080"},"x_unknown":{"keep":1}}]}`,
		`{"arn":"task/2","desired_status":"RUNNING","Containers":[{"name":"a","image":"busybox","ENV":{"PW":"` + secret + `"}}]}`,
		`{"arn":"task/3","desired_status":"RUNNING","containers":[{"name":"a","image":"busybox","env":{"PW":42,"Q":"` + secret + `"}}]}`,
		`{"arn":"task/4","desired_status":"RUNNING","containers":[{"name":"a","image":"busybox","env":"PW=` + secret + `"}]}`,
		`not json ` + secret,
		`{"arn":"task/6","desired_status":"RUNNING","containers":[{"name":"a","image":"busybox","env":{"BIG":"` + big + `"}}]}`,
	}
	p := protocol.Payload{MessageID: "m1", ReceivedAt: time.Unix(1_800_000_000, 42)}
	for _, s := range tasks {
		p.Tasks = append(p.Tasks, json.RawMessage(s))
	}
	sp, err := k.SealPayload(p)
	if err != nil {
		t.Fatal(err)
	}
	if !sp.ReceivedAt.Equal(p.ReceivedAt) {
		t.Errorf("sealed payload received at %v; want the poll's arrival, %v (the fleet's burst counts from it)", sp.ReceivedAt, p.ReceivedAt)
	}
	for i, raw := range sp.Tasks {
		if strings.Contains(string(raw), secret) {
			t.Errorf("task %d: secret in the clear: %s", i, raw)
		}
		before, after := protocol.DecodeTask(p.Tasks[i]), protocol.DecodeTask(raw)
		if before.ARN != after.ARN || (before.Invalid == "") != (after.Invalid == "") {
			t.Errorf("task %d: meaning changed: arn %q→%q invalid %q→%q", i, before.ARN, after.ARN, before.Invalid, after.Invalid)
		}
		if after.Task != nil && after.Invalid == "" {
			for _, c := range after.Task.Containers {
				env, err := k.OpenEnv(c.Env)
				if err != nil {
					t.Fatalf("task %d: %v", i, err)
				}
				want := protocol.DecodeTask(p.Tasks[i]).Task.Containers[0].Env
				for n, v := range want {
					if env[n] != v {
						t.Errorf("task %d env %s: opened %.20q, want %.20q", i, n, env[n], v)
					}
				}
			}
		}
	}
	if !strings.Contains(string(sp.Tasks[0]), `"x_unknown":{"keep":1}`) || !strings.Contains(string(sp.Tasks[0]), `"PORT":"agentd-sealed:v1:`) {
		t.Errorf("other fields lost or names not in the clear: %s", sp.Tasks[0])
	}
	if protocol.SealedPrefix != Prefix {
		t.Fatalf("protocol.SealedPrefix %q != seal.Prefix %q", protocol.SealedPrefix, Prefix)
	}
}

type fakeRuntime struct {
	runtime.Runtime
	got          []runtime.CreateSpec
	neverStarted []string
}

func (f *fakeRuntime) NeverStarted(id string) { f.neverStarted = append(f.neverStarted, id) }

func (f *fakeRuntime) Create(_ context.Context, s runtime.CreateSpec) (string, error) {
	f.got = append(f.got, s)
	return "id", nil
}

func TestOpeningRuntime(t *testing.T) {
	k, other := newKey(t), newKey(t)
	inner := &fakeRuntime{}
	rt := OpeningRuntime{Runtime: inner, Key: k}
	s, _ := k.Seal("PW", secret)
	if _, err := rt.Create(context.Background(), runtime.CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "app", Env: map[string]string{"PW": s, "OLD": "clear"}}}); err != nil {
		t.Fatal(err)
	}
	if got := inner.got[0].Container.Env; got["PW"] != secret || got["OLD"] != "clear" {
		t.Fatalf("runtime got env %v", got)
	}
	s2, _ := other.Seal("PW", secret)
	_, err := rt.Create(context.Background(), runtime.CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "app", Env: map[string]string{"PW": s2}}})
	if err == nil || !strings.Contains(err.Error(), "container app") || !strings.Contains(err.Error(), k.Path()) || strings.Contains(err.Error(), secret) {
		t.Fatalf("err = %v: want the container and key file named, no value", err)
	}
	if len(inner.got) != 1 {
		t.Fatal("the runtime was called with a value that did not open")
	}
	// The daemon's engine holds this wrapper: what it tells the runtime must reach it (a
	// never-started container's bind descriptors are let go only then).
	rt.NeverStarted("id")
	if len(inner.neverStarted) != 1 {
		t.Fatal("NeverStarted did not reach the runtime through the wrapper")
	}
}

func TestSealingControlPlane(t *testing.T) {
	k := newKey(t)
	in := protocol.Payload{MessageID: "m", Tasks: []json.RawMessage{json.RawMessage(`{"arn":"a","containers":[{"env":{"K":"` + secret + `"}}]}`)}}
	inner := &testrig.ControlPlane{Payloads: func(context.Context, time.Duration) ([]protocol.Payload, error) {
		return []protocol.Payload{in}, nil
	}}
	cp := SealingControlPlane{Inner: inner, Key: k}
	out, err := cp.Poll(context.Background(), 0)
	if err != nil || len(out) != 1 || out[0].MessageID != "m" || strings.Contains(string(out[0].Tasks[0]), secret) {
		t.Fatalf("Poll = %v, %v", out, err)
	}
	if !strings.Contains(string(in.Tasks[0]), secret) {
		t.Fatal("the inner payload was modified")
	}
}
