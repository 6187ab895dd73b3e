package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
)

// fullContainer uses every field of PROTOCOL.md §4, as in its example.
const fullContainer = `{"name": "web", "image": "registry.example/web:3", "essential": true,
 "command": ["serve"], "entrypoint": ["/bin/web"], "env": {"PORT": "8080"},
 "working_dir": "/srv", "user": "1000:1000", "labels": {"team": "payments"},
 "cpu_shares": 512, "memory_mib": 256, "memory_reservation_mib": 128, "pids_limit": 256,
 "ports": [{"container_port": 8080, "host_port": 0, "protocol": "tcp", "host_ip": "127.0.0.1"}],
 "mounts": [{"type": "bind", "source": "/srv/data", "target": "/data", "read_only": true},
            {"type": "volume", "source": "cache", "target": "/cache"},
            {"type": "tmpfs", "target": "/tmp", "size_mib": 64}],
 "stop_signal": "SIGTERM", "stop_timeout_s": 30,
 "health_check": {"command": ["CMD", "/bin/web", "ping"], "interval_s": 10, "timeout_s": 5,
                  "retries": 3, "start_period_s": 0},
 "depends_on": [{"container": "db", "condition": "HEALTHY"}],
 "log": {"max_size_mib": 10, "max_files": 3},
 "pull_policy": "if-not-present"}`

const dbContainer = `{"name": "db", "image": "db:1", "health_check": {"command": ["CMD", "/bin/db", "ping"]}}`

func fullTask() string {
	return `{"arn":"task/full","desired_status":"RUNNING","containers":[` + dbContainer + `,` + fullContainer + `]}`
}

func TestTheProtocolExampleIsValidAndJournaledWhole(t *testing.T) {
	rules, err := NewRules([]string{"/srv/"})
	if err != nil {
		t.Fatal(err)
	}
	d := rules.DecodeTask(json.RawMessage(fullTask()))
	if d.Invalid != "" {
		t.Fatalf("the protocol's own example is refused: %s", d.Invalid)
	}
	spec := d.Task.Spec()[1]
	timeout := 30
	want := event.ContainerSpec{Name: "web", Image: "registry.example/web:3", Essential: true, Command: []string{"serve"},
		Entrypoint: []string{"/bin/web"}, Env: map[string]string{"PORT": "8080"}, WorkingDir: "/srv", User: "1000:1000",
		Labels: map[string]string{"team": "payments"}, CPUShares: 512, MemoryMiB: 256, MemoryReservationMiB: 128, PidsLimit: 256,
		Ports: []event.PortMapping{{ContainerPort: 8080, HostPort: 0, Protocol: "tcp", HostIP: "127.0.0.1"}},
		Mounts: []event.Mount{{Type: "bind", Source: "/srv/data", Target: "/data", ReadOnly: true},
			{Type: "volume", Source: "cache", Target: "/cache"}, {Type: "tmpfs", Target: "/tmp", SizeMiB: 64}},
		StopSignal: "SIGTERM", StopTimeoutS: &timeout,
		HealthCheck: &event.HealthCheck{Command: []string{"CMD", "/bin/web", "ping"}, IntervalS: 10, TimeoutS: 5, Retries: 3},
		DependsOn:   []event.Dependency{{Container: "db", Condition: "HEALTHY"}},
		Log:         &event.LogConfig{MaxSizeMiB: 10, MaxFiles: 3}, PullPolicy: "if-not-present"}
	if !reflect.DeepEqual(spec, want) {
		t.Fatalf("journaled spec\n%+v\nwant\n%+v", spec, want)
	}
	// The journal's form survives its own encoding: replay and forensics see every field.
	b, _ := event.MarshalBody(&event.TaskAdded{Containers: []event.ContainerSpec{spec}})
	back, err := event.UnmarshalBody(event.TypeTaskAdded, b)
	if err != nil || !reflect.DeepEqual(back.(*event.TaskAdded).Containers[0], want) {
		t.Fatalf("journal round trip: %v\n%s", err, b)
	}
	// Under the default rules (no --allow-bind-root) the bind mount makes the task invalid.
	if d := DecodeTask(json.RawMessage(fullTask())); !strings.Contains(d.Invalid, "containers[1].mounts[0].source") ||
		!strings.Contains(d.Invalid, "--allow-bind-root") {
		t.Fatalf("bind mount without allowed roots: %q", d.Invalid)
	}
}

