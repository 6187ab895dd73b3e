package event

import (
	"fmt"
	"strings"
)

// A record's one-line rendering — its type, its subject and its details — is defined here
// once: `agentd journal dump` prints it after the sequence and time, in columns, and an OTLP
// log record carries it as its body (PROTOCOL.md §5), so the two never disagree. It is never
// empty (a type and a subject always show, "-" for no subject), and everything that came from
// outside is escaped (Printable, PrintableText), so it cannot forge a line of either output.

// Subject is whom a record is about: the task ARN, and "/container" after it; "-" for none.
func Subject(task, container string) string {
	subj := "-"
	if task != "" {
		subj = Printable(task)
	}
	if container != "" {
		subj += "/" + Printable(container)
	}
	return subj
}

// Line is the record after its sequence and time: type, subject and details, padded to
// typeWidth and subjectWidth (journal dump's columns), or one space apart when both are 0
// (an OTLP body: `cleanup_started arn:task/x`).
func Line(r Record, typeWidth, subjectWidth int) string {
	return strings.TrimRight(fmt.Sprintf("%-*s %-*s %s", typeWidth, r.Type(), subjectWidth, Subject(r.Task, r.Container),
		PrintableText(Describe(r.Event))), " ")
}
