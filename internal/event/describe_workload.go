package event

import (
	"fmt"
	"strings"
)

// workloadSummary is the §4 fields of a container on one short line for `journal dump`, e.g.
// "memory_mib=256 ports=8080→0/tcp depends_on=db:HEALTHY health_check": what the fields were,
// without the values that can be long (labels, env, commands). Empty for a container that
// uses none, so records from before §4 print as they always did.
func workloadSummary(c ContainerSpec) string {
	var parts []string
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	if c.CPUShares != 0 {
		add("cpu_shares=%d", c.CPUShares)
	}
	if c.MemoryMiB != 0 {
		add("memory_mib=%d", c.MemoryMiB)
	}
	if c.MemoryReservationMiB != 0 {
		add("memory_reservation_mib=%d", c.MemoryReservationMiB)
	}
	if c.PidsLimit != 0 {
		add("pids_limit=%d", c.PidsLimit)
	}
	if len(c.Ports) > 0 {
		ps := make([]string, len(c.Ports))
		for i, p := range c.Ports {
			ps[i] = fmt.Sprintf("%d→%d/%s", p.ContainerPort, p.HostPort, p.Protocol)
		}
		add("ports=%s", strings.Join(ps, ","))
	}
	if len(c.Mounts) > 0 {
		ms := make([]string, len(c.Mounts))
		for i, m := range c.Mounts {
			ms[i] = m.Type + ":" + m.Target
		}
		add("mounts=%s", strings.Join(ms, ","))
	}
	if c.StopTimeoutS != nil {
		add("stop_timeout_s=%d", *c.StopTimeoutS)
	}
	if c.StartTimeoutS != nil {
		add("start_timeout_s=%d", *c.StartTimeoutS)
	}
	if c.HealthCheck != nil {
		add("health_check")
	}
	if len(c.DependsOn) > 0 {
		ds := make([]string, len(c.DependsOn))
		for i, d := range c.DependsOn {
			ds[i] = d.Container + ":" + d.Condition
		}
		add("depends_on=%s", strings.Join(ds, ","))
	}
	return strings.Join(parts, " ")
}
