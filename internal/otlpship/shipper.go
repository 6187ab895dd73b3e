package otlpship

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
)

// §5's batch limits.
const (
	MaxBatchRecords = 512
	MaxBatchBytes   = 1 << 20
)

// PositionKey is the journal meta key holding the shipping position: the last sequence number
// whose fate is settled (shipped, or announced by a shipped gap).
const PositionKey = "otlp_shipped"

// ScopeName is the instrumentation scope of every shipped record.
const ScopeName = "agentd.journal"

// maxRetryAfter caps a server's Retry-After: a typo of a day must not silence shipping.
const maxRetryAfter = time.Hour

// Config is a shipper's setup. Zero durations take the defaults noted.
type Config struct {
	Endpoint   Endpoint
	AgentID    string            // service.instance.id
	Version    string            // service.version
	HostName   string            // host.name
	Resource   map[string]string // OTEL_RESOURCE_ATTRIBUTES; the four above win over it
	Timeout    time.Duration     // one request (default 10 s)
	MinBackoff time.Duration     // first retry wait (default 500 ms), doubling to MaxBackoff
	MaxBackoff time.Duration     // (default 30 s); each wait spread ±50% (internal/jitter)
	Seed       uint64            // the spread's generator (0: random)
	// Linger is how long new records may wait for a fuller batch (default 1 s, the OTel SDK's
	// log batch delay; negative: none). Fewer, fuller requests keep shipping's share of the CPU
	// small while the agent commits fast; a full batch goes at once.
	Linger time.Duration
	// CPUShare bounds the share of one core building batches may take (default 0.05): after
	// each batch the shipper rests for as long again as the batch took to build, times
	// (1/CPUShare − 1). An agent committing faster than that is shipped with a lag that the
	// lag metrics show, and its commits keep their CPU: shipping never costs the agent.
	CPUShare float64
	// MaxDefer bounds how long a batch waits for the journal's writer to pause before it is
	// read (default 5 s; negative: it never waits). A burst of commits is shipped after it,
	// not during it, so its appenders keep the CPU; a writer that has not paused for MaxDefer
	// is shipped during its commits, at CPUShare: shipping falls behind a burst, never stops.
	MaxDefer time.Duration
	// PersistEvery bounds how often the position is written (default 1 s; negative: after
	// every batch). Between writes a crash resends what was shipped: at least once.
	PersistEvery time.Duration
	// Health reports the shipping problem ("" once shipping works): a degraded state, never
	// an unhealthy agent.
	Health func(problem string)
	Log    zerolog.Logger
	Now    func() time.Time
}

// Stats are the shipper's counters (also exported as metrics).
type Stats struct {
	Shipped   uint64 // journal records delivered (2xx)
	Retried   uint64 // attempts that will be tried again
	Dropped   uint64 // journal records in batches refused for good (4xx)
	Gaps      uint64 // gap records delivered
	Rejected  uint64 // records a partial success said it rejected
	Position  uint64 // the persisted-or-about-to-be shipping position
	OldestLag time.Duration
}

// Shipper ships one journal. Run it in a goroutine of its own; it owns nothing the agent's
// loop needs.
type Shipper struct {
	cfg    Config
	j      *journal.Journal
	client *http.Client
	res    *resourcepb.Resource
	room   int // bytes a batch's records may take, after the request's fixed part
	env    envelope
	enc    *encoder     // Run's own
	rng    *rand.Rand   // the spread of Run's retry waits (Run's own)
	recs   []byte       // the batch being read: encoded log_records fields (Run's own)
	body   *requestBody // the last batch's request, reused once the HTTP client is done with it
	// busySince is when Run first found the writer busy without a pause since (zero: it
	// paused); Run's own.
	busySince time.Time
	// wakeups counts the times Run woke up to look at the journal: once a batch while records
	// come faster than Linger, never once a commit (TestTheShipperWakesOnceABatch).
	wakeups atomic.Uint64

	mu        sync.Mutex
	stats     Stats
	oldest    time.Time // time of the oldest record not yet settled (zero: caught up)
	pending   *[2]uint64
	persisted uint64
	lastSave  time.Time
}

