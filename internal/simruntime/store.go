package simruntime

// The file the simulated engine lives in, beside the journal: one JSON line of the whole state,
// then one line a change, rewritten whole once the changes outnumber the state. A crash leaves
// the old file or the new one, and a torn last line is ignored (nobody saw it acknowledged).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// FileName is the simulated runtime's file inside a data directory.
const FileName = "sim-runtime.json"

type fileState struct {
	Next       int64                 `json:"next"`
	Containers map[string]*container `json:"containers"`
	Images     map[string]*heldImage `json:"images,omitempty"` // by normalized reference
}

// fileOp is one line after the first: a container written or removed.
type fileOp struct {
	Put      *container `json:"put,omitempty"`
	Del      string     `json:"del,omitempty"`
	Next     int64      `json:"next,omitempty"`
	PutImage *heldImage `json:"put_image,omitempty"`
	DelImage string     `json:"del_image,omitempty"`
}

// readFile reads the state line and replays the operation lines after it. A last line cut
// short by a crash mid-write is ignored: it was never acknowledged to anyone.
func readFile(path string) (fileState, int, error) {
	state := fileState{Containers: map[string]*container{}}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return state, 0, nil
	}
	if err != nil {
		return state, 0, fmt.Errorf("sim runtime: open %s: %w", path, err)
	}
	lines := bytes.Split(b, []byte("\n"))
	ops := 0
	for i, l := range lines {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if i == 0 {
			if err := json.Unmarshal(l, &state); err != nil {
				return state, 0, fmt.Errorf("sim runtime: read %s: line 1: %w", path, err)
			}
			if state.Containers == nil {
				state.Containers = map[string]*container{}
			}
			continue
		}
		var op fileOp
		if err := json.Unmarshal(l, &op); err != nil {
			if i == len(lines)-1 || (i == len(lines)-2 && len(bytes.TrimSpace(lines[len(lines)-1])) == 0) {
				break // torn last line
			}
			return state, 0, fmt.Errorf("sim runtime: read %s: line %d: %w", path, i+1, err)
		}
		ops++
		switch {
		case op.Put != nil:
			state.Containers[op.Put.ID] = op.Put
		case op.Del != "":
			delete(state.Containers, op.Del)
		case op.PutImage != nil:
			if state.Images == nil {
				state.Images = map[string]*heldImage{}
			}
			state.Images[op.PutImage.Ref] = op.PutImage
		case op.DelImage != "":
			delete(state.Images, op.DelImage)
		}
		state.Next = max(state.Next, op.Next)
	}
	return state, ops, nil
}

// save appends one operation line; once the lines outnumber the containers by far, it
// rewrites the file as one state line (temp file + rename: a crash leaves the old or the new).
// Appending keeps each change O(1) however many containers live.
func (s *Runtime) save(op fileOp) error {
	defer func() {
		close(s.changed)
		s.changed = make(chan struct{})
	}()
	if s.ops > 2*(len(s.state.Containers)+len(s.state.Images))+256 || s.ops == 0 {
		b, err := json.Marshal(s.state)
		if err != nil {
			return err
		}
		tmp := s.path + ".tmp"
		if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("sim runtime: write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, s.path); err != nil {
			return fmt.Errorf("sim runtime: write %s: %w", s.path, err)
		}
		s.ops = 1
		return nil
	}
	b, err := json.Marshal(op)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sim runtime: write %s: %w", s.path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sim runtime: write %s: %w", s.path, err)
	}
	s.ops++
	return nil
}

// Stats reads a simulated runtime's file: how many containers it ever created and how
// many it holds now (for tests proving nothing was created twice).
func Stats(dir string) (created int64, live int, err error) {
	st, _, err := readFile(filepath.Join(dir, FileName))
	return st.Next, len(st.Containers), err
}