func TestOldJournalBodiesDecodeAndReencodeUnchanged(t *testing.T) {
	// A task_added body as journaled before PROTOCOL 1.1 §4: it decodes, and a container
	// that uses no §4 field encodes to the very same bytes (checksums, snapshots stay stable).
	old := `{"message_id":"m-1","desired":"RUNNING","containers":[{"name":"app","image":"web:1","command":["run"],"env":{"A":"1"},"essential":true}]}`
	e, err := event.UnmarshalBody(event.TypeTaskAdded, []byte(old))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := event.MarshalBody(e)
	if string(b) != old {
		t.Fatalf("re-encoded\n%s\nwant\n%s", b, old)
	}
}

func TestContainerFieldsNameTheFieldAtFault(t *testing.T) {
	rules, _ := NewRules([]string{"/srv/data", "/var/lib/app"})
	i := func(v int) *int { return &v }
	f := false
	cases := map[string]struct {
		mutate func(c *Container)
		want   string
	}{
		"bind under root":  {func(c *Container) { c.Mounts = []event.Mount{{Type: "bind", Source: "/srv/data/x", Target: "/x"}} }, ""},
		"bind is root":     {func(c *Container) { c.Mounts = []event.Mount{{Type: "bind", Source: "/srv/data", Target: "/x"}} }, ""},
		"bind beside root": {func(c *Container) { c.Mounts = []event.Mount{{Type: "bind", Source: "/srv/database", Target: "/x"}} }, "mounts[0].source: bind mount of \"/srv/database\" refused"},
		"bind escapes with ..": {func(c *Container) {
			c.Mounts = []event.Mount{{Type: "bind", Source: "/srv/data/../../etc", Target: "/x"}}
		}, "mounts[0].source"},
		"bind relative":         {func(c *Container) { c.Mounts = []event.Mount{{Type: "bind", Source: "data", Target: "/x"}} }, "not an absolute path"},
		"bind of /etc":          {func(c *Container) { c.Mounts = []event.Mount{{Type: "bind", Source: "/etc", Target: "/x"}} }, "not under an allowed root"},
		"mount type":            {func(c *Container) { c.Mounts = []event.Mount{{Type: "npipe", Target: "/x"}} }, "mounts[0].type"},
		"mount target relative": {func(c *Container) { c.Mounts = []event.Mount{{Type: "tmpfs", Target: "x"}} }, "mounts[0].target"},
		"mount target root":     {func(c *Container) { c.Mounts = []event.Mount{{Type: "tmpfs", Target: "/"}} }, "mounts[0].target"},
		"mount target twice": {func(c *Container) {
			c.Mounts = []event.Mount{{Type: "tmpfs", Target: "/x"}, {Type: "volume", Target: "/x"}}
		}, "mounts[1].target"},
		"volume name": {func(c *Container) { c.Mounts = []event.Mount{{Type: "volume", Source: "../x", Target: "/x"}} }, "not a volume name"},
		"agent's bind volume": {func(c *Container) {
			c.Mounts = []event.Mount{{Type: "volume", Source: ReservedVolumePrefix + "0123456789abcdef", Target: "/x"}}
		}, "are the agent's own"},
		"tmpfs source":           {func(c *Container) { c.Mounts = []event.Mount{{Type: "tmpfs", Source: "/x", Target: "/x"}} }, "a tmpfs has no source"},
		"size on a volume":       {func(c *Container) { c.Mounts = []event.Mount{{Type: "volume", Target: "/x", SizeMiB: 1}} }, "mounts[0].size_mib"},
		"agent label":            {func(c *Container) { c.Labels = map[string]string{"io.agentd.agent": "someone-else"} }, "labels: \"io.agentd.agent\" uses the agent's own prefix"},
		"agent label upper":      {func(c *Container) { c.Labels = map[string]string{"IO.AGENTD.task-arn": "x"} }, "labels:"},
		"empty label":            {func(c *Container) { c.Labels = map[string]string{"": "x"} }, "labels:"},
		"cpu shares":             {func(c *Container) { c.CPUShares = 1 }, "cpu_shares: 1"},
		"memory too small":       {func(c *Container) { c.MemoryMiB = 4 }, "memory_mib: 4"},
		"memory negative":        {func(c *Container) { c.MemoryMiB = -1 }, "memory_mib"},
		"reservation over limit": {func(c *Container) { c.MemoryMiB, c.MemoryReservationMiB = 64, 128 }, "memory_reservation_mib: 128 is above"},
		"pids":                   {func(c *Container) { c.PidsLimit = -1 }, "pids_limit"},
		"container port":         {func(c *Container) { c.Ports = []event.PortMapping{{ContainerPort: 0}} }, "ports[0].container_port"},
		"host port":              {func(c *Container) { c.Ports = []event.PortMapping{{ContainerPort: 80, HostPort: 70000}} }, "ports[0].host_port"},
		"protocol":               {func(c *Container) { c.Ports = []event.PortMapping{{ContainerPort: 80, Protocol: "sctp"}} }, "ports[0].protocol"},
		"host ip":                {func(c *Container) { c.Ports = []event.PortMapping{{ContainerPort: 80, HostIP: "localhost"}} }, "ports[0].host_ip"},
		"host port twice": {func(c *Container) {
			c.Ports = []event.PortMapping{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 81, HostPort: 8080, Protocol: "tcp"}}
		}, "ports[1].host_port: 8080/tcp"},
		"same host port two protocols": {func(c *Container) {
			c.Ports = []event.PortMapping{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 80, HostPort: 8080, Protocol: "udp"}}
		}, ""},
		"two picked ports":       {func(c *Container) { c.Ports = []event.PortMapping{{ContainerPort: 80}, {ContainerPort: 81}} }, ""},
		"stop signal":            {func(c *Container) { c.StopSignal = "TERM" }, "stop_signal"},
		"stop timeout negative":  {func(c *Container) { c.StopTimeoutS = i(-1) }, "stop_timeout_s: -1"},
		"stop timeout too long":  {func(c *Container) { c.StopTimeoutS = i(121) }, "stop_timeout_s: 121"},
		"stop timeout zero":      {func(c *Container) { c.StopTimeoutS = i(0) }, ""},
		"start timeout negative": {func(c *Container) { c.StartTimeoutS = i(-1) }, "start_timeout_s: -1, want 0 to 86400"},
		"start timeout too long": {func(c *Container) { c.StartTimeoutS = i(86401) }, "start_timeout_s: 86401"},
		"start timeout a day":    {func(c *Container) { c.StartTimeoutS = i(86400) }, ""},
		"start timeout zero":     {func(c *Container) { c.StartTimeoutS = i(0) }, ""},
		"health no CMD":          {func(c *Container) { c.HealthCheck = &event.HealthCheck{Command: []string{"/bin/web", "ping"}} }, "health_check.command"},
		"health CMD alone":       {func(c *Container) { c.HealthCheck = &event.HealthCheck{Command: []string{"CMD"}} }, "health_check.command"},
		"health shell": {func(c *Container) {
			c.HealthCheck = &event.HealthCheck{Command: []string{"CMD-SHELL", "curl -f localhost"}}
		}, ""},
		"health interval":   {func(c *Container) { c.HealthCheck = &event.HealthCheck{Command: []string{"CMD", "x"}, IntervalS: -1} }, "health_check.interval_s"},
		"health retries":    {func(c *Container) { c.HealthCheck = &event.HealthCheck{Command: []string{"CMD", "x"}, Retries: 1000} }, "health_check.retries"},
		"log size":          {func(c *Container) { c.Log = &event.LogConfig{MaxSizeMiB: -1} }, "log.max_size_mib"},
		"log files":         {func(c *Container) { c.Log = &event.LogConfig{MaxFiles: 101} }, "log.max_files"},
		"pull policy":       {func(c *Container) { c.PullPolicy = "sometimes" }, "pull_policy"},
		"working dir":       {func(c *Container) { c.WorkingDir = "srv" }, "working_dir"},
		"user":              {func(c *Container) { c.User = "root; rm -rf /" }, "user"},
		"entrypoint NUL":    {func(c *Container) { c.Entrypoint = []string{"/bin/\x00"} }, "entrypoint"},
		"env name with =":   {func(c *Container) { c.Env = map[string]string{"A=B": "x"} }, "env"},
		"depends on nobody": {func(c *Container) { c.DependsOn = []event.Dependency{{Container: "ghost", Condition: "START"}} }, "depends_on[0].container: \"ghost\""},
		"depends on itself": {func(c *Container) { c.DependsOn = []event.Dependency{{Container: "app", Condition: "START"}} }, "depends on itself"},
		"depends twice": {func(c *Container) {
			c.DependsOn = []event.Dependency{{Container: "side", Condition: "START"}, {Container: "side", Condition: "COMPLETE"}}
		}, "depends_on[1].container"},
		"condition":                {func(c *Container) { c.DependsOn = []event.Dependency{{Container: "side", Condition: "READY"}} }, "depends_on[0].condition"},
		"healthy without check":    {func(c *Container) { c.DependsOn = []event.Dependency{{Container: "side", Condition: "HEALTHY"}} }, "has no health_check"},
		"success of non-essential": {func(c *Container) { c.DependsOn = []event.Dependency{{Container: "side", Condition: "SUCCESS"}} }, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			task := Task{ARN: "task/1", DesiredStatus: "RUNNING", Containers: []Container{
				{Name: "app", Image: "web:1"}, {Name: "side", Image: "side:1", Essential: &f}}}
			tc.mutate(&task.Containers[0])
			err := rules.Validate(&task)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused a valid task: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "containers[0].") {
				t.Fatalf("%v; want an error naming containers[0] and containing %q", err, tc.want)
			}
		})
	}
}

