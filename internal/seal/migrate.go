package seal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// MetaKeyID is the journal meta entry naming the key its values are sealed under. A journal
// without it was written before sealing existed (or is new): Setup migrates it.
const MetaKeyID = "seal_key_id"

// Setup loads the key file at keyPath for the open journal j, creating it on a first start,
// and seals every value j still holds in the clear (a journal written before sealing). It
// refuses — with an error naming the file — a missing or different key while j holds values
// sealed under another, unless newKey (the operator accepts that tasks whose values were
// sealed under the lost key stop when they are created).
//
// When scrub is true, values were rewritten or the journal was never sealed: the caller must
// close j, run journal.Scrub on its file (so no clear bytes stay in free pages), reopen it and
// call Commit. Otherwise Setup has committed already.
func Setup(ctx context.Context, j *journal.Journal, keyPath string, newKey bool) (k *Key, scrub bool, err error) {
	sealedUnder, err := j.Meta(MetaKeyID)
	if err != nil {
		return nil, false, fmt.Errorf("seal: reading the journal's key id: %w", err)
	}
	k, err = LoadKey(keyPath)
	switch {
	case errors.Is(err, ErrNoKey) && sealedUnder != "" && !newKey:
		return nil, false, fmt.Errorf("seal key %s is missing, but the journal's env values are sealed under key %s: restore that file (it is never part of an export), or start with --new-seal-key to make a new key: tasks whose values were sealed under the lost key are then stopped when they are created, nothing else is lost", keyPath, sealedUnder)
	case errors.Is(err, ErrNoKey):
		if k, err = CreateKey(keyPath); err != nil {
			return nil, false, err
		}
	case err != nil:
		return nil, false, err
	}
	if sealedUnder != "" && sealedUnder != k.ID() && !newKey {
		return nil, false, fmt.Errorf("seal key %s holds key %s, but the journal's env values are sealed under key %s: restore the right file, or start with --new-seal-key to accept this one (tasks whose values were sealed under the other key are then stopped when they are created)", keyPath, k.ID(), sealedUnder)
	}
	if sealedUnder != "" || j.LastSeq() == 0 {
		// Already sealed, or new: commit (a no-op when the id is the same).
		if sealedUnder != k.ID() {
			if err := Commit(ctx, j, k); err != nil {
				return nil, false, err
			}
		}
		return k, false, nil
	}
	if _, err := Migrate(ctx, j, k); err != nil {
		return nil, false, err
	}
	return k, true, nil
}

// Commit records in j that its values are sealed under k.
func Commit(ctx context.Context, j *journal.Journal, k *Key) error {
	if err := j.SetMeta(ctx, MetaKeyID, k.ID()); err != nil {
		return fmt.Errorf("seal: recording key id in the journal: %w", err)
	}
	return nil
}

// MigrateResult counts what Migrate sealed.
type MigrateResult struct{ Records, Snapshots int }

// Migrate seals every env value j holds in the clear: the raw tasks of payload_received, the
// specs of task_added and the tasks of every snapshot. It is idempotent (values already sealed
// are kept), so a migration cut short by a crash is simply run again.
func Migrate(ctx context.Context, j *journal.Journal, k *Key) (MigrateResult, error) {
	recs, snaps, err := j.Rewrite(ctx, func(r event.Record) (event.Record, bool, error) {
		return k.sealRecord(r)
	}, func(_ uint64, data []byte) ([]byte, bool, error) {
		st, err := fsm.Restore(data)
		if err != nil {
			return nil, false, nil // unreadable: recovery skips it; keep it as found
		}
		changed := false
		for _, t := range st.Tasks {
			for _, c := range t.Containers {
				env, ch, err := k.SealEnv(c.Env)
				if err != nil {
					return nil, false, err
				}
				c.Env, changed = env, changed || ch
			}
		}
		if !changed {
			return nil, false, nil
		}
		b, err := st.Snapshot()
		return b, true, err
	})
	if err != nil {
		return MigrateResult{}, fmt.Errorf("seal: sealing the clear env values of %s (written before sealing) stopped: %w; the file is damaged: see agentd journal verify --file %s (no record was changed past the damage)", j.Path(), err, j.Path())
	}
	return MigrateResult{Records: recs, Snapshots: snaps}, nil
}

// sealRecord seals the clear env values of one record; changed says whether there were any.
func (k *Key) sealRecord(r event.Record) (event.Record, bool, error) {
	switch e := r.Event.(type) {
	case *event.PayloadReceived:
		ne := *e
		ne.Tasks = make([]json.RawMessage, len(e.Tasks))
		changed := false
		for i, raw := range e.Tasks {
			s, ch, err := k.sealRawTask(raw, true)
			if err != nil {
				return r, false, err
			}
			ne.Tasks[i], changed = s, changed || ch
		}
		r.Event = &ne
		return r, changed, nil
	case *event.TaskAdded:
		ne := *e
		ne.Containers = make([]event.ContainerSpec, len(e.Containers))
		changed := false
		for i, c := range e.Containers {
			env, ch, err := k.SealEnv(c.Env)
			if err != nil {
				return r, false, err
			}
			c.Env = env
			ne.Containers[i], changed = c, changed || ch
		}
		r.Event = &ne
		return r, changed, nil
	}
	return r, false, nil
}

// OpenRecord returns r with its env values opened, for forensics run locally with the key
// (agentd journal … --unseal). Values that do not open are left sealed.
func (k *Key) OpenRecord(r event.Record) event.Record {
	switch e := r.Event.(type) {
	case *event.PayloadReceived:
		ne := *e
		ne.Tasks = make([]json.RawMessage, len(e.Tasks))
		for i, raw := range e.Tasks {
			ne.Tasks[i] = k.openRawTask(raw)
		}
		r.Event = &ne
	case *event.TaskAdded:
		ne := *e
		ne.Containers = make([]event.ContainerSpec, len(e.Containers))
		for i, c := range e.Containers {
			if len(c.Env) > 0 {
				env := make(map[string]string, len(c.Env))
				for name, v := range c.Env {
					if o, err := k.Open(name, v); err == nil {
						v = o
					}
					env[name] = v
				}
				c.Env = env
			}
			ne.Containers[i] = c
		}
		r.Event = &ne
	}
	return r
}

// openRawTask opens the env values of a raw task that holds well-formed ones.
func (k *Key) openRawTask(raw json.RawMessage) json.RawMessage {
	var task map[string]any
	if json.Unmarshal(raw, &task) != nil {
		return raw
	}
	for key, cs := range task {
		list, ok := cs.([]any)
		if !ok || !equalFold(key, "containers") {
			continue
		}
		for _, c := range list {
			cm, ok := c.(map[string]any)
			if !ok {
				continue
			}
			for ck, env := range cm {
				em, ok := env.(map[string]any)
				if !ok || !equalFold(ck, "env") {
					continue
				}
				for name, v := range em {
					if s, ok := v.(string); ok {
						if o, err := k.Open(name, s); err == nil {
							em[name] = o
						}
					}
				}
			}
		}
	}
	b, err := json.Marshal(task)
	if err != nil {
		return raw
	}
	return b
}
