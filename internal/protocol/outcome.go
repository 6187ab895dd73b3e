package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Outcome classifies an answer to a state-change report (PROTOCOL.md §3, "Answers").
type Outcome string

const (
	Settled      Outcome = "settled"      // 200: the listed ids are settled
	Throttled    Outcome = "throttled"    // 429: nothing settled; wait at least Retry-After
	BadRequest   Outcome = "bad_request"  // 400: the request as a whole is malformed
	TooLarge     Outcome = "too_large"    // 413: the body is over MaxRequestBody; send fewer changes
	Unauthorized Outcome = "unauthorized" // 401, 403: credentials refused
	ServerError  Outcome = "server_error" // 5xx or another status: unknown
	Network      Outcome = "network"      // timeout or broken connection: unknown
)

// ReportResult is what one report came to. Only Settled settles anything.
type ReportResult struct {
	Outcome    Outcome
	HTTPStatus int
	Accepted   []string
	Rejected   []Rejection
	RetryAfter time.Duration // for Throttled: the server's floor (0 when it gave none)
	Err        error         // the cause, for every outcome but Settled
	ReceivedAt time.Time     // when the answer reached this host (zero: unknown or none came)
}

// MaxRetryAfter caps a report's Retry-After so an absurd value cannot park the reports for days.
const MaxRetryAfter = 10 * time.Minute

// ClassifyReport reads an answer to POST /state-changes exactly as the table of PROTOCOL.md
// §3 says. Only a 200 whose body reads as the protocol's answer settles anything; a 200 that
// cannot be read settles nothing (the changes are sent again, their ids make that safe).
func ClassifyReport(status int, retryAfter string, body []byte, now time.Time) ReportResult {
	r := ReportResult{HTTPStatus: status}
	switch {
	case status == 200:
		var ok StateChangesResponse
		if err := json.Unmarshal(body, &ok); err != nil {
			r.Outcome, r.Err = ServerError, fmt.Errorf("200 answer is not JSON: %w", err)
			return r
		}
		for _, rj := range ok.Rejected {
			if rj.ID == "" {
				r.Outcome, r.Err = ServerError, errors.New("200 answer rejects a change without id")
				return r
			}
		}
		r.Outcome, r.Accepted, r.Rejected = Settled, ok.Accepted, ok.Rejected
	case status == 429:
		r.Outcome, r.Err = Throttled, errors.New("throttled")
		r.RetryAfter = ParseRetryAfter(retryAfter, now, MaxRetryAfter)
	case status == 400:
		var e ErrorResponse
		_ = json.Unmarshal(body, &e)
		r.Outcome, r.Err = BadRequest, fmt.Errorf("request refused as malformed: %s", ShortenReason(e.Error))
	case status == 413:
		r.Outcome, r.Err = TooLarge, fmt.Errorf("request body over %d bytes refused (HTTP 413)", MaxRequestBody)
	case status == 401 || status == 403:
		r.Outcome, r.Err = Unauthorized, fmt.Errorf("credentials refused (HTTP %d)", status)
	default:
		r.Outcome, r.Err = ServerError, fmt.Errorf("HTTP %d", status)
	}
	return r
}
