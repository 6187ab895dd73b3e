package event

import (
	"fmt"
	"strings"
	"time"
)

// Describe renders a record's body on one line for people, e.g.
// `RUNNING → STOPPED exit=143 reason="stopped"`. The type, time and subject are the caller's
// to print; `agentd journal dump` prints them in columns before this.
func Describe(e Event) string {
	var b strings.Builder
	kv := func(k string, v any) {
		switch x := v.(type) {
		case string:
			if x == "" {
				return
			}
			if strings.ContainsAny(x, " \"=") {
				v = fmt.Sprintf("%q", x)
			}
		case []string:
			if len(x) == 0 {
				return
			}
			v = strings.Join(x, ",")
		case int:
			if x == 0 {
				return
			}
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", k, v)
	}
	switch e := e.(type) {
	case *AgentStarted:
		kv("agent", e.AgentID)
		kv("version", e.Version)
		kv("pid", e.PID)
		kv("runtime", e.Runtime)
	case *AgentStopped:
		kv("reason", e.Reason)
	case *PayloadReceived:
		kv("message", e.MessageID)
		kv("tasks", len(e.Tasks))
	case *TaskAdded:
		kv("message", e.MessageID)
		kv("family", e.Family)
		kv("desired", string(e.Desired))
		names := make([]string, len(e.Containers))
		for i, c := range e.Containers {
			names[i] = c.Name
		}
		kv("containers", names)
		for _, c := range e.Containers {
			if w := workloadSummary(c); w != "" {
				fmt.Fprintf(&b, " %s[%s]", c.Name, w)
			}
		}
	case *TaskRejected:
		kv("message", e.MessageID)
		kv("reason", e.Reason)
	case *RecordRefused:
		kv("message", e.MessageID)
		kv("refused", e.Record)
		kv("reason", e.Reason)
		kv("desired", string(e.Desired))
	case *TaskResent:
		kv("message", e.MessageID)
		kv("desired", string(e.Desired))
	case *DesiredChanged:
		kv("message", e.MessageID)
		kv("to", string(e.To))
	case *ContainerTransitioned:
		fmt.Fprintf(&b, "%s → %s", e.From, e.To)
		if e.ExitCode != nil {
			kv("exit", fmt.Sprint(*e.ExitCode))
		}
		kv("id", e.RuntimeID)
		if !e.StartedAt.IsZero() {
			kv("started", e.StartedAt.UTC().Format(time.RFC3339Nano))
		}
		kv("image", e.ImageDigest)
		if e.ImagePulled {
			kv("pulled", "yes")
		}
		kv("reason", e.Reason)
	case *TaskTransitioned:
		fmt.Fprintf(&b, "%s → %s", e.From, e.To)
		kv("reason", e.Reason)
	case *ChangesSettled:
		kv("accepted", e.Accepted)
		for _, r := range e.Rejected {
			kv("rejected", r.ID+":"+r.Error)
		}
	case *StoppedAcked:
		kv("change", e.ChangeID)
		kv("rejected", e.Rejected)
	case *ContainerRemoved:
		kv("id", e.RuntimeID)
		if e.Fence {
			kv("fence", "true")
		}
		if e.Again {
			kv("again", "true")
		}
	case *ContainerRolledBack:
		kv("gone", e.RuntimeID)
		kv("reason", e.Reason)
	case *CallStarted:
		kv("call", e.Call)
	case *CallEnded:
		kv("call", e.Call)
		kv("reason", e.Reason)
	case *HealthChanged:
		kv("health", string(e.Health))
	case *ImageRemoved:
		kv("image", e.ImageID)
		kv("digest", e.Digest)
		kv("refs", e.Refs)
		kv("reason", e.Reason)
	case *ImageReleased:
		kv("image", e.ImageID)
		kv("digest", e.Digest)
		kv("refs", e.Refs)
		kv("reason", e.Reason)
	case *SnapshotTaken:
		kv("at", fmt.Sprint(e.AtSeq))
		kv("bytes", e.Bytes)
	case *CompactionDone:
		kv("up_to", fmt.Sprint(e.UpToSeq))
		kv("records", e.Records)
		kv("tasks", len(e.Tasks))
		kv("messages", len(e.Messages))
		kv("early", len(e.Early)) // histories dropped before the retention ended (the journal budget)
		if e.RefusedUpTo > 0 {
			kv("refused_up_to", fmt.Sprint(e.RefusedUpTo))
		}
	case *ReportAttempted:
		kv("outcome", e.Outcome)
		kv("http", e.HTTPStatus)
		if e.RetryAfter > 0 {
			kv("retry_after", e.RetryAfter.String())
		}
		kv("changes", len(e.IDs))
		kv("count", e.Count)
		kv("error", e.Error)
	}
	return b.String()
}
