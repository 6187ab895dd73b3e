package docker

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// containerConfig translates a container's spec (PROTOCOL.md §4, validated at arrival) into
// the Docker Engine's create request: one function, so what reaches Docker is all in one
// place. agentLabels are agentd's own labels; they are set last, so no task label can pass
// for them (validation refuses the prefix as well).
//
// Choices where the protocol leaves one to the agent:
//   - memory_mib is a hard limit without swap (MemorySwap = Memory), so a container over it
//     is OOM-killed, as the protocol's OutOfMemory reason promises, rather than swapping.
//   - Logs always go to the json-file driver with rotation: the task's log settings, else
//     the agent's default of 10 MiB × 3, so no container can fill the disk.
//   - A bind mount reaches Docker only as bindVolumes[i], the volume naming the source the
//     agent opened beneath its root (engine_binds.go), never as a path: without one it is an
//     error. A task's own volume may not use the agent's BindVolumePrefix.
func containerConfig(spec runtime.CreateSpec, agentLabels map[string]string, bindVolumes map[int]string) (*container.Config, *container.HostConfig, error) {
	c := spec.Container
	env := make([]string, 0, len(c.Env))
	for k, v := range c.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	labels := make(map[string]string, len(c.Labels)+len(agentLabels))
	for k, v := range c.Labels {
		labels[k] = v
	}
	for k, v := range agentLabels {
		labels[k] = v
	}
	cfg := &container.Config{
		Image:      cmp.Or(spec.ImageID, c.Image),
		Cmd:        c.Command,
		Entrypoint: c.Entrypoint,
		Env:        env,
		WorkingDir: c.WorkingDir,
		User:       c.User,
		Labels:     labels,
		StopSignal: c.StopSignal,
		StopTimeout: func() *int {
			if c.StopTimeoutS == nil {
				return nil
			}
			s := *c.StopTimeoutS
			return &s
		}(),
	}
	delete(labels, runtime.LabelStopTimeout) // the agent's alone (validation refuses the prefix too)
	if c.StopTimeoutS != nil {
		labels[runtime.LabelStopTimeout] = strconv.Itoa(*c.StopTimeoutS) // ownStopTimeout
	}
	if h := c.HealthCheck; h != nil {
		cfg.Healthcheck = &container.HealthConfig{
			Test:        h.Command,
			Interval:    time.Duration(h.IntervalS) * time.Second,
			Timeout:     time.Duration(h.TimeoutS) * time.Second,
			StartPeriod: time.Duration(h.StartPeriodS) * time.Second,
			Retries:     h.Retries,
		}
	}
	hc := hardened() // hygiene.go: no-new-privileges and the default pids limit, which the task's may replace
	hc.LogConfig = logConfig(c.Log)
	hc.CPUShares = c.CPUShares
	if c.MemoryMiB > 0 {
		hc.Memory = c.MemoryMiB << 20
		hc.MemorySwap = hc.Memory
	}
	hc.MemoryReservation = c.MemoryReservationMiB << 20
	if c.PidsLimit > 0 {
		n := c.PidsLimit
		hc.PidsLimit = &n
	}
	if len(c.Ports) > 0 {
		cfg.ExposedPorts = network.PortSet{}
		hc.PortBindings = network.PortMap{}
	}
	for i, p := range c.Ports {
		proto := network.TCP
		if p.Protocol == "udp" {
			proto = network.UDP
		}
		port, ok := network.PortFrom(uint16(p.ContainerPort), proto)
		if !ok {
			return nil, nil, fmt.Errorf("ports[%d]: %d/%s is not a port", i, p.ContainerPort, proto)
		}
		b := network.PortBinding{}
		if p.HostPort != 0 {
			b.HostPort = strconv.Itoa(p.HostPort) // empty: the engine picks one
		}
		if p.HostIP != "" {
			ip, err := netip.ParseAddr(p.HostIP)
			if err != nil {
				return nil, nil, fmt.Errorf("ports[%d].host_ip: %w", i, err)
			}
			b.HostIP = ip
		}
		cfg.ExposedPorts[port] = struct{}{}
		hc.PortBindings[port] = append(hc.PortBindings[port], b)
	}
	for i, m := range c.Mounts {
		dm := mount.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly}
		switch m.Type {
		case event.MountBind:
			vol, ok := bindVolumes[i]
			if !ok {
				return nil, nil, fmt.Errorf("mounts[%d]: a bind mount reaches the engine only as the volume of its opened source", i)
			}
			// NoCopy: the engine would otherwise copy the image's content at the target into
			// the host directory.
			dm = mount.Mount{Type: mount.TypeVolume, Source: vol, Target: m.Target, ReadOnly: m.ReadOnly,
				VolumeOptions: &mount.VolumeOptions{NoCopy: true}}
		case event.MountVolume:
			if strings.HasPrefix(m.Source, BindVolumePrefix) {
				return nil, nil, fmt.Errorf("mounts[%d].source: volume %q: names starting %s are the agent's own", i, m.Source, BindVolumePrefix)
			}
			dm.Type = mount.TypeVolume
		case event.MountTmpfs:
			dm.Type = mount.TypeTmpfs
			if m.SizeMiB > 0 {
				dm.TmpfsOptions = &mount.TmpfsOptions{SizeBytes: m.SizeMiB << 20}
			}
		default:
			return nil, nil, fmt.Errorf("mount of type %q: not bind, volume or tmpfs", m.Type)
		}
		hc.Mounts = append(hc.Mounts, dm)
	}
	return cfg, hc, nil
}

