package simulation

// What the control plane asks of the agent: tasks drawn from the seed (commands, pull
// policies, health checks and dependencies, invalid and poison payloads).

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

var commands = [][]string{{"run"}, {"sleep", "1s"}, {"sleep", "3s", "2"}, {"exit", "1"}, {"sleep", "500ms", "7"}, {"sleep", "10s"}}

// poison queues a payload that breaks the protocol's limits: a task the agent must record
// STOPPED with a short reason naming the field (a 3.5 KB desired_status, 65 KiB of env, 11
// containers), or skip without a word (an ARN past 256 bytes, or with a space). Whatever it
// holds, the payload is acknowledged and stalls nothing (checked at the end).
func (s *sim) poison() {
	s.poisoned++
	arn := fmt.Sprintf("task/poison-%02d", s.poisoned)
	task := map[string]any{"arn": arn, "desired_status": "RUNNING",
		"containers": []map[string]any{{"name": "app", "image": "img", "command": []string{"run"}}}}
	kind := s.rng.IntN(5)
	switch kind {
	case 0:
		task["desired_status"] = strings.Repeat("RUNNING", 500) // 3.5 KB: past the 1 KiB reason limit if quoted whole
	case 1:
		task["containers"] = []map[string]any{{"name": "app", "image": "img", "env": map[string]string{"BIG": strings.Repeat("x", 65<<10)}}}
	case 2:
		var cs []map[string]any
		for i := 0; i < 11; i++ {
			cs = append(cs, map[string]any{"name": fmt.Sprintf("c%d", i), "image": "img"})
		}
		task["containers"] = cs
	case 3:
		arn = "task/" + strings.Repeat("p", 300) + fmt.Sprint(s.poisoned)
		task["arn"] = arn
	case 4:
		arn = fmt.Sprintf("task/poison %d", s.poisoned)
		task["arn"] = arn
	}
	raw, _ := json.Marshal(task)
	if err := s.cp.AddTask(agentID, protocol.Task{ARN: arn}, raw); err != nil {
		s.fail("poison %s: %v", arn, err)
		return
	}
	if kind >= 3 {
		s.unkeyed[arn] = true
	} else {
		s.assigned = append(s.assigned, arn)
		s.expected[arn] = 0
	}
	s.log("control plane queues poison %d (%d bytes)", kind, len(raw))
}

func (s *sim) assign() {
	i := len(s.assigned)
	arn := fmt.Sprintf("task/sim-%02d", i)
	t := protocol.Task{ARN: arn, DesiredStatus: "RUNNING"}
	n := 1 + s.rng.IntN(2)
	for c := 0; c < n; c++ {
		ct := protocol.Container{Name: fmt.Sprintf("c%d", c), Image: "img", Command: commands[s.rng.IntN(len(commands))]}
		if c > 0 && s.rng.IntN(2) == 0 {
			f := false
			ct.Essential = &f
		}
		if s.rng.IntN(15) == 0 {
			ct.Image = "img-fail-pull"
		}
		switch s.pulls.IntN(6) {
		case 0:
			ct.Image = hostImage // on the host already: never the agent's to remove
			ct.PullPolicy = []string{event.PullNever, event.PullIfNotPresent, event.PullAlways}[s.pulls.IntN(3)]
			if s.o.Seed%2 == 0 && ct.PullPolicy != event.PullNever {
				ct.Image = hostTag // pulled, yet the host's image (pinned by digest): never the agent's either
			}
		case 1:
			ct.Image = "img-b"
		case 2:
			ct.PullPolicy = event.PullAlways
		}
		t.Containers = append(t.Containers, ct)
	}
	if n == 2 && s.rng.IntN(3) == 0 {
		// PROTOCOL.md §4: a health check on c0 (one that passes, or one that fails), and c1
		// waiting on a condition of c0 that the check and c0's essentiality allow.
		c0, c1 := &t.Containers[0], &t.Containers[1]
		words := []string{"CMD", "/testbox", "probe"}
		if s.rng.IntN(3) == 0 {
			words = []string{"CMD", "/testbox", "exit", "1"}
		}
		cond := event.DependStart
		switch s.rng.IntN(3) {
		case 0:
			c0.HealthCheck = &event.HealthCheck{Command: words, IntervalS: 1, Retries: 2}
			cond = event.DependHealthy
		case 1:
			f := false
			c0.Essential = &f
			cond = []string{event.DependComplete, event.DependSuccess}[s.rng.IntN(2)]
		}
		c1.DependsOn = []event.Dependency{{Container: c0.Name, Condition: cond}}
		if s.deps.IntN(2) == 0 {
			// Some deadlines run out before c0 meets the condition (a failing check, a slow
			// pull, a crash), some after: c1 never starts, or starts in time.
			timeout := s.deps.IntN(20)
			c0.StartTimeoutS = &timeout
		}
	}
	switch s.rng.IntN(12) {
	case 0:
		t.DesiredStatus = "STOPPED"
	case 1:
		t.Containers = nil // invalid: recorded STOPPED, never run
	}
	if protocol.Validate(&t) == nil {
		s.expected[arn] = len(t.Containers)
	}
	if err := s.cp.AddTask(agentID, t, nil); err != nil {
		s.fail("assign %s: %v", arn, err)
	}
	s.assigned = append(s.assigned, arn)
	s.log("control plane assigns %s (%d containers, desired %s)", arn, len(t.Containers), t.DesiredStatus)
}