// New prepares a shipper; nothing is sent until Run.
func New(j *journal.Journal, cfg Config) (*Shipper, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.CPUShare <= 0 || cfg.CPUShare > 1 {
		cfg.CPUShare = 0.05
	}
	if cfg.Linger == 0 {
		cfg.Linger = time.Second
	}
	if cfg.MaxDefer == 0 {
		cfg.MaxDefer = 5 * time.Second
	}
	if cfg.PersistEvery == 0 {
		cfg.PersistEvery = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Health == nil {
		cfg.Health = func(string) {}
	}
	client, err := cfg.Endpoint.client(cfg.Timeout)
	if err != nil {
		return nil, err
	}
	s := &Shipper{cfg: cfg, j: j, client: client, res: resource(cfg), enc: newEncoder(), rng: jitter.Rand(cfg.Seed)}
	s.env = newEnvelope(s.res, s.scope())
	fixed := proto.Size(s.request(nil))
	s.room = MaxBatchBytes - fixed - 64 // the scope's length prefixes
	return s, nil
}

// resource is §5's resource: service.name, service.version, service.instance.id, host.name,
// plus OTEL_RESOURCE_ATTRIBUTES (which cannot override the four: receivers dedupe by the id).
func resource(cfg Config) *resourcepb.Resource {
	own := []*commonpb.KeyValue{
		{Key: "service.name", Value: str("agentd")},
		{Key: "service.version", Value: str(cfg.Version)},
		{Key: "service.instance.id", Value: str(cfg.AgentID)},
		{Key: "host.name", Value: str(cfg.HostName)},
	}
	r := &resourcepb.Resource{Attributes: own}
	keys := make([]string, 0, len(cfg.Resource))
	for k := range cfg.Resource {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		taken := false
		for _, kv := range own {
			taken = taken || kv.Key == k
		}
		if !taken {
			r.Attributes = append(r.Attributes, &commonpb.KeyValue{Key: clip(k), Value: str(clip(cfg.Resource[k]))})
		}
	}
	return r
}

// request is the request holding recs as a message; what is sent is its encoding
// (envelope.request), which TestEncodedRecordsAreLogRecordsMarshalled holds equal to it.
func (s *Shipper) request(recs []*logspb.LogRecord) *collogspb.ExportLogsServiceRequest {
	return &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		Resource:  s.res,
		ScopeLogs: []*logspb.ScopeLogs{{Scope: s.scope(), LogRecords: recs}},
	}}}
}

func (s *Shipper) scope() *commonpb.InstrumentationScope {
	return &commonpb.InstrumentationScope{Name: ScopeName, Version: s.cfg.Version}
}

// Stats returns the counters.
func (s *Shipper) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if !s.oldest.IsZero() {
		st.OldestLag = s.cfg.Now().Sub(s.oldest)
	}
	return st
}

// LagRecords is how many committed records are not yet settled.
func (s *Shipper) LagRecords() uint64 {
	last := s.j.LastSeq()
	s.mu.Lock()
	defer s.mu.Unlock()
	if last <= s.stats.Position {
		return 0
	}
	return last - s.stats.Position
}

// batch is one request's worth: records first..last of the journal (gaps included) settle
// together.
type batch struct {
	body       *requestBody // the encoded request
	n          int          // log records in it
	last       uint64       // the highest sequence number the batch settles
	journalN   int          // journal records in it (gap records excluded)
	oldestTime time.Time
}

var errFull = errors.New("batch full")

// Run ships until ctx ends. It returns nil on cancellation, after writing the position.
func (s *Shipper) Run(ctx context.Context) error {
	pos, err := s.loadPosition()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.stats.Position, s.persisted = pos, pos
	// The first write comes PersistEvery after the start, not at the first batch: a commit of
	// its own, and an appender's commit waits behind it.
	s.lastSave = s.cfg.Now()
	s.mu.Unlock()
	defer s.savePosition(true)
	for {
		changed := s.j.Changed()
		if s.j.LastSeq() <= pos && s.pending == nil {
			s.setOldest(time.Time{})
			s.savePosition(true) // caught up: a crash while idle resends nothing
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				s.wakeups.Add(1)
				continue
			}
		}
		if !s.linger(ctx, pos) || !s.yieldToCommits(ctx) {
			return nil
		}
		began := time.Now()
		b, err := s.read(pos)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, journal.ErrClosed) {
				return nil
			}
			s.cfg.Log.Error().Err(err).Msg("otlp: reading the journal")
			s.cfg.Health("reading the journal: " + err.Error())
			if !sleep(ctx, jitter.Spread(s.rng, s.cfg.MaxBackoff)) {
				return nil
			}
			continue
		}
		if b.n == 0 { // nothing readable yet: wait for the next commit, never spin
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				s.wakeups.Add(1)
			}
			continue
		}
		s.setOldest(b.oldestTime)
		delivered, err := s.deliver(ctx, b, began)
		if err != nil {
			return nil // ctx ended mid-delivery: the batch is shipped again next time
		}
		s.settle(b, delivered)
		pos = b.last
		s.savePosition(false)
	}
}

