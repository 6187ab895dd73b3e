package seal

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentd/agentd/internal/protocol"
)

// SealPayload returns p with every env value of every task sealed. Everything else of a task
// is kept (re-encoded compactly, as the engine journals it anyway). The input is not modified.
func (k *Key) SealPayload(p protocol.Payload) (protocol.Payload, error) {
	out := protocol.Payload{MessageID: p.MessageID, Tasks: make([]json.RawMessage, len(p.Tasks)), ReceivedAt: p.ReceivedAt}
	for i, raw := range p.Tasks {
		s, err := k.SealRawTask(raw)
		if err != nil {
			return protocol.Payload{}, err
		}
		out.Tasks[i] = s
	}
	return out, nil
}

// SealRawTask seals the env values of one raw task as the control plane sent it.
//
// Field names are matched as encoding/json matches them (case-insensitively), so no spelling
// of "env" that would reach the runtime stays clear. What cannot be read as a task keeps its
// shape as far as validity goes: a non-string env value becomes {"sealed": …} (still not a
// string, so the task stays invalid with the same kind of reason), and a task that is not a
// JSON object becomes one sealed JSON string (still a task without an arn, skipped as before).
func (k *Key) SealRawTask(raw json.RawMessage) (json.RawMessage, error) {
	out, _, err := k.sealRawTask(raw, false)
	return out, err
}

// sealRawTask seals a raw task's env values; with onlyClear, values already sealed are kept
// (migration of a journal that may be partly sealed), and changed says whether any was not.
func (k *Key) sealRawTask(raw json.RawMessage, onlyClear bool) (json.RawMessage, bool, error) {
	w := walker{k: k, onlyClear: onlyClear}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	obj, isObj := any(nil), false
	if err := dec.Decode(&v); err == nil && dec.More() == false {
		obj, isObj = v.(map[string]any)
	}
	if !isObj {
		if str, ok := v.(string); ok && onlyClear && IsSealed(str) {
			return raw, false, nil
		}
		s, err := k.Seal("task", string(raw))
		if err != nil {
			return nil, false, err
		}
		b, err := json.Marshal(s)
		return b, true, err
	}
	task := obj.(map[string]any)
	for key, val := range task {
		if strings.EqualFold(key, "containers") {
			nv, err := w.under(val, false)
			if err != nil {
				return nil, false, err
			}
			task[key] = nv
		}
	}
	if onlyClear && !w.changed {
		return raw, false, nil
	}
	b, err := json.Marshal(task)
	return b, w.changed, err
}

type walker struct {
	k         *Key
	onlyClear bool
	changed   bool
}

func (w *walker) seal(name, v string) (string, error) {
	if w.onlyClear && IsSealed(v) {
		return v, nil
	}
	w.changed = true
	return w.k.Seal(name, v)
}

// under walks v and seals the value of every "env" key (any case) it finds.
func (w *walker) under(v any, isEnv bool) (any, error) {
	if isEnv {
		return w.envValue(v)
	}
	switch t := v.(type) {
	case []any:
		for i, e := range t {
			nv, err := w.under(e, false)
			if err != nil {
				return nil, err
			}
			t[i] = nv
		}
	case map[string]any:
		for key, e := range t {
			nv, err := w.under(e, strings.EqualFold(key, "env"))
			if err != nil {
				return nil, err
			}
			t[key] = nv
		}
	}
	return v, nil
}

func (w *walker) envValue(v any) (any, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		for name, e := range t {
			if s, ok := e.(string); ok {
				sealed, err := w.seal(name, s)
				if err != nil {
					return nil, err
				}
				t[name] = sealed
				continue
			}
			if m, ok := e.(map[string]any); ok && len(m) == 1 {
				if inner, ok := m["sealed"].(string); ok && w.onlyClear && IsSealed(inner) {
					continue
				}
			}
			b, _ := json.Marshal(e)
			w.changed = true
			sealed, err := w.k.Seal(name, string(b))
			if err != nil {
				return nil, err
			}
			t[name] = map[string]any{"sealed": sealed}
		}
		return t, nil
	default:
		// Not an object: the task is invalid either way; keep it a string, sealed.
		if str, ok := t.(string); ok {
			return w.seal("env", str)
		}
		b, _ := json.Marshal(t)
		w.changed = true
		return w.k.Seal("env", string(b))
	}
}

func equalFold(a, b string) bool { return strings.EqualFold(a, b) }
