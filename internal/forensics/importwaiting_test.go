package forensics_test

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// writeResourceLastLine writes one line whose resource comes after 400,000 of agentd's records
// (about 50 MiB): every record must wait for it, as JSON keeps no order.
func writeResourceLastLine(t *testing.T) string {
	return writeFile(t, "resource-last.otlp.jsonl", func(w *bufio.Writer) {
		w.WriteString(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[` + otlpRecord(1, "cleanup_started arn:task/x"))
		for i := 2; i <= 400_000; i++ {
			w.WriteString("," + otlpRecord(i, "cleanup_started arn:task/x"))
		}
		w.WriteString(`]}],"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"agentd"}}]}}]}` + "\n")
	})
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
	out := importInChild(t, writeResourceLastLine(t))
	var peakKiB int
	if _, err := fmt.Sscanf(out, "refused, peak RSS %d kB", &peakKiB); err != nil {
		t.Fatalf("child output %q: want the import refused", out)
	}
	if !strings.Contains(out, "line 1, record ") || !strings.Contains(out, "4 MiB of log records wait for their resource") {
		t.Fatalf("child output %q: want the refusal naming line 1, the record and the 4 MiB bound", out)
	}
	t.Logf("peak RSS refusing a line of 400,000 records before their resource: %d MiB", peakKiB>>10)
	if peakKiB>>10 > importBoundMiB {
		t.Fatalf("peak RSS %d MiB, want at most %d MiB: records waiting for their resource are not bounded", peakKiB>>10, importBoundMiB)
	}
}