// start_timeout_s is a whole number of seconds: anything else on the wire makes the task
// invalid (recorded STOPPED) with a reason naming the field, never a panic or a lost task.
func TestStartTimeoutOnTheWire(t *testing.T) {
	task := func(v string) json.RawMessage {
		return json.RawMessage(`{"arn":"task/st","desired_status":"RUNNING","containers":[` +
			`{"name":"db","image":"db:1","health_check":{"command":["CMD","/bin/db","ping"]},"start_timeout_s":` + v + `},` +
			`{"name":"web","image":"web:1","depends_on":[{"container":"db","condition":"HEALTHY"}]}]}`)
	}
	for v, want := range map[string]string{
		"30":    "",
		"0":     "",
		"null":  "", // absent: no limit
		"-5":    "containers[0].start_timeout_s: -5",
		"86401": "containers[0].start_timeout_s: 86401",
		"1.5":   "start_timeout_s",
		`"30s"`: "start_timeout_s",
		"1e30":  "start_timeout_s",
		"true":  "start_timeout_s",
	} {
		d := DecodeTask(task(v))
		if d.ARN != "task/st" {
			t.Fatalf("start_timeout_s %s: the task lost its ARN (%q): it could not be recorded STOPPED", v, d.Invalid)
		}
		if want == "" {
			if d.Invalid != "" {
				t.Errorf("start_timeout_s %s refused: %s", v, d.Invalid)
			}
			continue
		}
		if !strings.Contains(d.Invalid, want) {
			t.Errorf("start_timeout_s %s: reason %q; want it to name %q", v, d.Invalid, want)
		}
	}
	if got := DecodeTask(task("30")).Task.Spec()[0].StartTimeoutS; got == nil || *got != 30 {
		t.Fatalf("start_timeout_s 30 journaled as %v", got)
	}
}

