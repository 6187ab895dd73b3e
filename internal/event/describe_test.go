package event

import "testing"

func TestDescribeShowsTheWorkloadFields(t *testing.T) {
	old := Describe(&TaskAdded{Desired: StatusRunning, Containers: []ContainerSpec{{Name: "app", Image: "web:1"}}})
	if old != "desired=RUNNING containers=app" {
		t.Fatalf("a container without §4 fields: %q (journal dumps of old journals must not change)", old)
	}
	got := Describe(&TaskAdded{Desired: StatusRunning, Containers: []ContainerSpec{{Name: "web", MemoryMiB: 256,
		Ports: []PortMapping{{ContainerPort: 8080, Protocol: "tcp"}}, HealthCheck: &HealthCheck{Command: []string{"CMD", "x"}},
		DependsOn: []Dependency{{Container: "db", Condition: DependHealthy}}}, {Name: "db"}}})
	want := "desired=RUNNING containers=web,db web[memory_mib=256 ports=8080→0/tcp health_check depends_on=db:HEALTHY]"
	if got != want {
		t.Fatalf("%q\nwant %q", got, want)
	}
}
