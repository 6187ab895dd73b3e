// Package forensics reads a journal after an incident: what happened, in what order, what the
// agent believed at any sequence number or time, one task's life as a timeline, every
// invariant checked offline, and the figures an operator sizes a fleet by.
//
// It promises never to write to the journal it reads, never to hang on a journal a running
// agent holds (it says who holds it and how to read it anyway), and to answer with the very
// projection code the daemon runs — replay is not a second implementation.
package forensics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/agentd/agentd/internal/journal"
)

// Source says which journal to read: a data directory, a bare file, or a running agent's
// introspection API (whose consistent export is read).
type Source struct {
	DataDir string
	File    string
	Live    string // a running agent's API: base URL (http://127.0.0.1:51678) or unix:/path
	// TokenFile holds the bearer token of an agent whose API requires one (--api-token-file).
	TokenFile string
}

func (s Source) path() string {
	if s.File != "" {
		return s.File
	}
	return filepath.Join(s.DataDir, journal.FileName)
}

// Open opens the journal read-only. A live source is exported to a temporary file first; the
// returned close function removes it.
func Open(ctx context.Context, s Source) (*journal.Journal, func(), error) {
	path := s.path()
	var tmp string
	if s.Live != "" {
		f, err := os.CreateTemp("", "agentd-journal-*.db")
		if err != nil {
			return nil, nil, err
		}
		f.Close()
		tmp = f.Name()
		if err := Export(ctx, s, tmp); err != nil {
			os.Remove(tmp)
			return nil, nil, err
		}
		path = tmp
	}
	j, err := journal.Open(path, journal.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if err != nil {
		if tmp != "" {
			os.Remove(tmp)
		}
		if errors.Is(err, journal.ErrLocked) {
			return nil, nil, fmt.Errorf("%w\nThe running agent holds the file. Read a consistent copy instead:\n"+
				"  agentd journal export --live http://127.0.0.1:51678 --out copy.db   (the agent's --listen address)\n"+
				"  agentd journal <command> --file copy.db\nor pass --live http://127.0.0.1:51678 to this command.", err)
		}
		return nil, nil, err
	}
	return j, func() {
		j.Close()
		if tmp != "" {
			os.Remove(tmp)
		}
	}, nil
}

// Export writes a consistent copy of the journal to out: from a running agent's API when the
// source is live, else from the file (which no agent may hold).
func Export(ctx context.Context, s Source, out string) error {
	if out == "" {
		return errors.New("--out: missing")
	}
	if s.Live == "" {
		j, closeJ, err := Open(ctx, s)
		if err != nil {
			return err
		}
		defer closeJ()
		return writeAtomically(out, func(w io.Writer) error { _, err := j.CopyTo(w); return err })
	}
	client, base := APIClient(s.Live)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/journal/export", nil)
	if err != nil {
		return fmt.Errorf("--live %q: %w", s.Live, err)
	}
	if err := s.Authorize(req); err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("--live %s: %w", s.Live, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("--live %s: export answered HTTP %d", s.Live, resp.StatusCode)
	}
	return writeAtomically(out, func(w io.Writer) error { _, err := io.Copy(w, resp.Body); return err })
}

func writeAtomically(path string, write func(io.Writer) error) error {
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
