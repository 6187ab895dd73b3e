package introspect

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// TestSlowExportReaderDoesNotStallAppends: a client reading /v1/journal/export at 1 KB/s holds
// no read transaction (bbolt's writer waits for open ones when the file outgrows its map), and
// appends go on, one commit each, while it reads; what it finally gets is a consistent copy.
func TestSlowExportReaderDoesNotStallAppends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	task := json.RawMessage(`{"arn":"task/x","containers":[{"name":"a","image":"i","command":["` + strings.Repeat("x", 900) + `"]}]}`)
	for i := 0; i < 5; i++ { // about 500 KB
		var recs []event.Record
		for k := 0; k < 100; k++ {
			recs = append(recs, event.Record{Time: time.Now(), Event: &event.PayloadReceived{MessageID: fmt.Sprintf("m-%d-%d", i, k), Tasks: []json.RawMessage{task}}})
		}
		if _, err := j.Append(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	atExport := j.LastSeq()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = export(j, w, r) }))
	// Small socket buffers on both ends, so the kernel cannot absorb the export: the handler
	// really waits on the client.
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /v1/journal/export HTTP/1.1\r\nHost: agent\r\n\r\n")
	br := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := j.Size(); size < 256<<10 {
		t.Fatalf("journal of %d bytes: too small for the export to be slow", size)
	}
	out, _ := os.Create(filepath.Join(t.TempDir(), "export.db"))
	defer out.Close()
	readKB := func() {
		if _, err := io.CopyN(io.Discard, resp.Body, 1024); err != nil {
			t.Fatal(err)
		}
	}
	readKB() // the copy is taken: the handler writes only after it
	for second := 0; second < 3; second++ {
		if n := j.DB().Stats().OpenTxN; n != 0 {
			t.Fatalf("a slow export reader holds %d read transaction(s) open", n)
		}
		// Appends while the reader is stalled: each is one commit and returns.
		for k := 0; k < 10; k++ {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := j.Append(actx, event.Record{Time: time.Now(), Event: &event.PayloadReceived{MessageID: fmt.Sprintf("during-%d-%d", second, k)}})
			cancel()
			if err != nil {
				t.Fatalf("append while the export is read slowly: %v", err)
			}
		}
		time.Sleep(time.Second) // 1 KB/s
		readKB()
	}
	conn.Close()

	// The export a client reads at full speed is a consistent copy of the journal as it was.
	resp, err = http.Get(srv.URL + "/v1/journal/export")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		t.Fatal(err)
	}
	out.Close()
	cp, err := journal.Open(out.Name(), journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the export is not a journal: %v", err)
	}
	defer cp.Close()
	if cp.LastSeq() != atExport+30 || j.LastSeq() != atExport+30 {
		t.Fatalf("export holds records up to %d, journal %d, want %d", cp.LastSeq(), j.LastSeq(), atExport+30)
	}
}

type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}