func TestDependenciesThatCannotBeMetAreRefused(t *testing.T) {
	ess := true
	task := Task{ARN: "task/1", DesiredStatus: "RUNNING", Containers: []Container{
		{Name: "a", Image: "a:1", DependsOn: []event.Dependency{{Container: "b", Condition: "SUCCESS"}}},
		{Name: "b", Image: "b:1", Essential: &ess}}}
	if err := Validate(&task); err == nil || !strings.Contains(err.Error(), `"b" is essential`) {
		t.Fatalf("SUCCESS of an essential container: %v", err)
	}
	task.Containers[1].Essential = nil // absent is essential too
	if err := Validate(&task); err == nil {
		t.Fatal("SUCCESS of a container essential by default was accepted")
	}
	f := false
	task.Containers[1].Essential = &f
	task.Containers[1].DependsOn = []event.Dependency{{Container: "a", Condition: "START"}}
	if err := Validate(&task); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("a cycle: %v", err)
	}
}

func TestNewRulesNamesABadRoot(t *testing.T) {
	if _, err := NewRules([]string{"relative/dir"}); err == nil || !strings.Contains(err.Error(), `--allow-bind-root "relative/dir"`) {
		t.Fatalf("relative root: %v", err)
	}
	r, err := NewRules([]string{"/"})
	if err != nil || !r.bindAllowed("/etc") {
		t.Fatalf("root / allows everything: %v", err)
	}
}

