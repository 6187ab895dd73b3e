package event

import (
	"encoding/json"
	"time"
)

// Status is a task or container status, as named in DESIGN.md and on the wire.
type Status string

const (
	StatusNone         Status = "NONE"
	StatusPulled       Status = "PULLED"
	StatusCreated      Status = "CREATED"
	StatusRunning      Status = "RUNNING"
	StatusStopped      Status = "STOPPED"
	StatusStoppedAcked Status = "STOPPED_ACKED"
	StatusCleaning     Status = "CLEANING"
	StatusCleaned      Status = "CLEANED"
)

var statusRank = map[Status]int{
	StatusNone: 0, StatusPulled: 1, StatusCreated: 2, StatusRunning: 3, StatusStopped: 4,
	StatusStoppedAcked: 5, StatusCleaning: 6, StatusCleaned: 7,
}

// Rank orders statuses along the lifecycle; -1 for a name that is not a status.
func (s Status) Rank() int {
	if r, ok := statusRank[s]; ok {
		return r
	}
	return -1
}

// Valid reports whether s is one of the lifecycle statuses.
func (s Status) Valid() bool { return s.Rank() >= 0 }

// Reportable reports whether the control plane is told about this status (PROTOCOL.md §3).
func (s Status) Reportable() bool {
	return s == StatusPulled || s == StatusCreated || s == StatusRunning || s == StatusStopped
}

// ContainerSpec is a container as the control plane assigned it, after validation.
//
// The fields after Essential are PROTOCOL.md 1.1 §4. Each is omitempty, so a record written
// before they existed decodes unchanged and a container that uses none of them journals the
// same bytes as before; a zero value means "the runtime's default" (the agent's own default
// for Log). Their JSON names are the wire names and never change.
type ContainerSpec struct {
	Name      string            `json:"name"`
	Image     string            `json:"image"`
	Command   []string          `json:"command,omitempty"`
	Env       map[string]string `json:"env,omitempty"` // encoding/json sorts keys: deterministic
	Essential bool              `json:"essential"`

	Entrypoint           []string          `json:"entrypoint,omitempty"`
	WorkingDir           string            `json:"working_dir,omitempty"`
	User                 string            `json:"user,omitempty"`
	Labels               map[string]string `json:"labels,omitempty"`
	CPUShares            int64             `json:"cpu_shares,omitempty"`
	MemoryMiB            int64             `json:"memory_mib,omitempty"`
	MemoryReservationMiB int64             `json:"memory_reservation_mib,omitempty"`
	PidsLimit            int64             `json:"pids_limit,omitempty"`
	Ports                []PortMapping     `json:"ports,omitempty"`
	Mounts               []Mount           `json:"mounts,omitempty"`
	StopSignal           string            `json:"stop_signal,omitempty"`
	StopTimeoutS         *int              `json:"stop_timeout_s,omitempty"` // nil: the agent's stop timeout; 0 is "kill at once"
	HealthCheck          *HealthCheck      `json:"health_check,omitempty"`
	DependsOn            []Dependency      `json:"depends_on,omitempty"`
	// StartTimeoutS (PROTOCOL.md 1.2 §4): how long after the task's arrival this container
	// may take to meet the conditions its dependents wait for; nil: no limit.
	StartTimeoutS *int       `json:"start_timeout_s,omitempty"`
	Log           *LogConfig `json:"log,omitempty"`
	PullPolicy    string     `json:"pull_policy,omitempty"`
}

// PortMapping publishes a container port on the host (PROTOCOL.md §4 "ports").
type PortMapping struct {
	ContainerPort int    `json:"container_port"`
	HostPort      int    `json:"host_port"`          // 0: the runtime picks one
	Protocol      string `json:"protocol,omitempty"` // tcp (the default) or udp
	HostIP        string `json:"host_ip,omitempty"`  // empty: every address
}

// NetworkBinding is a port the runtime actually bound, as reported on a container's RUNNING
// change (PROTOCOL.md §4, "network_bindings").
type NetworkBinding struct {
	ContainerPort int    `json:"container_port"`
	HostPort      int    `json:"host_port"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"host_ip"`
}

// Mount kinds (PROTOCOL.md §4 "mounts").
const (
	MountBind   = "bind"
	MountVolume = "volume"
	MountTmpfs  = "tmpfs"
)

// Mount is a bind mount, a volume or a tmpfs.
type Mount struct {
	Type     string `json:"type"`
	Source   string `json:"source,omitempty"` // bind: a host path; volume: a name (empty: anonymous); tmpfs: none
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
	SizeMiB  int64  `json:"size_mib,omitempty"` // tmpfs only; 0: the runtime's default
}

