package journal

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/failpoint"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
)

// request is one Append (or one maintenance operation) waiting for the writer.
type request struct {
	recs   []event.Record
	bodies [][]byte
	op     func(tx *bolt.Tx) error // maintenance work done in the writer's commit instead of records
	done   chan error
}

// stats counts commits for metrics.
type stats struct {
	commits, records, bytes atomic.Uint64
}

// CommitStats is a snapshot of the writer's counters.
type CommitStats struct {
	Commits, Records uint64
	Bytes            uint64 // encoded record bytes committed (keys and bbolt's pages not counted)
}

// Stats reports how many commits, records and record bytes the writer has made. Every commit
// is two fdatasyncs (bbolt's data pages, then its meta page).
func (j *Journal) Stats() CommitStats {
	return CommitStats{j.commitNs.commits.Load(), j.commitNs.records.Load(), j.commitNs.bytes.Load()}
}

// Append journals records atomically and durably, assigning their sequence numbers. Time,
// Task, Container and Event are taken from each record. A record whose Seq is set was numbered
// by its appender (the engine numbers its records to apply them before they are durable): the
// commit fails unless that is the number it gets, so a caller's prediction is checked, never
// trusted. It returns the records as stored once they are fsync'd. Concurrent callers share
// one commit.
func (j *Journal) Append(ctx context.Context, recs ...event.Record) ([]event.Record, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	return j.appendWith(ctx, nil, recs)
}

// appendWith is Append with op run in the same commit before the records are put: both or
// neither.
func (j *Journal) appendWith(ctx context.Context, op func(tx *bolt.Tx) error, recs []event.Record) ([]event.Record, error) {
	if j.ro {
		return nil, fmt.Errorf("journal: append to %s: opened read-only", j.path)
	}
	// Bodies are encoded here, in the caller's goroutine, so the single writer only stamps
	// sequence numbers and checksums.
	bodies := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := event.MarshalBody(r.Event)
		if err != nil {
			return nil, fmt.Errorf("journal: append: record %d of %d: %w", i+1, len(recs), err)
		}
		bodies[i] = b
	}
	out := append([]event.Record(nil), recs...)
	req := &request{recs: out, bodies: bodies, op: op, done: make(chan error, 1)}
	if err := j.submit(ctx, req); err != nil {
		return nil, err
	}
	// The commit may still land after ctx ends: a caller that gives up must not assume it did not.
	if err := <-req.done; err != nil {
		return nil, err
	}
	return out, nil
}

// submit hands a request to the writer. The queue never blocks: it is bounded by the number
// of appenders, each of which waits for its answer.
func (j *Journal) submit(ctx context.Context, req *request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("journal: append: %w", err)
	}
	j.sendMu.RLock()
	defer j.sendMu.RUnlock()
	j.mu.Lock()
	closed := j.closed
	j.mu.Unlock()
	if closed {
		return ErrClosed
	}
	j.q.push(req)
	return nil
}

// queue holds requests for the writer. Appenders wake the writer only when it is idle or when
// the batch it lingers for is complete: two wake-ups a commit, not one per appender.
type queue struct {
	mu     sync.Mutex
	reqs   []*request
	target int           // wake the writer once this many are queued; 0: it is not waiting
	wake   chan struct{} // capacity 1
}

func newQueue() *queue { return &queue{wake: make(chan struct{}, 1)} }

func (q *queue) push(r *request) {
	q.mu.Lock()
	q.reqs = append(q.reqs, r)
	if q.target > 0 && len(q.reqs) >= q.target {
		q.target = 0
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.reqs)
}

// waitFor blocks until n requests are queued, the timer (if any) fires, or stop is closed.
func (q *queue) waitFor(n int, timeout time.Duration, stop <-chan struct{}) {
	q.mu.Lock()
	if len(q.reqs) >= n {
		q.mu.Unlock()
		return
	}
	q.target = n
	q.mu.Unlock()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-q.wake:
	case <-timer:
	case <-stop:
	}
	q.mu.Lock()
	q.target = 0
	select { // a wake-up that raced the timer is stale now
	case <-q.wake:
	default:
	}
	q.mu.Unlock()
}

// take removes the next commit's worth: a maintenance op alone, or leading appends up to
// maxRecords records.
func (q *queue) take(maxRecords int) []*request {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.reqs) == 0 {
		return nil
	}
	n, records := 1, len(q.reqs[0].recs)
	if q.reqs[0].op == nil {
		for n < len(q.reqs) && q.reqs[n].op == nil && records < maxRecords {
			records += len(q.reqs[n].recs)
			n++
		}
	}
	batch := append([]*request(nil), q.reqs[:n]...)
	rest := copy(q.reqs, q.reqs[n:])
	clear(q.reqs[rest:])
	q.reqs = q.reqs[:rest]
	return batch
}

