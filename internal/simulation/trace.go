package simulation

// The trace: every step's line, hashed as it is written (equal hashes, equal runs: the
// replay's proof), the last lines kept, and on failure the lines about the task at fault.

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/model"
)

func (s *sim) log(format string, a ...any) {
	line := fmt.Sprintf("%s ", s.clock.Now().Format("15:04:05.000")) + fmt.Sprintf(format, a...)
	h := fnv.New64a()
	h.Write([]byte(line))
	s.hash = s.hash*31 + h.Sum64()
	s.all++
	s.full = append(s.full, line)
	s.trace = append(s.trace, line)
	if len(s.trace) > s.o.MaxTrace {
		s.trace = s.trace[len(s.trace)-s.o.MaxTrace:]
	}
}

func (s *sim) fail(format string, a ...any) {
	if s.res.Failure == "" {
		s.res.Failure = fmt.Sprintf(format, a...)
		s.log("FAILURE: %s", s.res.Failure)
		s.res.Focus = focus(s.full, s.res.Failure)
		// And what the journal holds of that task: its story, record by record.
		if task := taskInFailure.FindString(s.res.Failure); task != "" && s.j != nil {
			s.res.Focus = append(s.res.Focus, "the journal's records of "+task+":")
			_ = s.j.TaskRecords(task, func(r event.Record) error {
				s.res.Focus = append(s.res.Focus, fmt.Sprintf("  #%d %s %s %s %s", r.Seq, r.Time.Format("15:04:05.000"), r.Type(), r.Container, event.Describe(r.Event)))
				return nil
			})
		}
		if s.j != nil {
			rep, err := model.Read(s.j) // half-way: not a whole journal to count
			for _, v := range rep.Violations {
				s.res.Model = append(s.res.Model, v.String())
			}
			if err != nil {
				s.res.Model = append(s.res.Model, err.Error())
			}
		}
	}
}

func describe(in engine.Input) string {
	switch in := in.(type) {
	case engine.ActionResult:
		s := in.Action.Key().String()
		if in.Result.Kind != fsm.Succeeded {
			s += " " + string(in.Result.Kind)
		}
		return s
	case engine.ReportInput:
		return fmt.Sprintf("report of %d changes: %s", len(in.Sent), in.Result.Outcome)
	case engine.ExitInput:
		return "exit " + in.Exit.ID
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T", in)
}

var taskInFailure = regexp.MustCompile(`task/sim-[0-9]+`)

// focus cuts a failing run's trace down to what a reader needs: the lines about the task the
// failure names, and the faults and crashes (which concern every task).
func focus(lines []string, failure string) []string {
	task := taskInFailure.FindString(failure)
	var out []string
	for _, l := range lines {
		if (task != "" && strings.Contains(l, task+" ")) || (task != "" && strings.Contains(l, task+"/")) ||
			strings.Contains(l, "CRASH") || strings.Contains(l, "throttling") || strings.Contains(l, "connection breaks") ||
			strings.Contains(l, "answer lost") || strings.Contains(l, "FAILURE") || strings.Contains(l, "faults stop") {
			out = append(out, l)
		}
	}
	return out
}
