package introspect

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentd/agentd/internal/journal"
)

// exportStall is how long one write of an export may wait for the client: a client that reads
// at all keeps its export going, one that stopped reading is cut off.
const exportStall = 30 * time.Second

// export serves GET /v1/journal/export: a consistent copy of the journal, taken into an
// unlinked file beside it in one short read transaction and then streamed from there, so a
// slow client never holds a transaction open and never stalls the journal's writer.
func export(j *journal.Journal, w http.ResponseWriter, r *http.Request) error {
	f, n, err := j.CopyToFile(filepath.Dir(j.Path()))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	rc := http.NewResponseController(w)
	buf := make([]byte, 16<<10)
	for {
		m, rerr := f.Read(buf)
		if m > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(exportStall))
			if _, err := w.Write(buf[:m]); err != nil {
				return fmt.Errorf("%w: %v", errSlowClient, err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
