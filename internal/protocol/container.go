package protocol

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/event"
)

// Limits on the container fields of PROTOCOL.md §4: generous for real services, small enough
// that no payload can make the agent or the runtime do something absurd.
const (
	MaxLabelBytes   = 64 << 10
	MaxPorts        = 100
	MaxMounts       = 32
	MaxPathLength   = 4096
	MaxStopTimeoutS = 120 // like ECS's stopTimeout; keeps a stop inside the agent's call deadline
	// MaxStartTimeoutS bounds start_timeout_s at a day: a dependency that takes longer to
	// start is better left without a limit than given one nobody would notice running out.
	MaxStartTimeoutS = 24 * 60 * 60
	MaxHealthSeconds = 24 * 60 * 60
	MaxHealthRetries = 100
	MaxLogSizeMiB    = 1024
	MaxLogFiles      = 100
	MaxCPUShares     = 262144
	MinCPUShares     = 2
	MinMemoryMiB     = 6 // the Docker Engine refuses less
	MaxPidsLimit     = 4194304
)

// AgentLabelPrefix is the prefix of the labels agentd puts on its own containers; a task may
// not set labels under it (it could pass for another task's container, or another agent's).
const AgentLabelPrefix = "io.agentd."

// ReservedVolumePrefix starts the names of the volumes the agent makes for bind mounts (each
// names a directory the agent opened; docker.BindVolumePrefix). A task may not name one: it
// would mount another task's bind source, or a stale one naming a dead process's descriptor.
const ReservedVolumePrefix = "agentd-bind-"

// Rules are the parts of validation that depend on how the agent is configured. The zero
// value is the strictest: no bind mount is allowed anywhere.
type Rules struct {
	// AllowBindRoots are the host directories under which bind mount sources may lie
	// (--allow-bind-root, repeatable). Each is absolute and clean.
	AllowBindRoots []string
	// ReservedHostPorts are the host ports the agent itself listens on (its API's TCP port): a
	// task publishing one would take it while the agent is down, and the agent's own clients
	// trust the root-owned docker-proxy that holds it, so it would receive their credentials.
	ReservedHostPorts []int
}

// NewRules checks the configured bind roots: each must be an absolute path; they are kept
// cleaned. A bad one is an error naming it.
func NewRules(bindRoots []string) (Rules, error) {
	var r Rules
	for _, root := range bindRoots {
		if root == "" || !path.IsAbs(root) || strings.ContainsRune(root, 0) {
			return Rules{}, fmt.Errorf("--allow-bind-root %q: want an absolute directory", root)
		}
		r.AllowBindRoots = append(r.AllowBindRoots, path.Clean(root))
	}
	return r, nil
}

var (
	userSpec   = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,31}(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,31})?$`)
	volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,254}$`)
)

// stopSignals are the signals a container may be stopped with (Linux names, as Docker takes
// them).
var stopSignals = map[string]bool{}

func init() {
	for _, s := range []string{"HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
		"PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ",
		"VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"} {
		stopSignals["SIG"+s] = true
	}
}

func hasNUL(ss ...string) bool {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
	return false
}

// absPath checks a path inside a container or on the host: absolute, clean, bounded.
func absPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty")
	case len(p) > MaxPathLength:
		return fmt.Errorf("%d bytes, at most %d", len(p), MaxPathLength)
	case hasNUL(p):
		return fmt.Errorf("%q holds a NUL byte", p)
	case !path.IsAbs(p):
		return fmt.Errorf("%q is not an absolute path", p)
	case path.Clean(p) != p:
		return fmt.Errorf("%q is not a clean path (want %q)", p, path.Clean(p))
	}
	return nil
}

// bindAllowed says whether a clean absolute host path lies under one of the allowed roots.
func (r Rules) bindAllowed(src string) bool {
	for _, root := range r.AllowBindRoots {
		if root == "/" || src == root || strings.HasPrefix(src, root+"/") {
			return true
		}
	}
	return false
}