// HealthCheck is a container's health probe; zero durations and retries are the runtime's
// defaults.
type HealthCheck struct {
	Command      []string `json:"command"` // ["CMD", prog, args...] or ["CMD-SHELL", line]
	IntervalS    int      `json:"interval_s,omitempty"`
	TimeoutS     int      `json:"timeout_s,omitempty"`
	Retries      int      `json:"retries,omitempty"`
	StartPeriodS int      `json:"start_period_s,omitempty"`
}

// Dependency conditions (PROTOCOL.md §4 "depends_on").
const (
	DependStart    = "START"    // the dependency has started
	DependComplete = "COMPLETE" // it has exited, whatever its code
	DependSuccess  = "SUCCESS"  // it has exited 0
	DependHealthy  = "HEALTHY"  // its health check has passed
)

// Dependency says a container starts only once another of its task meets a condition.
type Dependency struct {
	Container string `json:"container"`
	Condition string `json:"condition"`
}

// Health is a container's health as reported (PROTOCOL.md §4).
type Health string

const (
	HealthUnknown   Health = ""          // no health check, or none has concluded yet
	HealthHealthy   Health = "HEALTHY"   // the check passes
	HealthUnhealthy Health = "UNHEALTHY" // the check failed its retries
)

// LogConfig is the rotation of a container's json-file log; zero fields take the agent's
// default (DefaultLogMaxSizeMiB × DefaultLogMaxFiles).
type LogConfig struct {
	MaxSizeMiB int64 `json:"max_size_mib,omitempty"`
	MaxFiles   int   `json:"max_files,omitempty"`
}

// The agent's log rotation when a task says nothing: at most 10 MiB × 3 a container.
const (
	DefaultLogMaxSizeMiB = 10
	DefaultLogMaxFiles   = 3
)

// Pull policies (PROTOCOL.md §4 "pull_policy"); empty is PullIfNotPresent.
const (
	PullAlways       = "always"
	PullIfNotPresent = "if-not-present"
	PullNever        = "never"
)

// AgentStarted opens every run of the agent.
type AgentStarted struct {
	Version   string `json:"version"`
	PID       int    `json:"pid"`
	AgentID   string `json:"agent_id"`
	JournalID string `json:"journal_id"` // random, fixed at journal creation; makes change ids unique across journals
	Runtime   string `json:"runtime,omitempty"`
}

// AgentStopped closes a clean shutdown (a crash leaves none).
type AgentStopped struct {
	Reason string `json:"reason,omitempty"`
}

// PayloadReceived records a payload exactly as received, before it is acknowledged.
type PayloadReceived struct {
	MessageID string            `json:"message_id"`
	Tasks     []json.RawMessage `json:"tasks,omitempty"`
}

// TaskAdded assigns a new task (subject: the task).
type TaskAdded struct {
	MessageID  string          `json:"message_id,omitempty"`
	Family     string          `json:"family,omitempty"`
	Version    string          `json:"version,omitempty"`
	Desired    Status          `json:"desired"`
	Containers []ContainerSpec `json:"containers"`
}

// TaskRejected records a task that broke a protocol rule: it exists from then on as STOPPED
// with the reason, and that STOPPED is reported like any other.
type TaskRejected struct {
	MessageID  string   `json:"message_id,omitempty"`
	Reason     string   `json:"reason"`
	Containers []string `json:"containers,omitempty"` // names as received, where readable
}

// TaskResent records that the control plane sent a task the agent already knows again.
type TaskResent struct {
	MessageID string `json:"message_id,omitempty"`
	Desired   Status `json:"desired,omitempty"`
}

// DesiredChanged moves a task's desired status forward.
type DesiredChanged struct {
	MessageID string `json:"message_id,omitempty"`
	To        Status `json:"to"`
}

