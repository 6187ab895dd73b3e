package journal

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The subject index has two buckets:
//
//	tasks:   task ARN → the sequence number of the task's first record (its index id)
//	by-task: index id (8 bytes) + sequence number (8 bytes) → nothing
//
// Keying by-task by the task's first record rather than by its ARN keeps the entries of tasks
// that started together on the same pages: a group commit of many tasks' records dirties a few
// index pages instead of one random page per task, which would cost more than the records. An
// ARN is written once, when its task first appears.

// indexKey is a by-task key.
func indexKey(id, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 16), id)
	return binary.BigEndian.AppendUint64(k, seq)
}

// maxIndexCache bounds the writer's memory of recent tasks' index ids; past it the cache is
// dropped and refilled from the tasks bucket.
const maxIndexCache = 65536

// indexWriter adds index entries inside a commit. Ids of tasks first seen in this commit are
// kept apart until the commit succeeds, so a failed commit leaves the cache truthful.
type indexWriter struct {
	tasks, byTask *bolt.Bucket
	cache, fresh  map[string]uint64
}

func (w *indexWriter) add(task string, seq uint64) error {
	id, ok := w.cache[task]
	if !ok {
		id, ok = w.fresh[task]
	}
	if !ok {
		if v := w.tasks.Get([]byte(task)); len(v) == 8 {
			id = binary.BigEndian.Uint64(v)
		} else {
			id = seq
			if err := w.tasks.Put([]byte(task), binary.BigEndian.AppendUint64(nil, id)); err != nil {
				return fmt.Errorf("index task %q: %w", task, err)
			}
		}
		w.fresh[task] = id
	}
	if err := w.byTask.Put(indexKey(id, seq), nil); err != nil {
		return fmt.Errorf("index record %d: %w", seq, err)
	}
	return nil
}

// commitCache folds the ids learnt in a successful commit into the cache.
func (w *indexWriter) commitCache() map[string]uint64 {
	if w.cache == nil || len(w.cache)+len(w.fresh) > maxIndexCache {
		w.cache = make(map[string]uint64, len(w.fresh))
	}
	for k, v := range w.fresh {
		w.cache[k] = v
	}
	return w.cache
}

// taskIndexID looks up a task's index id.
func taskIndexID(tx *bolt.Tx, task string) (uint64, bool) {
	v := tx.Bucket(bucketTasks).Get([]byte(task))
	if len(v) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

// indexHas reports whether record seq of task is indexed.
func indexHas(tx *bolt.Tx, task string, seq uint64) bool {
	id, ok := taskIndexID(tx, task)
	return ok && tx.Bucket(bucketByTask).Get(indexKey(id, seq)) != nil
}

// indexRemove deletes record seq of task from the index, and the task's entry once it has no
// records left.
func indexRemove(tx *bolt.Tx, task string, seq uint64) error {
	id, ok := taskIndexID(tx, task)
	if !ok {
		return nil
	}
	b := tx.Bucket(bucketByTask)
	if err := b.Delete(indexKey(id, seq)); err != nil {
		return err
	}
	prefix := indexKey(id, 0)[:8]
	if k, _ := b.Cursor().Seek(prefix); k == nil || string(k[:8]) != string(prefix) {
		return tx.Bucket(bucketTasks).Delete([]byte(task))
	}
	return nil
}
