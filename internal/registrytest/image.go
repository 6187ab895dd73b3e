package registrytest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var testbox struct {
	once sync.Once
	bin  []byte
	err  error
}

// testboxBinary builds testdata/testbox once per test binary (a static binary, as `make
// testbox-image` builds it) and keeps it in memory: no file outlives the build.
func testboxBinary() ([]byte, error) {
	testbox.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			testbox.err = err
			return
		}
		dir, err := os.MkdirTemp("", "registrytest-testbox-")
		if err != nil {
			testbox.err = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "testbox")
		cmd := exec.Command("go", "build", "-o", out, "./testdata/testbox")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			testbox.err = fmt.Errorf("build testbox: %v: %s", err, b)
			return
		}
		testbox.bin, testbox.err = os.ReadFile(out)
	})
	return testbox.bin, testbox.err
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// layerOf is a layer holding one file at the root.
func layerOf(file string, mode int64, content []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A fixed time: the same content is the same layer, push after push.
	hdr := &tar.Header{Name: file, Mode: mode, Size: int64(len(content)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// Testbox is a runnable image of the testbox program (entrypoint /testbox), with a second
// layer holding /marker: images with different markers have different digests, and so have
// two test processes' images of one marker (processMark).
func Testbox(t testing.TB, marker string) v1.Image {
	t.Helper()
	bin, err := testboxBinary()
	if err != nil {
		t.Fatal(err)
	}
	box, err := layerOf("testbox", 0o755, bin)
	if err != nil {
		t.Fatal(err)
	}
	mark, err := layerOf("marker", 0o644, []byte(marker+"\n"+processMark+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, box, mark)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{"/testbox"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// processMark sets this process's images apart: the engine is shared by the packages' tests,
// which run in parallel, and by other checkouts' (an image of cmd/agentd's "pinned" was the
// same image as internal/docker's, which that test's cleanup removed by id mid-test).
var processMark = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

// pushTransport marks the test's own pushes, which pass the registry's faults.
type pushTransport struct{}

func (pushTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(pushHeader, "1")
	return http.DefaultTransport.RoundTrip(req)
}

// Push puts img under repoTag ("app:1") and returns the reference to pull and the image's
// manifest digest ("sha256:…").
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) (ref, digest string) {
	t.Helper()
	ref = r.Addr + "/" + repoTag
	nref, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	user, pass := r.user, r.pass
	r.mu.Unlock()
	auth := authn.Anonymous
	if user != "" {
		auth = &authn.Basic{Username: user, Password: pass}
	}
	if err := remote.Write(nref, img, remote.WithAuth(auth), remote.WithTransport(pushTransport{})); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref, d.String()
}

// BlobBytes is the size of the image's largest layer as sent (for timing a throttled pull).
func BlobBytes(t testing.TB, img v1.Image) int64 {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range layers {
		s, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		n = max(n, s)
	}
	return n
}