// logConfig is the json-file driver with rotation: the task's sizes, else the agent's default.
func logConfig(l *event.LogConfig) container.LogConfig {
	size, files := int64(event.DefaultLogMaxSizeMiB), event.DefaultLogMaxFiles
	if l != nil && l.MaxSizeMiB > 0 {
		size = l.MaxSizeMiB
	}
	if l != nil && l.MaxFiles > 0 {
		files = l.MaxFiles
	}
	// The engine reads max-size in its binary units: "10m" is 10 MiB.
	return container.LogConfig{Type: "json-file", Config: map[string]string{
		"max-size": strconv.FormatInt(size, 10) + "m",
		"max-file": strconv.Itoa(files),
	}}
}

// bindingsOf reads the ports the engine bound, sorted, in the protocol's form.
func bindingsOf(ports network.PortMap) []event.NetworkBinding {
	var out []event.NetworkBinding
	for p, bs := range ports {
		for _, b := range bs {
			hp, err := strconv.Atoi(b.HostPort)
			if err != nil || hp == 0 {
				continue // exposed, not published
			}
			ip := ""
			if b.HostIP.IsValid() {
				ip = b.HostIP.String()
			}
			out = append(out, event.NetworkBinding{ContainerPort: int(p.Num()), HostPort: hp, Protocol: string(p.Proto()), HostIP: ip})
		}
	}
	runtime.SortBindings(out)
	return out
}

// summaryBindings reads the ports a container list gives, as bindingsOf reads an inspect's.
func summaryBindings(ports []container.PortSummary) []event.NetworkBinding {
	var out []event.NetworkBinding
	for _, p := range ports {
		if p.PublicPort == 0 {
			continue // exposed, not published
		}
		ip := ""
		if p.IP.IsValid() {
			ip = p.IP.String()
		}
		out = append(out, event.NetworkBinding{ContainerPort: int(p.PrivatePort), HostPort: int(p.PublicPort), Protocol: p.Type, HostIP: ip})
	}
	runtime.SortBindings(out)
	return out
}

// healthOf maps the engine's health status to the protocol's; "starting" and "none" are not
// reported (nothing has concluded yet).
func healthOf(h *container.Health) event.Health {
	if h == nil {
		return event.HealthUnknown
	}
	switch h.Status {
	case container.Healthy:
		return event.HealthHealthy
	case container.Unhealthy:
		return event.HealthUnhealthy
	}
	return event.HealthUnknown
}

// ownStopTimeout is the container's own stop_timeout_s, as its create recorded it in
// LabelStopTimeout: Podman reports a container made without one as having 0 (an immediate
// kill), so the engine's StopTimeout alone cannot tell "none" from 0. A container made before
// the label (by an older agent) has its engine's StopTimeout when that is above 0; a 0 of such
// a container waits the caller's timeout instead, the kinder reading.
func ownStopTimeout(cfg *container.Config) *int {
	if cfg == nil {
		return nil
	}
	if v, ok := cfg.Labels[runtime.LabelStopTimeout]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return &n
		}
		return nil // not what a create wrote: the caller's timeout
	}
	if cfg.StopTimeout != nil && *cfg.StopTimeout > 0 {
		return cfg.StopTimeout
	}
	return nil
}