// TestHostPortConflicts: two ports of a container conflict when they ask for the same host
// port and protocol on host IPs that share an address (HostIPsOverlap's rules); the refusal
// names both ports and both addresses.
func TestHostPortConflicts(t *testing.T) {
	cases := []struct {
		ipA, protoA, ipB, protoB string
		conflict                 bool
	}{
		{"127.0.0.1", "", "127.0.0.2", "", false},        // two specific addresses
		{"127.0.0.1", "", "127.0.0.1", "tcp", true},      // the same one
		{"127.0.0.1", "tcp", "127.0.0.1", "udp", false},  // tcp and udp are apart
		{"", "", "127.0.0.1", "", true},                  // the default takes every address
		{"::1", "", "", "", true},                        //   of both families
		{"0.0.0.0", "", "10.0.0.1", "", true},            // 0.0.0.0 takes every IPv4 address
		{"0.0.0.0", "", "::1", "", false},                //   and no IPv6 one
		{"0.0.0.0", "udp", "10.0.0.1", "tcp", false},     //   per protocol
		{"::", "", "::1", "", true},                      // :: takes every IPv6 address
		{"::", "", "10.0.0.1", "", true},                 //   and IPv4 too (dual-stack, bindv6only unknown)
		{"::1", "", "0:0:0:0:0:0:0:1", "", true},         // one address, two spellings
		{"::ffff:10.0.0.1", "", "10.0.0.1", "", true},    // IPv4-mapped is IPv4
		{"::ffff:0.0.0.0", "", "192.0.2.1", "", true},    //   the unspecified one too
		{"2001:db8::1", "", "2001:db8::2", "", false},    // two IPv6 addresses
		{"2001:db8::1", "", "2001:DB8:0::1", "", true},   //   one, in upper case
		{"192.0.2.1", "", "::ffff:192.0.2.2", "", false}, // two IPv4 addresses, one mapped
		{"10.0.0.1", "", "fe80::1", "", false},           // one of each family
		{"0.0.0.0", "", "0.0.0.0", "", true},             // the same
		{"", "udp", "", "udp", true},                     // the default twice
		{"10.0.0.1", "udp", "0.0.0.0", "udp", true},      // either order
		{"::ffff:127.0.0.1", "", "::ffff:127.0.0.2", "", false},
	}
	for _, c := range cases {
		ports := []event.PortMapping{
			{ContainerPort: 80, HostPort: 8080, Protocol: c.protoA, HostIP: c.ipA},
			{ContainerPort: 81, HostPort: 8080, Protocol: c.protoB, HostIP: c.ipB},
		}
		err := Rules{}.validatePorts(ports)
		if !c.conflict {
			if err != nil {
				t.Errorf("%q/%s and %q/%s: %v; want no conflict", c.ipA, c.protoA, c.ipB, c.protoB, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "ports[1].host_port: 8080/") || !strings.Contains(err.Error(), "ports[0]") ||
			!strings.Contains(err.Error(), hostIPName(c.ipA)) || !strings.Contains(err.Error(), hostIPName(c.ipB)) {
			t.Errorf("%q/%s and %q/%s: %v; want a conflict naming both ports and addresses", c.ipA, c.protoA, c.ipB, c.protoB, err)
		}
		// The rule is symmetric, and another host port is never a conflict.
		if HostIPsOverlap(c.ipA, c.ipB) != HostIPsOverlap(c.ipB, c.ipA) {
			t.Errorf("%q and %q: the rule is not symmetric", c.ipA, c.ipB)
		}
		ports[1].HostPort = 8081
		if err := (Rules{}).validatePorts(ports); err != nil {
			t.Errorf("%q and %q on two host ports: %v", c.ipA, c.ipB, err)
		}
	}
}

// A task may not publish the agent's own API port: it would hold it while the agent is down,
// behind a root-owned docker-proxy that the agent's own clients trust.
func TestTheAgentsAPIPortIsReserved(t *testing.T) {
	r := Rules{ReservedHostPorts: []int{51678}}
	for _, c := range []struct {
		port   event.PortMapping
		refuse bool
	}{
		{event.PortMapping{ContainerPort: 80, HostPort: 51678}, true},
		{event.PortMapping{ContainerPort: 80, HostPort: 51678, Protocol: "tcp", HostIP: "127.0.0.1"}, true},
		{event.PortMapping{ContainerPort: 80, HostPort: 51678, Protocol: "udp"}, false},
		{event.PortMapping{ContainerPort: 80, HostPort: 51679}, false},
		{event.PortMapping{ContainerPort: 51678}, false},
	} {
		err := r.validatePorts([]event.PortMapping{c.port})
		if c.refuse != (err != nil) || (err != nil && !strings.Contains(err.Error(), "ports[0].host_port: 51678 is the agent's own API port")) {
			t.Errorf("%+v: %v; want refused %v, naming the field", c.port, err, c.refuse)
		}
	}
	if err := (Rules{}).validatePorts([]event.PortMapping{{ContainerPort: 80, HostPort: 51678}}); err != nil {
		t.Errorf("without a reserved port: %v", err)
	}
}
