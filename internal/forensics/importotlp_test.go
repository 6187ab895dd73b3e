package forensics_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/forensics"
)

// importBoundMiB is the most a process importing the hostile line may hold at its peak (RSS,
// the Go runtime and the test binary included): the import keeps one log record at a time,
// never the line. Before, the same line took 2.29 GiB (75x its size).
const importBoundMiB = 64

// agentdResource opens an OTLP/JSON request of agentd's host agent-h, up to its log records.
const agentdResource = `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"agentd"}},` +
	`{"key":"service.instance.id","value":{"stringValue":"agent-h"}}]},"scopeLogs":[{"scope":{"name":"agentd.journal"},"logRecords":[`

func otlpRecord(seq int, body string) string {
	return fmt.Sprintf(`{"timeUnixNano":"1764579600000000000","body":{"stringValue":%q},"attributes":[`+
		`{"key":"agentd.seq","value":{"intValue":"%d"}},{"key":"agentd.record.type","value":{"stringValue":"cleanup_started"}},`+
		`{"key":"agentd.task.arn","value":{"stringValue":"arn:task/x"}}]}`, body, seq)
}

// writeHostileLine writes one line of 10 million empty log records (28 MiB) between two of
// agentd's records, as the review's reproduction did.
func writeHostileLine(t *testing.T) string {
	return writeFile(t, "hostile.otlp.jsonl", func(w *bufio.Writer) {
		w.WriteString(agentdResource + otlpRecord(1, "cleanup_started arn:task/x"))
		for range 10_000_000 {
			w.WriteString(",{}")
		}
		w.WriteString("," + otlpRecord(2, "cleanup_started arn:task/x") + "]}]}]}\n")
	})
}

