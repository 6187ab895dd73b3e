package benchmark

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/otlpship"
)

// shipping runs the OTLP shipper on a journal during a run, to a loopback endpoint that reads
// and accepts every request: the journal's group commit measured with shipping on, against the
// same contender with it off, in the same rounds (docs/protocol.md §5: shipping never blocks a
// commit). The shipper reads only once the commits pause, or after MaxDefer (5 s) without a
// pause, longer than a run: this measures that a burst of commits keeps the CPU. On a disk that
// bounds the commits, the shipper reads no batch during a run at all (counted at a load of 25
// on 2 cores: none in 12 runs), so where the endpoint runs does not weigh on the figure; it
// stays in this process, and does not decode, so that when it is sent to (a run that outlasts
// MaxDefer) its CPU counts against the journal rather than hiding in another process.
func shipping(ctx context.Context, j *journal.Journal) func() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	s, err := otlpship.New(j, otlpship.Config{Endpoint: otlpship.Endpoint{URL: srv.URL + "/v1/logs"}, AgentID: "bench", Log: zerolog.Nop()})
	if err != nil {
		srv.Close()
		return func() {}
	}
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	return func() { <-done; srv.Close() }
}
