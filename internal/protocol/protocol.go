// Package protocol is the wire contract with the control plane (docs/protocol.md, version
// 1): the JSON shapes both sides exchange and the rules a task must keep. Both the agent and the
// reference control plane use it, so they cannot drift apart.
//
// It promises that decoding never panics and that every rule a task breaks is named in the
// error (field and value), so an invalid task can be recorded STOPPED with a useful reason.
package protocol

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/distribution/reference"

	"github.com/agentd/agentd/internal/event"
)

// Limits from PROTOCOL.md §1 and §3 (version 1.1).
const (
	MaxTasksPerPayload   = 100
	MaxContainersPerTask = 10
	MaxEnvBytes          = 64 << 10
	MaxPollBody          = 4 << 20
	MaxChangesPerRequest = 100
	MaxWaitSeconds       = 60
	MaxARNLength         = 256
	MaxImageLength       = 512
	MaxCommandBytes      = 64 << 10
	MaxReasonBytes       = 1 << 10 // a state change's reason; the agent shortens longer ones
	MaxRequestBody       = 1 << 20 // a state-change report's body; a larger one is answered 413
)

var containerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// PollResponse is the answer to GET /v1/agents/{agent}/payloads.
type PollResponse struct {
	Payloads []Payload `json:"payloads"`
}

// Payload is one message of tasks. Tasks stay raw until each is validated on its own, so one
// malformed task does not cost the others.
type Payload struct {
	MessageID string            `json:"message_id"`
	Tasks     []json.RawMessage `json:"tasks"`
	// ReceivedAt is when the answer that brought it reached this host (zero: unknown), which
	// on a busy host is well before the agent read it. Never on the wire.
	ReceivedAt time.Time `json:"-"`
}

// Task is a task as the control plane sends it.
type Task struct {
	ARN           string      `json:"arn"`
	Family        string      `json:"family,omitempty"`
	Version       string      `json:"version,omitempty"`
	DesiredStatus string      `json:"desired_status"`
	Containers    []Container `json:"containers"`
}

// Container is a container as the control plane sends it. Only these fields ever reach a
// runtime; unknown fields are ignored.
type Container struct {
	Name      string            `json:"name"`
	Image     string            `json:"image"`
	Command   []string          `json:"command,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Essential *bool             `json:"essential,omitempty"` // absent means essential

	// PROTOCOL.md 1.1 §4, checked by Rules.validateContainer (container.go).
	Entrypoint           []string            `json:"entrypoint,omitempty"`
	WorkingDir           string              `json:"working_dir,omitempty"`
	User                 string              `json:"user,omitempty"`
	Labels               map[string]string   `json:"labels,omitempty"`
	CPUShares            int64               `json:"cpu_shares,omitempty"`
	MemoryMiB            int64               `json:"memory_mib,omitempty"`
	MemoryReservationMiB int64               `json:"memory_reservation_mib,omitempty"`
	PidsLimit            int64               `json:"pids_limit,omitempty"`
	Ports                []event.PortMapping `json:"ports,omitempty"`
	Mounts               []event.Mount       `json:"mounts,omitempty"`
	StopSignal           string              `json:"stop_signal,omitempty"`
	StopTimeoutS         *int                `json:"stop_timeout_s,omitempty"`
	HealthCheck          *event.HealthCheck  `json:"health_check,omitempty"`
	DependsOn            []event.Dependency  `json:"depends_on,omitempty"`
	StartTimeoutS        *int                `json:"start_timeout_s,omitempty"` // PROTOCOL.md 1.2 §4
	Log                  *event.LogConfig    `json:"log,omitempty"`
	PullPolicy           string              `json:"pull_policy,omitempty"`
}

// AcksRequest acknowledges payloads.
type AcksRequest struct {
	MessageIDs []string `json:"message_ids"`
}

// StateChange is one change reported to the control plane.
type StateChange struct {
	ID        string    `json:"id"`
	TaskARN   string    `json:"task_arn"`
	Container string    `json:"container,omitempty"`
	Status    string    `json:"status,omitempty"` // absent on a health change
	ExitCode  *int      `json:"exit_code,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	// NetworkBindings: on a container's RUNNING, the ports actually bound (PROTOCOL.md §4).
	NetworkBindings []event.NetworkBinding `json:"network_bindings,omitempty"`
	// Health, instead of a status: a change of a container's health check verdict, or of its
	// task's (the worst of its essential containers'), PROTOCOL.md §4.
	Health string `json:"health,omitempty"`
}

// StateChangesRequest is the body of POST /v1/agents/{agent}/state-changes.
type StateChangesRequest struct {
	Changes []StateChange `json:"changes"`
}

// Rejection is a change the control plane rejected for good.
type Rejection struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

// StateChangesResponse is the 200 answer.
type StateChangesResponse struct {
	Accepted []string    `json:"accepted"`
	Rejected []Rejection `json:"rejected"`
}

// ErrorResponse is the body of a 400.
type ErrorResponse struct {
	Error string `json:"error"`
}

// Decoded is one raw task read as far as it goes: the ARN when there is a valid one, the task
// when it keeps every rule, else the reason it does not.
//
// ARN is "" when the task has none or one that breaks the ARN rule: such a task is logged and
// skipped, never started, never reported. Invalid is at most MaxReasonBytes. For an invalid
// task, Task.Containers keeps only the containers safe to name in reports: valid, unique names,
// at most MaxContainersPerTask of them.
type Decoded struct {
	ARN     string
	Task    *Task
	Desired event.Status
	Invalid string // non-empty: the rule broken, naming the field
}

// DecodeTask reads and checks one raw task under the default Rules (no bind mounts allowed).
func DecodeTask(raw json.RawMessage) Decoded { return Rules{}.DecodeTask(raw) }