// validateContainer checks the §4 fields of one container. Errors start with the field's
// name, so the caller prefixes "containers[i]." and the reason names the field.
func (r Rules) validateContainer(c *Container) error {
	n := 0
	for _, a := range c.Command {
		n += len(a)
	}
	for _, a := range c.Entrypoint {
		n += len(a)
	}
	if n > MaxCommandBytes {
		return fmt.Errorf("entrypoint: with command %d bytes, at most %d", n, MaxCommandBytes)
	}
	if hasNUL(c.Command...) {
		return fmt.Errorf("command: holds a NUL byte")
	}
	if hasNUL(c.Entrypoint...) {
		return fmt.Errorf("entrypoint: holds a NUL byte")
	}
	for k, v := range c.Env {
		if strings.ContainsAny(k, "=\x00") || hasNUL(v) {
			return fmt.Errorf("env: %q: names may not hold = or NUL, values no NUL", k)
		}
	}
	if c.WorkingDir != "" {
		if err := absPath(c.WorkingDir); err != nil {
			return fmt.Errorf("working_dir: %w", err)
		}
	}
	if c.User != "" && !userSpec.MatchString(c.User) {
		return fmt.Errorf("user: %q must be user[:group], names or ids (%s)", c.User, userSpec)
	}
	n = 0
	for k, v := range c.Labels {
		if k == "" || hasNUL(k, v) {
			return fmt.Errorf("labels: %q: keys non-empty, no NUL", k)
		}
		if strings.HasPrefix(strings.ToLower(k), AgentLabelPrefix) {
			return fmt.Errorf("labels: %q uses the agent's own prefix %s", k, AgentLabelPrefix)
		}
		n += len(k) + len(v)
	}
	if n > MaxLabelBytes {
		return fmt.Errorf("labels: %d bytes, at most %d", n, MaxLabelBytes)
	}
	if c.CPUShares != 0 && (c.CPUShares < MinCPUShares || c.CPUShares > MaxCPUShares) {
		return fmt.Errorf("cpu_shares: %d, want %d to %d", c.CPUShares, MinCPUShares, MaxCPUShares)
	}
	const maxMiB = 1 << 30 // 1 PiB: anything above is a mistake, and bytes must fit an int64
	if c.MemoryMiB != 0 && (c.MemoryMiB < MinMemoryMiB || c.MemoryMiB > maxMiB) {
		return fmt.Errorf("memory_mib: %d, want %d to %d", c.MemoryMiB, MinMemoryMiB, maxMiB)
	}
	if c.MemoryReservationMiB != 0 && (c.MemoryReservationMiB < MinMemoryMiB || c.MemoryReservationMiB > maxMiB) {
		return fmt.Errorf("memory_reservation_mib: %d, want %d to %d", c.MemoryReservationMiB, MinMemoryMiB, maxMiB)
	}
	if c.MemoryMiB != 0 && c.MemoryReservationMiB > c.MemoryMiB {
		return fmt.Errorf("memory_reservation_mib: %d is above memory_mib %d", c.MemoryReservationMiB, c.MemoryMiB)
	}
	if c.PidsLimit != 0 && (c.PidsLimit < 1 || c.PidsLimit > MaxPidsLimit) {
		return fmt.Errorf("pids_limit: %d, want 1 to %d", c.PidsLimit, MaxPidsLimit)
	}
	if err := r.validatePorts(c.Ports); err != nil {
		return err
	}
	if err := r.validateMounts(c.Mounts); err != nil {
		return err
	}
	if c.StopSignal != "" && !stopSignals[c.StopSignal] {
		return fmt.Errorf("stop_signal: %q is not a signal name (SIGTERM, SIGINT, SIGQUIT, …)", c.StopSignal)
	}
	if c.StopTimeoutS != nil && (*c.StopTimeoutS < 0 || *c.StopTimeoutS > MaxStopTimeoutS) {
		return fmt.Errorf("stop_timeout_s: %d, want 0 to %d", *c.StopTimeoutS, MaxStopTimeoutS)
	}
	if c.StartTimeoutS != nil && (*c.StartTimeoutS < 0 || *c.StartTimeoutS > MaxStartTimeoutS) {
		return fmt.Errorf("start_timeout_s: %d, want 0 to %d (absent: no limit)", *c.StartTimeoutS, MaxStartTimeoutS)
	}
	if err := validateHealthCheck(c.HealthCheck); err != nil {
		return err
	}
	if l := c.Log; l != nil {
		if l.MaxSizeMiB < 0 || l.MaxSizeMiB > MaxLogSizeMiB {
			return fmt.Errorf("log.max_size_mib: %d, want 1 to %d (0: the agent's default)", l.MaxSizeMiB, MaxLogSizeMiB)
		}
		if l.MaxFiles < 0 || l.MaxFiles > MaxLogFiles {
			return fmt.Errorf("log.max_files: %d, want 1 to %d (0: the agent's default)", l.MaxFiles, MaxLogFiles)
		}
	}
	switch c.PullPolicy {
	case "", event.PullAlways, event.PullIfNotPresent, event.PullNever:
	default:
		return fmt.Errorf("pull_policy: %q, want always, if-not-present or never", c.PullPolicy)
	}
	return nil
}

