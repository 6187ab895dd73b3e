package simulation

import (
	"time"

	"github.com/agentd/agentd/internal/submit"
)

func engineSubmitPolicy(seed uint64) submit.Policy {
	return submit.Policy{Seed: seed, Max: 20 * time.Second, SlowRetry: 10 * time.Second}
}