// ContainerTransitioned records what the runtime did to a container (subject: task + container).
type ContainerTransitioned struct {
	From      Status `json:"from"`
	To        Status `json:"to"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Reason    string `json:"reason,omitempty"`
	RuntimeID string `json:"runtime_id,omitempty"`
	// Cursor is the runtime event stream's position of the exit this records (0: not from
	// the stream). The projection keeps the highest, so a restarted agent resumes the stream
	// where it left off.
	Cursor int64 `json:"cursor,omitempty"`
	// NetworkBindings are the host ports the runtime bound for a container that went RUNNING
	// (PROTOCOL.md §4), reported with its RUNNING change.
	NetworkBindings []NetworkBinding `json:"network_bindings,omitempty"`
	// StartedAt is when the runtime started the container, on a RUNNING journaled only after
	// the container had run (its start answered with an error while it ran and exited).
	StartedAt time.Time `json:"started_at,omitzero"`
	// StopsTask: this container's STOPPED stops its task even if it is not essential (a
	// dependency of it can no longer be met, PROTOCOL.md §4).
	StopsTask bool `json:"stops_task,omitempty"`
	// On a PULLED: the image the runtime resolved the reference to (its id, and its content
	// digest — the repository digest for a registry image), and ImagePulled when this agent
	// fetched it from a registry: its id was absent before the pull (records before issue 22
	// said so when the reference was absent). Image garbage collection removes only images so
	// pulled. ImageRefExisted: the reference named this very image before the pull, so it is
	// not a name the agent made, and collection never takes it back.
	ImageID         string `json:"image_id,omitempty"`
	ImageDigest     string `json:"image_digest,omitempty"`
	ImagePulled     bool   `json:"image_pulled,omitempty"`
	ImageRefExisted bool   `json:"image_ref_existed,omitempty"`
}

// ContainerRolledBack records that the runtime no longer has a CREATED container that never
// started — Docker rolls back a create the agent was killed in, after the next agent adopted
// the container by name — so it is created again (a CREATED → CREATED container_transitioned
// with the new id follows). Once per container: a second loss stops it, as any vanished
// container. RuntimeID is the container that is gone.
type ContainerRolledBack struct {
	RuntimeID string `json:"runtime_id"`
	Reason    string `json:"reason,omitempty"`
}

// RecordRefused stands in the journal for a record the core made from a payload and the
// projection refused (a bug in the core, DESIGN.md invariant 11): the refused record is never
// journaled, yet the payload is acknowledged, so this says — durably, past a restart — which
// task and payload it was and why, so that the task is named rather than lost. It carries
// only names and the reason, never the task's definition or environment (PROTOCOL.md §5).
// Subject: the refused record's task and container, if any.
type RecordRefused struct {
	MessageID string `json:"message_id,omitempty"`
	Record    string `json:"record"` // the refused record's type name
	Reason    string `json:"reason"` // the projection's reason
	// Desired: a refused desired_changed's status asked for, so that after a restart the
	// change is decided again rather than lost (its payload is held: a re-send does not bring
	// it back). Records from before it have none.
	Desired Status `json:"desired,omitempty"`
}

// CallStarted records, before it is made, a runtime call that must never be made twice (a
// start: Docker runs an exited container again). Until the call's outcome is journaled the
// container is in flight: possibly running, so never declared STOPPED, never started again;
// an outcome that never comes (a timeout, a crash) is settled by asking the runtime.
type CallStarted struct {
	Call string `json:"call"`
}

// CallEnded records that a call in flight ended without changing what the journal knows of the
// container (the runtime showed it was never carried out): the container is no longer in flight.
type CallEnded struct {
	Call   string `json:"call"`
	Reason string `json:"reason,omitempty"`
}

// HealthChanged records a new verdict of a running container's health check (subject: task
// + container), or of its task — the worst of its essential containers' (subject: the task).
// Each is reported as a change that carries the health instead of a status (PROTOCOL.md §4).
type HealthChanged struct {
	Health Health `json:"health"`
}

// TaskTransitioned records a task's known status moving.
type TaskTransitioned struct {
	From   Status `json:"from"`
	To     Status `json:"to"`
	Reason string `json:"reason,omitempty"`
}

// Rejection is a change the control plane rejected for good.
type Rejection struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

// ChangesSettled records the control plane's answer to a report: every listed id is settled.
type ChangesSettled struct {
	Accepted []string    `json:"accepted,omitempty"`
	Rejected []Rejection `json:"rejected,omitempty"`
}

// StoppedAcked records that a task's STOPPED change was settled: the one door to cleanup.
type StoppedAcked struct {
	ChangeID string `json:"change_id"`
	Rejected string `json:"rejected,omitempty"` // the control plane's error when it rejected rather than accepted
}

// CleanupStarted records that a task's cleanup began (subject: the task).
type CleanupStarted struct{}

// ContainerRemoved records that the runtime removed a container: in its task's cleanup, or —
// Fence — a CREATED container whose start was asked and never ran, removed by a remove that
// refuses one that has started, so that a start asked earlier (by a process that died, a call
// whose answer was lost) cannot land after: its STOPPED follows, or — Again, only while its
// task is not stopping — it is made again as a new container (a CREATED → CREATED
// container_transitioned with the new id follows), its starts counted afresh.
type ContainerRemoved struct {
	RuntimeID string `json:"runtime_id,omitempty"`
	Fence     bool   `json:"fence,omitempty"`
	Again     bool   `json:"again,omitempty"`
}

// TaskCleaned records the end of a task: it leaves a tombstone.
type TaskCleaned struct{}

// SnapshotTaken records that a projection snapshot was stored covering records up to AtSeq.
type SnapshotTaken struct {
	AtSeq uint64 `json:"at_seq"`
	Bytes int    `json:"bytes"`
}

// CompactionDone records that the history of long-cleaned tasks was dropped.
type CompactionDone struct {
	UpToSeq  uint64   `json:"up_to_seq"`
	Tasks    []string `json:"tasks,omitempty"`    // tombstones past retention, forgotten
	Messages []string `json:"messages,omitempty"` // message ids past retention, forgotten
	// Early are cleaned tasks whose history went before their retention ended, because the
	// journal passed --journal-max-bytes: their tombstones stay until the retention ends.
	Early   []string `json:"early,omitempty"`
	Records int      `json:"records"`
	// RefusedUpTo: the record_refused records at or before this sequence number are past
	// the retention, forgotten with their records.
	RefusedUpTo uint64 `json:"refused_up_to,omitempty"`
}

// ImageRemoved records that image garbage collection removed an image this agent pulled, which
// no task that was not cleaned used (subject: none).
type ImageRemoved struct {
	ImageID string   `json:"image_id"`
	Digest  string   `json:"digest,omitempty"`
	Refs    []string `json:"refs,omitempty"` // the references the agent pulled it by
	Reason  string   `json:"reason,omitempty"`
}

// ImageReleased records that an image this agent pulled is no longer its own (subject: none):
// collection took back the agent's names of it, and the runtime kept the image because another
// name (an operator's tag) or a container not the agent's holds it. The image stays with
// whoever holds it; the agent never tries to remove it again.
type ImageReleased struct {
	ImageID string   `json:"image_id"`
	Digest  string   `json:"digest,omitempty"`
	Refs    []string `json:"refs,omitempty"`   // the references the agent pulled it by
	Reason  string   `json:"reason,omitempty"` // what holds it, in the runtime's words
}

// ReportAttempted records a report that did not settle its changes (throttled, failed), so a
// post-mortem can see how long a STOPPED waited and why. Count folds repeated attempts.
type ReportAttempted struct {
	IDs        []string      `json:"ids"`
	Outcome    string        `json:"outcome"` // throttled, server_error, network, unauthorized, bad_request
	HTTPStatus int           `json:"http_status,omitempty"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	Error      string        `json:"error,omitempty"`
	Count      int           `json:"count,omitempty"`
}