func (r Rules) validatePorts(ports []event.PortMapping) error {
	if len(ports) > MaxPorts {
		return fmt.Errorf("ports: %d, at most %d", len(ports), MaxPorts)
	}
	for i, p := range ports {
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			return fmt.Errorf("ports[%d].container_port: %d, want 1 to 65535", i, p.ContainerPort)
		}
		if p.HostPort < 0 || p.HostPort > 65535 {
			return fmt.Errorf("ports[%d].host_port: %d, want 0 (the runtime picks) to 65535", i, p.HostPort)
		}
		switch p.Protocol {
		case "", "tcp", "udp":
		default:
			return fmt.Errorf("ports[%d].protocol: %q, want tcp or udp", i, p.Protocol)
		}
		if p.HostIP != "" && !isIPLiteral(p.HostIP) {
			return fmt.Errorf("ports[%d].host_ip: %q is not an IP address", i, p.HostIP)
		}
		if p.HostPort == 0 {
			continue
		}
		if protocolOf(p) == "tcp" && slices.Contains(r.ReservedHostPorts, p.HostPort) {
			return fmt.Errorf("ports[%d].host_port: %d is the agent's own API port, reserved", i, p.HostPort)
		}
		for j, q := range ports[:i] {
			if q.HostPort == p.HostPort && protocolOf(q) == protocolOf(p) && HostIPsOverlap(q.HostIP, p.HostIP) {
				return fmt.Errorf("ports[%d].host_port: %d/%s on %s is also asked for by ports[%d] on %s",
					i, p.HostPort, protocolOf(p), hostIPName(p.HostIP), j, hostIPName(q.HostIP))
			}
		}
	}
	return nil
}

func protocolOf(p event.PortMapping) string {
	if p.Protocol == "" {
		return "tcp"
	}
	return p.Protocol
}

func hostIPName(ip string) string {
	if ip == "" {
		return "every address"
	}
	return ip
}

// HostIPsOverlap reports whether binds of one host port and protocol on host IPs a and b
// (valid host_ip values; "" is the default) would take an address in common, so the second
// bind fails (PROTOCOL.md §4 "ports"):
//
//   - "" binds every address of both families (Docker binds 0.0.0.0 and ::): it overlaps all.
//   - "::" overlaps all too: on Linux a socket on :: also takes IPv4 unless the host sets
//     net.ipv6.bindv6only, which the agent cannot know.
//   - "0.0.0.0" overlaps every IPv4 address, and no specific IPv6 one.
//   - Two specific addresses overlap only when they are the same address, however written
//     (::1 and 0:0:0:0:0:0:0:1; an IPv4-mapped IPv6 address is its IPv4 address).
//
// TCP and UDP ports never overlap each other; the caller compares the protocol.
func HostIPsOverlap(a, b string) bool {
	if a == "" || b == "" {
		return true
	}
	x, okx := parseIPLiteral(a)
	y, oky := parseIPLiteral(b)
	if !okx || !oky {
		return a == b // not addresses: validation refuses them; never call them apart
	}
	if !x.v4 && x.unspecified() || !y.v4 && y.unspecified() {
		return true
	}
	if x.v4 != y.v4 {
		return false
	}
	return x.addr == y.addr || x.unspecified() || y.unspecified()
}

func (r Rules) validateMounts(mounts []event.Mount) error {
	if len(mounts) > MaxMounts {
		return fmt.Errorf("mounts: %d, at most %d", len(mounts), MaxMounts)
	}
	targets := map[string]int{}
	for i, m := range mounts {
		if err := absPath(m.Target); err != nil {
			return fmt.Errorf("mounts[%d].target: %w", i, err)
		}
		if m.Target == "/" {
			return fmt.Errorf("mounts[%d].target: the container's root cannot be a mount", i)
		}
		if j, dup := targets[m.Target]; dup {
			return fmt.Errorf("mounts[%d].target: %q is also the target of mounts[%d]", i, m.Target, j)
		}
		targets[m.Target] = i
		if m.SizeMiB != 0 && m.Type != event.MountTmpfs {
			return fmt.Errorf("mounts[%d].size_mib: only a tmpfs has a size", i)
		}
		switch m.Type {
		case event.MountBind:
			if err := absPath(m.Source); err != nil {
				return fmt.Errorf("mounts[%d].source: %w", i, err)
			}
			if !r.bindAllowed(m.Source) {
				if len(r.AllowBindRoots) == 0 {
					return fmt.Errorf("mounts[%d].source: bind mount of %q refused: this agent allows no bind mounts (--allow-bind-root)", i, m.Source)
				}
				return fmt.Errorf("mounts[%d].source: bind mount of %q refused: not under an allowed root (%s)", i, m.Source, strings.Join(r.AllowBindRoots, ", "))
			}
		case event.MountVolume:
			if m.Source != "" && !volumeName.MatchString(m.Source) {
				return fmt.Errorf("mounts[%d].source: %q is not a volume name (%s)", i, m.Source, volumeName)
			}
			if strings.HasPrefix(m.Source, ReservedVolumePrefix) {
				return fmt.Errorf("mounts[%d].source: volume %q: names starting %s are the agent's own", i, m.Source, ReservedVolumePrefix)
			}
		case event.MountTmpfs:
			if m.Source != "" {
				return fmt.Errorf("mounts[%d].source: a tmpfs has no source", i)
			}
			if m.SizeMiB < 0 || m.SizeMiB > 1<<30 {
				return fmt.Errorf("mounts[%d].size_mib: %d, want 0 (the runtime's default) to %d", i, m.SizeMiB, 1<<30)
			}
		default:
			return fmt.Errorf("mounts[%d].type: %q, want bind, volume or tmpfs", i, m.Type)
		}
	}
	return nil
}