// linger waits, up to Linger, until a full batch is committed past pos; false when ctx ends.
// It wakes once, when the batch is full or the time is up, not at every commit: on a busy
// agent a commit comes every few milliseconds, and each wake-up would take the CPU from the
// appenders the commit has just released.
func (s *Shipper) linger(ctx context.Context, pos uint64) bool {
	if s.cfg.Linger < 0 || s.pending != nil {
		return true
	}
	full, withdraw := s.j.NotifyAt(pos + MaxBatchRecords)
	defer withdraw()
	t := time.NewTimer(s.cfg.Linger)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-full:
	}
	s.wakeups.Add(1)
	return true
}

// yieldToCommits waits until the journal's writer pauses (journal.Idle), for at most what is
// left of MaxDefer since it was first found busy; false when ctx ends. On a busy host the
// reading and encoding of a batch are CPU its appenders would take: they come after the burst.
func (s *Shipper) yieldToCommits(ctx context.Context) bool {
	idle := s.j.Idle()
	select {
	case <-idle:
		s.busySince = time.Time{}
		return true
	default:
	}
	if s.cfg.MaxDefer < 0 {
		return true
	}
	now := time.Now()
	if s.busySince.IsZero() {
		s.busySince = now
	}
	left := s.busySince.Add(s.cfg.MaxDefer).Sub(now)
	if left <= 0 {
		return true // busy for MaxDefer without a pause: ship during the commits
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-idle:
		s.busySince = time.Time{}
	case <-t.C:
	}
	s.wakeups.Add(1)
	return true
}

// read builds the next batch after pos, encoded: a pending refusal's gap, then records, each
// compaction cut among them announced by a gap, up to the batch limits. One read transaction,
// released before anything is sent; the records are encoded from their stored bytes within it
// (encoder), an event decoded only when its body was not met lately.
func (s *Shipper) read(pos uint64) (batch, error) {
	var b batch
	now := s.cfg.Now()
	last := s.j.LastSeq() // before the read: every record up to it is committed and visible
	expect := pos + 1
	size := 0
	s.recs = s.recs[:0]
	gap := func(from, to uint64, why string) {
		s.recs = appendGap(s.recs, GapRecord(from, to, why, now))
		b.n++
	}
	if s.pending != nil {
		gap(s.pending[0], s.pending[1], "refused by the OTLP endpoint")
		expect = s.pending[1] + 1
	}
	const cutWhy = "removed by compaction before it was shipped"
	err := s.j.IterateRawRange(expect, 0, func(r journal.RawRecord) error {
		gapN := 0
		if r.Seq > expect {
			gapN = 1
		}
		if b.n+gapN+1 > MaxBatchRecords {
			return errFull
		}
		mark := len(s.recs)
		if gapN > 0 {
			gap(expect, r.Seq-1, cutWhy)
		}
		var n int
		var err error
		if s.recs, n, err = s.enc.appendRecord(s.recs, r, now); err != nil {
			return err
		}
		if n += 4; size+n > s.room && b.n > gapN {
			s.recs = s.recs[:mark] // the record, and the gap before it, go in the next batch
			b.n -= gapN
			return errFull
		}
		b.n++
		b.journalN++
		if b.oldestTime.IsZero() {
			b.oldestTime = r.Time
		}
		size += n
		expect = r.Seq + 1
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return b, err
	}
	if err == nil && expect <= last && b.n < MaxBatchRecords {
		gap(expect, last, cutWhy) // the tail up to the last commit was compacted away
		expect = last + 1
	}
	b.last = expect - 1
	if b.n > 0 {
		if s.body == nil || s.body.open.Load() != 0 {
			s.body = &requestBody{}
		}
		s.body.buf = s.env.request(s.body.buf[:0], s.recs)
		b.body = s.body
	}
	return b, nil
}

// deliver sends a batch until the endpoint settles it: true when accepted (2xx), false when
// refused for good (another 4xx). It returns an error only when ctx ends.
func (s *Shipper) deliver(ctx context.Context, b batch, began time.Time) (bool, error) {
	body := b.body
	// Rest before sending, in proportion to the work the batch took (reading, mapping,
	// encoding): the shipper's CPU stays within its share however fast records are committed.
	work := time.Since(began)
	if !sleep(ctx, time.Duration(float64(work)*(1/s.cfg.CPUShare-1))) {
		return false, ctx.Err()
	}
	bo := jitter.NewBackoff(s.cfg.MinBackoff, s.cfg.MaxBackoff, s.rng)
	for {
		status, retryAfter, rejected, err := s.post(ctx, body)
		var wait time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return false, ctx.Err()
		case err != nil:
			s.problem(fmt.Sprintf("sending to %s: %v", s.cfg.Endpoint.URL, err))
			wait = bo.NextBackOff()
		case status >= 200 && status < 300:
			if rejected > 0 {
				s.cfg.Log.Warn().Int64("rejected", rejected).Uint64("through_seq", b.last).Msg("otlp: the endpoint accepted the batch partially (not retried)")
				s.add(func(st *Stats) { st.Rejected += uint64(rejected) })
			}
			s.cfg.Health("")
			return true, nil
		case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
			s.problem(fmt.Sprintf("%s answered %d", s.cfg.Endpoint.URL, status))
			// Retry-After is a floor, spread above it so a fleet told the same value does not
			// come back together.
			wait = max(bo.NextBackOff(), retryAfter+jitter.Spread(s.rng, retryAfter/10))
		case status >= 400 && status < 500:
			s.cfg.Log.Error().Int("http", status).Int("records", b.n).Uint64("through_seq", b.last).
				Msg("otlp: the endpoint refused a batch for good; it is dropped and announced as a gap")
			s.problem(fmt.Sprintf("%s refused a batch with %d", s.cfg.Endpoint.URL, status))
			return false, nil
		default: // 5xx, and a 1xx/3xx (redirects are not followed)
			s.problem(fmt.Sprintf("%s answered %d", s.cfg.Endpoint.URL, status))
			wait = bo.NextBackOff()
		}
		s.add(func(st *Stats) { st.Retried++ })
		if !sleep(ctx, wait) {
			return false, ctx.Err()
		}
	}
}

