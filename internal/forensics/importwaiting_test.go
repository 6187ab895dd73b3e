package forensics_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeResourceLastLine writes one line whose resource comes after 400,000 of agentd's records
// (about 50 MiB): every record must wait for it, as JSON keeps no order.
func writeResourceLastLine(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resource-last.otlp.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[` + otlpRecord(1, "cleanup_started arn:task/x"))
	for i := 2; i <= 400_000; i++ {
		w.WriteString("," + otlpRecord(i, "cleanup_started arn:task/x"))
	}
	w.WriteString(`]}],"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"agentd"}}]}}]}` + "\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImportOfRecordsWaitingForTheirResourceStaysWithinItsBound (issue 41): records whose
// resource comes after them wait for it at most MaxOTLPWaiting bytes; past that the import
// is refused naming the line and the record, in a child whose peak RSS stays within
// importBoundMiB. Before, all 400,000 records waited, held whole.
func TestImportOfRecordsWaitingForTheirResourceStaysWithinItsBound(t *testing.T) {
	if os.Getenv("AGENTD_IMPORT_CHILD") != "" {
		t.Skip("the child imports")
	}
	if testing.Short() {
		t.Skip("400,000 records: seconds of CPU")
	}
	path := writeResourceLastLine(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestImportChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTD_IMPORT_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var peakKiB int
	if _, err := fmt.Sscanf(string(out), "refused, peak RSS %d kB", &peakKiB); err != nil {
		t.Fatalf("child output %q: want the import refused", out)
	}
	if !strings.Contains(string(out), "line 1, record ") || !strings.Contains(string(out), "4 MiB of log records wait for their resource") {
		t.Fatalf("child output %q: want the refusal naming line 1, the record and the 4 MiB bound", out)
	}
	t.Logf("peak RSS refusing a line of 400,000 records before their resource: %d MiB", peakKiB>>10)
	if peakKiB>>10 > importBoundMiB {
		t.Fatalf("peak RSS %d MiB, want at most %d MiB: records waiting for their resource are not bounded", peakKiB>>10, importBoundMiB)
	}
}
