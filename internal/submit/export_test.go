package submit

import "time"

// What the tests read of the submitter's insides; the engine never needs it.

// Held is the ids of the changes held after the control plane refused each alone.
func (s *Submitter) Held() []string {
	out := make([]string, 0, len(s.isolate.held))
	for id := range s.isolate.held {
		out = append(out, id)
	}
	return out
}

// RetryWindow is how far past Retry-After the next retry after a 429 is spread.
func (s *Submitter) RetryWindow() time.Duration { return s.retry.window }
