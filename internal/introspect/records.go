package introspect

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
)

// maxRecordsPerAnswer bounds one answer of /v1/journal/records; the client asks again.
const maxRecordsPerAnswer = 5000

var errEnough = errors.New("enough")

// records serves GET /v1/journal/records?from=N&wait=S: the records from N on as JSON lines,
// waiting up to S seconds (at most 60) for one when there are none yet — what
// `agentd journal dump --follow --live` reads.
func records(j *journal.Journal, w http.ResponseWriter, r *http.Request) {
	from, err := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
	if err != nil || from == 0 {
		http.Error(w, "from: want a sequence number ≥ 1", http.StatusBadRequest)
		return
	}
	wait, _ := strconv.Atoi(r.URL.Query().Get("wait"))
	wait = min(max(wait, 0), 60)
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(wait)*time.Second)
	defer cancel()
	_ = j.WaitFor(ctx, from-1) // returns at once when there is something
	w.Header().Set("Content-Type", "application/x-ndjson")
	// Read into memory first and write after the read transaction ends: a slow client must
	// never hold one open (it would stall the journal's writer when the file grows).
	var buf bytes.Buffer
	n := 0
	err = j.Iterate(from, func(rec event.Record) error {
		b, err := forensics.RecordJSON(rec)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
		if n++; n >= maxRecordsPerAnswer || buf.Len() >= maxBytesPerAnswer {
			return errEnough
		}
		return nil
	})
	_, _ = w.Write(buf.Bytes())
	_ = err // a full answer: the client resumes from its last seq
}

// maxBytesPerAnswer bounds the memory one answer of /v1/journal/records takes.
const maxBytesPerAnswer = 4 << 20