func (*AgentStarted) Type() Type          { return TypeAgentStarted }
func (*AgentStopped) Type() Type          { return TypeAgentStopped }
func (*PayloadReceived) Type() Type       { return TypePayloadReceived }
func (*TaskAdded) Type() Type             { return TypeTaskAdded }
func (*TaskRejected) Type() Type          { return TypeTaskRejected }
func (*TaskResent) Type() Type            { return TypeTaskResent }
func (*DesiredChanged) Type() Type        { return TypeDesiredChanged }
func (*ContainerTransitioned) Type() Type { return TypeContainerTransitioned }
func (*TaskTransitioned) Type() Type      { return TypeTaskTransitioned }
func (*CallStarted) Type() Type           { return TypeCallStarted }
func (*CallEnded) Type() Type             { return TypeCallEnded }
func (*HealthChanged) Type() Type         { return TypeHealthChanged }
func (*ChangesSettled) Type() Type        { return TypeChangesSettled }
func (*StoppedAcked) Type() Type          { return TypeStoppedAcked }
func (*CleanupStarted) Type() Type        { return TypeCleanupStarted }
func (*ContainerRemoved) Type() Type      { return TypeContainerRemoved }
func (*TaskCleaned) Type() Type           { return TypeTaskCleaned }
func (*SnapshotTaken) Type() Type         { return TypeSnapshotTaken }
func (*CompactionDone) Type() Type        { return TypeCompactionDone }
func (*ReportAttempted) Type() Type       { return TypeReportAttempted }
func (*ImageRemoved) Type() Type          { return TypeImageRemoved }
func (*ImageReleased) Type() Type         { return TypeImageReleased }
func (*ContainerRolledBack) Type() Type   { return TypeContainerRolledBack }
func (*RecordRefused) Type() Type         { return TypeRecordRefused }