func (s *Shipper) problem(p string) {
	s.cfg.Log.Warn().Msg("otlp: " + p + "; retrying")
	s.cfg.Health(p)
}

// post makes one attempt. err is a transport failure (refused, reset, timeout).
func (s *Shipper) post(ctx context.Context, body *requestBody) (status int, retryAfter time.Duration, rejected int64, err error) {
	rd := body.reader()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.Endpoint.URL, rd)
	if err != nil {
		rd.Close()
		return 0, 0, 0, err
	}
	req.ContentLength = int64(len(body.buf))
	req.GetBody = func() (io.ReadCloser, error) { return body.reader(), nil }
	for k, v := range s.cfg.Endpoint.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	// An answer is small; a hostile endpoint's endless one must not cost memory.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	retryAfter = protocol.ParseRetryAfter(resp.Header.Get("Retry-After"), s.cfg.Now(), maxRetryAfter)
	if resp.StatusCode/100 == 2 && len(raw) > 0 {
		var out collogspb.ExportLogsServiceResponse
		if proto.Unmarshal(raw, &out) == nil && out.GetPartialSuccess() != nil {
			rejected = out.GetPartialSuccess().GetRejectedLogRecords()
		}
	}
	return resp.StatusCode, retryAfter, rejected, nil
}

// settle moves the position past a batch: delivered, or refused and to be announced as a gap
// (merged with a pending one) in the next batch.
func (s *Shipper) settle(b batch, delivered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gaps := uint64(b.n - b.journalN)
	if delivered {
		s.stats.Shipped += uint64(b.journalN)
		s.stats.Gaps += gaps
		s.pending = nil
		s.stats.Position = b.last
		return
	}
	s.stats.Dropped += uint64(b.journalN)
	from := s.stats.Position + 1
	s.pending = &[2]uint64{from, b.last}
	// The position stays: until the gap is delivered, a restart sends the batch again.
}

func (s *Shipper) add(f func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.stats)
}

func (s *Shipper) setOldest(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oldest = t
}

func (s *Shipper) loadPosition() (uint64, error) {
	v, err := s.j.Meta(PositionKey)
	if err != nil || v == "" {
		return 0, err
	}
	pos, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("otlp: journal meta %s=%q: not a sequence number", PositionKey, v)
	}
	if last := s.j.LastSeq(); pos > last {
		// A position past the journal's end belongs to another history: ship this one whole.
		s.cfg.Log.Warn().Uint64("position", pos).Uint64("last_seq", last).Msg("otlp: shipping position past the journal's end; shipping from the start")
		return 0, nil
	}
	return pos, nil
}

// savePosition writes the position when it moved and PersistEvery has passed (or when final).
// The write is one small commit of its own, at most once per PersistEvery: records' commits
// are never held behind shipping.
func (s *Shipper) savePosition(final bool) {
	s.mu.Lock()
	pos, now := s.stats.Position, s.cfg.Now()
	due := pos != s.persisted && (final || s.cfg.PersistEvery < 0 || now.Sub(s.lastSave) >= s.cfg.PersistEvery)
	s.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.j.SetMeta(ctx, PositionKey, strconv.FormatUint(pos, 10)); err != nil {
		s.cfg.Log.Warn().Err(err).Msg("otlp: saving the shipping position (records since the last save may be shipped again)")
		return
	}
	s.mu.Lock()
	s.persisted, s.lastSave = pos, now
	s.mu.Unlock()
}

// sleep waits d, or until ctx ends (false). Retry waits come spread (internal/jitter).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
