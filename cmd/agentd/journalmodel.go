package main

// `agentd journal verify --model`: the journal read by the independent model of the protocol
// (internal/model) as well, so an operator can check a production journal after an incident
// against a reading that shares no code with the agent's own. A violation is printed naming
// its record and rule, and makes the command exit non-zero.

import (
	"fmt"

	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/model"
)

// verifyModel runs the model over j when on; nil when off or when the journal keeps every rule.
func verifyModel(on bool, j *journal.Journal, asJSON bool) error {
	if !on {
		return nil
	}
	rep, err := model.CheckJournal(j)
	if err != nil {
		return err
	}
	if asJSON {
		type violation struct {
			Seq       uint64 `json:"seq"`
			Type      string `json:"type"`
			Task      string `json:"task,omitempty"`
			Container string `json:"container,omitempty"`
			Rule      string `json:"rule"`
			What      string `json:"what"`
		}
		out := struct {
			Records    int         `json:"records"`
			Tasks      int         `json:"tasks"`
			Violations []violation `json:"violations"`
		}{Records: rep.Records, Tasks: rep.Tasks, Violations: []violation{}}
		for _, v := range rep.Violations {
			out.Violations = append(out.Violations, violation{v.Seq, v.Type.String(), v.Task, v.Container, string(v.Rule), v.What})
		}
		if err := printJSON(out); err != nil {
			return err
		}
	} else if len(rep.Violations) == 0 {
		fmt.Printf("model: %d records, %d tasks: every rule of the protocol model holds\n", rep.Records, rep.Tasks)
	} else {
		fmt.Printf("model: %d records, %d tasks: %d violations\n", rep.Records, rep.Tasks, len(rep.Violations))
		for _, v := range rep.Violations {
			fmt.Printf("  %s\n", v)
		}
	}
	if len(rep.Violations) > 0 {
		return fmt.Errorf("verify --model: %d violations of the protocol model", len(rep.Violations))
	}
	return nil
}