// writeFile writes a file of the test's own through a buffer.
func writeFile(t *testing.T, name string, write func(w *bufio.Writer)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	write(w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// importInChild imports path in a child process (TestImportChild) and returns what it printed:
// how many records it imported, or its refusal, and its peak RSS.
func importInChild(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestImportChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTD_IMPORT_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return string(out)
}

// TestImportOfAHostileLineStaysWithinItsBound imports the 28 MiB line in a child process and
// holds the child's peak RSS to importBoundMiB.
func TestImportOfAHostileLineStaysWithinItsBound(t *testing.T) {
	if os.Getenv("AGENTD_IMPORT_CHILD") != "" {
		t.Skip("the child imports")
	}
	if testing.Short() {
		t.Skip("10 million records: seconds of CPU")
	}
	out := importInChild(t, writeHostileLine(t))
	var imported, peakKiB int
	if _, err := fmt.Sscanf(out, "imported %d records, peak RSS %d kB", &imported, &peakKiB); err != nil || imported != 2 {
		t.Fatalf("child output %q, want both of agentd's records imported and its peak RSS", out)
	}
	peakMiB := peakKiB >> 10
	t.Logf("peak RSS importing a 28 MiB line of 10 million records: %d MiB", peakMiB)
	if peakMiB > importBoundMiB {
		t.Fatalf("peak RSS %d MiB importing a 28 MiB line, want at most %d MiB: the import holds the line, not one record", peakMiB, importBoundMiB)
	}
}

// TestImportChild is the child of TestImportOfAHostileLineStaysWithinItsBound.
func TestImportChild(t *testing.T) {
	path := os.Getenv("AGENTD_IMPORT_CHILD")
	if path == "" {
		t.Skip("only as the child of TestImportOfAHostileLineStaysWithinItsBound")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := forensics.ImportOTLP(f, io.Discard, nil)
	if err != nil {
		fmt.Printf("refused, peak RSS %d kB: %v\n", peakRSS(t), err)
		return
	}
	fmt.Printf("imported %d records, peak RSS %d kB\n", n, peakRSS(t))
}

// peakRSS is this process's peak resident set (VmHWM). Not the parent's rusage Maxrss: Linux
// carries the forking parent's peak into an exec'd child's.
func peakRSS(t *testing.T) int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// TestImportRefusesARecordOverTheBound: a record bigger than any agentd ships is refused by
// its line and index, just over the bound, and a huge one (64 MiB) before it is read whole.
func TestImportRefusesARecordOverTheBound(t *testing.T) {
	for _, size := range []int{forensics.MaxOTLPRecord + 1, 64 << 20} {
		head := agentdResource + otlpRecord(1, "ok") + "]}]}]}\n" + agentdResource + otlpRecord(2, "ok") + `,{"body":{"stringValue":"`
		in := &countingReader{r: io.MultiReader(strings.NewReader(head), io.LimitReader(xs{}, int64(size)), strings.NewReader(`"}}]}]}]}`+"\n"))}
		_, err := forensics.ImportOTLP(in, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), "line 2, record 2") || !strings.Contains(err.Error(), "1 MiB") {
			t.Fatalf("a record of %d bytes: err %v, want it refused as over 1 MiB, named by line 2, record 2", size, err)
		}
		if in.n > int64(len(head))+2*forensics.MaxOTLPRecord {
			t.Fatalf("a record of %d bytes: %d bytes read before refusing it, want at most the bound's worth past its start", size, in.n)
		}
	}
}

// xs reads as endless x's.
type xs struct{}

func (xs) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestImportReadsEveryShapeProtojsonReads: field names as protojson writes them or as the
// proto names them, the resource after the records, nulls and unknown fields.
func TestImportReadsEveryShapeProtojsonReads(t *testing.T) {
	rec := otlpRecord(7, "cleanup_started arn:task/x")
	lines := []string{
		agentdResource + rec + "]}]}]}",
		`{"resource_logs":[{"scope_logs":[{"log_records":[` + rec + `],"schemaUrl":"x"}],"extra":{"a":[1,2,{"b":null}]},` +
			`"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"agentd"}},{"key":"service.instance.id","value":{"stringValue":"agent-j"}}]}}]}`,
		`{"resourceLogs":[{"resource":null,"scopeLogs":null}]}`,
		"",
	}
	var out bytes.Buffer
	n, err := forensics.ImportOTLP(strings.NewReader(strings.Join(lines, "\n")), &out, nil)
	if err != nil || n != 2 {
		t.Fatalf("imported %d, %v; want agent-h's and agent-j's record", n, err)
	}
	entries, err := forensics.ReadEntries(&out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Seq != 7 || e.Type != "cleanup_started" || e.Task != "arn:task/x" || e.Text != "" {
			t.Errorf("entry %+v: want seq 7, cleanup_started of arn:task/x, no details (the body's type and subject are not details)", e)
		}
	}
}

// TestImportKeepsBothOfTwoConflictingRecords: a record shipped under agent-h's id and sequence
// number 1 by someone else (another body) is written beside the real one, both marked, and the
// warning names where each was; the real one's duplicate is written once.
func TestImportKeepsBothOfTwoConflictingRecords(t *testing.T) {
	real, forged := otlpRecord(1, "cleanup_started arn:task/x"), otlpRecord(1, "cleanup_started arn:task/x forged")
	in := strings.Join([]string{
		agentdResource + real + "]}]}]}",
		agentdResource + otlpRecord(2, "") + "," + forged + "]}]}]}",
		agentdResource + real + "]}]}]}",
	}, "\n")
	var out bytes.Buffer
	var warnings []string
	n, err := forensics.ImportOTLP(strings.NewReader(in), &out, func(s string) { warnings = append(warnings, s) })
	if err != nil || n != 3 {
		t.Fatalf("imported %d, %v; want seq 1 twice (real and forged) and seq 2", n, err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "agent-h seq 1") ||
		!strings.Contains(warnings[0], "line 1 record 1") || !strings.Contains(warnings[0], "line 2 record 2") {
		t.Fatalf("warnings %q, want one naming agent-h seq 1 at line 1 record 1 and line 2 record 2", warnings)
	}
	entries, err := forensics.ReadEntries(&out)
	if err != nil {
		t.Fatal(err)
	}
	var marked []string
	for _, e := range entries {
		if e.Seq == 1 && e.Conflict != "" {
			marked = append(marked, e.Text)
		}
	}
	if strings.Join(marked, "|") != "|forged" {
		t.Fatalf("seq 1 marked versions %q, want the real one (no details) and the forged one, both marked", marked)
	}
}

// TestImportRefusesASkippedValueOverTheBound: a value the import skips (a key it does not
// read) is bounded as a record is: 8 MiB of nested arrays are refused after the bound's worth,
// not held level by level (before: 50 MiB of '[' took 1.3 GiB).
func TestImportRefusesASkippedValueOverTheBound(t *testing.T) {
	in := &countingReader{r: io.MultiReader(strings.NewReader(`{"unknown":`), io.LimitReader(brackets{}, 8<<20), strings.NewReader("\n"))}
	_, err := forensics.ImportOTLP(in, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("8 MiB of nested arrays under an unknown key: err %v, want it refused as over 1 MiB, named by line 1", err)
	}
	if in.n > 2*forensics.MaxOTLPRecord {
		t.Fatalf("%d bytes read before refusing the skipped value, want at most the bound's worth", in.n)
	}
}

// brackets reads as endless '['.
type brackets struct{}

func (brackets) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '['
	}
	return len(p), nil
}