// DecodeTask reads and checks one raw task under these rules.
func (r Rules) DecodeTask(raw json.RawMessage) Decoded {
	var t Task
	if err := json.Unmarshal(raw, &t); err != nil {
		// Salvage the ARN, so the task can still be recorded STOPPED with the reason.
		var probe struct {
			ARN string `json:"arn"`
		}
		_ = json.Unmarshal(raw, &probe)
		if err := ValidateARN(probe.ARN); err != nil {
			return Decoded{Invalid: ShortenReason(err.Error())}
		}
		return Decoded{ARN: probe.ARN, Invalid: ShortenReason("task is not a valid task object: " + err.Error())}
	}
	if err := ValidateARN(t.ARN); err != nil {
		return Decoded{Invalid: ShortenReason(err.Error())}
	}
	d := Decoded{ARN: t.ARN, Task: &t}
	if err := r.Validate(&t); err != nil {
		d.Invalid = ShortenReason(err.Error())
		t.Containers = reportable(t.Containers)
		return d
	}
	d.Desired = event.Status(t.DesiredStatus)
	return d
}

// reportable keeps the containers of an invalid task that may be named in its reports.
func reportable(cs []Container) []Container {
	var out []Container
	seen := map[string]bool{}
	for _, c := range cs {
		if len(out) == MaxContainersPerTask {
			break
		}
		if containerName.MatchString(c.Name) && !seen[c.Name] {
			seen[c.Name] = true
			out = append(out, Container{Name: c.Name})
		}
	}
	return out
}

// Validate checks a task against every rule and limit of PROTOCOL.md under the default
// Rules (no bind mounts allowed).
func Validate(t *Task) error { return Rules{}.Validate(t) }

// Validate checks a task against every rule and limit of PROTOCOL.md, and its containers'
// §4 fields against these rules. Its errors quote at most a short prefix of any value, so a
// hostile value never makes a long reason.
func (r Rules) Validate(t *Task) error {
	if err := ValidateARN(t.ARN); err != nil {
		return err
	}
	switch t.DesiredStatus {
	case "RUNNING", "STOPPED":
	default:
		return fmt.Errorf("desired_status: %s, want RUNNING or STOPPED", Quote(t.DesiredStatus))
	}
	if len(t.Containers) == 0 {
		return fmt.Errorf("containers: none")
	}
	if len(t.Containers) > MaxContainersPerTask {
		return fmt.Errorf("containers: %d, at most %d", len(t.Containers), MaxContainersPerTask)
	}
	seen := map[string]bool{}
	for i, c := range t.Containers {
		if !containerName.MatchString(c.Name) {
			return fmt.Errorf("containers[%d].name: %s must match %s", i, Quote(c.Name), containerName)
		}
		if seen[c.Name] {
			return fmt.Errorf("containers[%d].name: %s is used twice", i, Quote(c.Name))
		}
		seen[c.Name] = true
		if err := ValidateImage(c.Image); err != nil {
			return fmt.Errorf("containers[%d].image: %w", i, err)
		}
		n := 0
		for k, v := range c.Env {
			if err := validateEnvName(k); err != nil {
				return fmt.Errorf("containers[%d].env: %w", i, err)
			}
			n += len(k) + envValueLen(v)
		}
		if n > MaxEnvBytes {
			return fmt.Errorf("containers[%d].env: %d bytes, at most %d", i, n, MaxEnvBytes)
		}
		n = 0
		for _, a := range c.Command {
			n += len(a)
		}
		if n > MaxCommandBytes {
			return fmt.Errorf("containers[%d].command: %d bytes, at most %d", i, n, MaxCommandBytes)
		}
		if err := r.validateContainer(&t.Containers[i]); err != nil {
			return fmt.Errorf("containers[%d].%w", i, err)
		}
	}
	return validateDependencies(t.Containers)
}

// ValidateImage checks an image reference as the Docker Engine reads it
// (github.com/distribution/reference, the parser of the engine and its client), so nothing
// else ever reaches a runtime — and nothing the engine takes is refused: upper-case registry
// hosts, IPv6 literals, ports, "a--b" path components, digests.
func ValidateImage(image string) error {
	if image == "" {
		return fmt.Errorf("empty")
	}
	if len(image) > MaxImageLength {
		return fmt.Errorf("%d bytes, at most %d", len(image), MaxImageLength)
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return fmt.Errorf("%s is not an image reference: %v", Quote(image), err)
	}
	return nil
}

// Spec turns a valid task's containers into the journal's form.
func (t *Task) Spec() []event.ContainerSpec {
	out := make([]event.ContainerSpec, len(t.Containers))
	for i, c := range t.Containers {
		out[i] = event.ContainerSpec{Name: c.Name, Image: c.Image, Command: c.Command, Env: c.Env, Essential: c.Essential == nil || *c.Essential,
			Entrypoint: c.Entrypoint, WorkingDir: c.WorkingDir, User: c.User, Labels: c.Labels,
			CPUShares: c.CPUShares, MemoryMiB: c.MemoryMiB, MemoryReservationMiB: c.MemoryReservationMiB, PidsLimit: c.PidsLimit,
			Ports: slices.Clone(c.Ports), Mounts: c.Mounts, StopSignal: c.StopSignal, StopTimeoutS: c.StopTimeoutS,
			HealthCheck: c.HealthCheck, DependsOn: c.DependsOn, StartTimeoutS: c.StartTimeoutS, Log: c.Log, PullPolicy: c.PullPolicy}
		for j := range out[i].Ports {
			if out[i].Ports[j].Protocol == "" {
				out[i].Ports[j].Protocol = "tcp" // journaled as it will run
			}
		}
	}
	return out
}