func validateHealthCheck(h *event.HealthCheck) error {
	if h == nil {
		return nil
	}
	switch {
	case len(h.Command) >= 2 && h.Command[0] == "CMD":
	case len(h.Command) == 2 && h.Command[0] == "CMD-SHELL":
	default:
		return fmt.Errorf(`health_check.command: want ["CMD", program, args...] or ["CMD-SHELL", line]`)
	}
	n := 0
	for _, a := range h.Command {
		if hasNUL(a) {
			return fmt.Errorf("health_check.command: holds a NUL byte")
		}
		n += len(a)
	}
	if n > MaxCommandBytes {
		return fmt.Errorf("health_check.command: %d bytes, at most %d", n, MaxCommandBytes)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"interval_s", h.IntervalS}, {"timeout_s", h.TimeoutS}, {"start_period_s", h.StartPeriodS}} {
		if f.v < 0 || f.v > MaxHealthSeconds {
			return fmt.Errorf("health_check.%s: %d, want 0 (the runtime's default) to %d", f.name, f.v, MaxHealthSeconds)
		}
	}
	if h.Retries < 0 || h.Retries > MaxHealthRetries {
		return fmt.Errorf("health_check.retries: %d, want 0 (the runtime's default) to %d", h.Retries, MaxHealthRetries)
	}
	return nil
}

// validateDependencies checks depends_on across the task: every dependency names another
// container of the task, once, with a known condition that can be met — HEALTHY needs a
// health check, and COMPLETE or SUCCESS a non-essential container (an essential one ending
// stops the task) — and the dependencies have no cycle.
func validateDependencies(cs []Container) error {
	byName := make(map[string]int, len(cs))
	for i, c := range cs {
		byName[c.Name] = i
	}
	for i, c := range cs {
		seen := map[string]bool{}
		for j, d := range c.DependsOn {
			field := fmt.Sprintf("containers[%d].depends_on[%d]", i, j)
			k, ok := byName[d.Container]
			switch {
			case !ok:
				return fmt.Errorf("%s.container: %q is not a container of this task", field, d.Container)
			case k == i:
				return fmt.Errorf("%s.container: %q depends on itself", field, d.Container)
			case seen[d.Container]:
				return fmt.Errorf("%s.container: %q is named twice", field, d.Container)
			}
			seen[d.Container] = true
			dep := cs[k]
			switch d.Condition {
			case event.DependStart:
			case event.DependHealthy:
				if dep.HealthCheck == nil {
					return fmt.Errorf("%s.condition: HEALTHY, but %q has no health_check", field, d.Container)
				}
			case event.DependComplete, event.DependSuccess:
				if dep.Essential == nil || *dep.Essential {
					return fmt.Errorf("%s.condition: %s, but %q is essential (its exit stops the task)", field, d.Condition, d.Container)
				}
			default:
				return fmt.Errorf("%s.condition: %q, want START, COMPLETE, SUCCESS or HEALTHY", field, d.Condition)
			}
		}
	}
	// A cycle would wait forever: depth-first search, 1 = on the path, 2 = done.
	mark := make([]int, len(cs))
	var visit func(i int) error
	visit = func(i int) error {
		mark[i] = 1
		for _, d := range cs[i].DependsOn {
			k := byName[d.Container]
			if mark[k] == 1 {
				return fmt.Errorf("containers[%d].depends_on: %q and %q wait for each other (a cycle)", i, cs[i].Name, d.Container)
			}
			if mark[k] == 0 {
				if err := visit(k); err != nil {
					return err
				}
			}
		}
		mark[i] = 2
		return nil
	}
	for i := range cs {
		if mark[i] == 0 {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}