// update runs op in a write transaction of its own, serialised with appends.
func (j *Journal) update(ctx context.Context, op func(tx *bolt.Tx) error) error {
	req := &request{op: op, done: make(chan error, 1)}
	if err := j.submit(ctx, req); err != nil {
		return err
	}
	return <-req.done
}

// writer is the only goroutine that writes. It drains whatever is queued into one bbolt
// transaction (group commit): one pair of fsyncs for many appenders. A maintenance op gets a
// commit of its own, so compaction never holds appends back for more than one commit.
//
// While a commit runs, the appenders it will release are not queued, so a naive drain settles
// into alternating half-full commits. The writer therefore expects as many requests as were
// active at the last commit (released plus still queued) and lingers for them briefly — at
// most half a commit's time, so a lone appender is never slowed and an expected appender that
// does not come costs at most that once.
func (j *Journal) writer() {
	defer close(j.done)
	expect := 1
	var linger time.Duration
	for {
		j.waitForAppends()
		if j.q.len() == 0 {
			return // stopped, and Close holds off new senders: nothing is stranded
		}
		j.q.waitFor(expect, linger, j.stop)
		batch := j.q.take(j.maxBatch)
		took := j.commit(batch)
		j.releaseWritten()
		linger = min(took/2, time.Millisecond)
		expect = 1
		if batch[0].op == nil {
			expect = min(len(batch)+j.q.len(), j.maxBatch)
		}
	}
}

// releaseWritten releases the mapping's pages once the commits since the last release have
// written Options.ReleaseEvery bytes of pages: the writer's pages are read back through the
// mapping, so what stays resident is bounded by that, not by all the agent has written. Its
// cost is one madvise over the file, once every ReleaseEvery bytes, after the appenders have
// their answers; pages still in use are read back from the page cache.
func (j *Journal) releaseWritten() {
	st := j.db.Stats()
	if written := st.TxStats.GetPageAlloc(); written-j.releasedAt >= j.releaseEvery {
		j.releaseMapped()
		j.releasedAt = written
	}
}

// skipRecordSync is false in every build but the power-loss suite's test of itself
// (syncbug.go): there, commits of records skip bbolt's fdatasyncs.
var skipRecordSync bool

func (j *Journal) commit(batch []*request) time.Duration {
	start := time.Now()
	j.mu.Lock()
	next := j.last + 1
	j.mu.Unlock()
	seq := next
	// bbolt holds keys and values until the commit: encode them all into one arena rather
	// than allocating each, sized once (a record's envelope is at most 40 bytes beside its
	// body, task and container).
	size, n := 0, 0
	for _, r := range batch {
		for i := range r.recs {
			size += 40 + len(r.bodies[i]) + len(r.recs[i].Task) + len(r.recs[i].Container)
		}
		n += len(r.recs)
	}
	arena, keys := make([]byte, 0, size), make([]byte, 0, 8*n)
	j.db.NoSync = skipRecordSync && batch[0].op == nil // only the power-loss suite's planted bug sets it
	err := j.db.Update(func(tx *bolt.Tx) error {
		if j.beforeCommit != nil {
			if err := j.beforeCommit(); err != nil {
				return err
			}
		}
		recs := tx.Bucket(bucketRecords)
		// Keys only ever grow: pack pages full instead of leaving them half empty.
		recs.FillPercent = 1.0
		for _, r := range batch {
			if r.op != nil {
				if err := r.op(tx); err != nil {
					return err
				}
			}
			for i := range r.recs {
				rec := &r.recs[i]
				if rec.Seq != 0 && rec.Seq != seq {
					return fmt.Errorf("record numbered %d by its appender, but the journal's next is %d", rec.Seq, seq)
				}
				rec.Seq = seq
				rec.Time = rec.Time.UTC()
				start := len(arena)
				arena = encodeRecord(arena, seq, rec.Time, rec.Event.Type(), rec.Task, rec.Container, r.bodies[i])
				keys = binary.BigEndian.AppendUint64(keys, seq)
				k, v := keys[len(keys)-8:len(keys):len(keys)], arena[start:len(arena):len(arena)]
				if err := recs.Put(k, v); err != nil {
					return fmt.Errorf("put record %d: %w", seq, err)
				}
				seq++
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("journal: commit to %s: %w", j.path, err)
	} else {
		j.commitNs.commits.Add(1)
		j.commitNs.records.Add(seq - next)
		j.commitNs.bytes.Add(uint64(len(arena)))
		j.mu.Lock()
		if seq > next {
			j.last = seq - 1
			close(j.changed)
			j.changed = make(chan struct{})
			j.notifyReached()
		}
		j.mu.Unlock()
	}
	took := time.Since(start)
	if err == nil {
		failpoint.Hit("journal-after-commit") // durable, but no appender has heard
	}
	for _, r := range batch {
		r.done <- err
	}
	return took
}
