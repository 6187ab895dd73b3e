package introspect

import (
	"context"
	"errors"
	"fmt"
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
	n := 0
	err = j.Iterate(from, func(rec event.Record) error {
		b, err := forensics.RecordJSON(rec)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
		if n++; n >= maxRecordsPerAnswer {
			return errEnough
		}
		return nil
	})
	_ = err // a broken connection or a full answer: the client resumes from its last seq
}
