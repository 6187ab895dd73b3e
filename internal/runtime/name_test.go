package runtime

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"testing"
)

// TestNames: a container's name carries the agent id, the task's id and the container's name
// readably, stays within Docker's name rules whatever the ids hold, and keeps apart what the
// names before (a 32-bit FNV of the ARN) let collide: two ARNs whose FNV-1a agree, found here
// by a search of a fraction of a second, and one ARN on two agents sharing an engine.
func TestNames(t *testing.T) {
	dockerName := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)
	n := Name("agent-0123456789abcdef", "arn:aws:ecs:eu-west-1:1:task/7f3a", "app")
	if !strings.HasPrefix(n, "agentd-agent-0123456789abcdef-7f3a-app-") || !dockerName.MatchString(n) {
		t.Fatalf("name %q: want agentd-<agent id>-<task id>-<container>-<digest>", n)
	}
	if d := n[strings.LastIndex(n, "-")+1:]; len(d) < 16 {
		t.Fatalf("name %q: digest %q has fewer than 64 bits", n, d)
	}
	for _, ids := range [][2]string{{"agent é/x\x00", "task/ü ß"}, {"", ""}, {strings.Repeat("a", 300), strings.Repeat("t/", 300)}} {
		if n := Name(ids[0], ids[1], "c"); !dockerName.MatchString(n) || len(n) > 128 {
			t.Errorf("Name(%q, %q) = %q: not a Docker name of bounded length", ids[0], ids[1], n)
		}
	}

	a, b := fnvCollision(t, "cluster-%d/task1")
	if oldName(a, "app") != oldName(b, "app") {
		t.Fatalf("%q and %q: the names before were not the same (%s, %s)", a, b, oldName(a, "app"), oldName(b, "app"))
	}
	if Name("agent-1", a, "app") == Name("agent-1", b, "app") {
		t.Fatalf("%q and %q, whose FNV-1a collide, get one name: %s", a, b, Name("agent-1", a, "app"))
	}
	if Name("agent-old", a, "app") == Name("agent-new", a, "app") {
		t.Fatal("one ARN on two agents gets one name")
	}
	if Name("a", "b/c", "x") == Name("ab", "/c", "x") {
		t.Fatal("agent id and ARN are not kept apart in the digest")
	}
}

// oldName is the name agentd gave containers before names carried the agent id.
func oldName(task, container string) string {
	h := fnv.New32a()
	h.Write([]byte(task))
	return fmt.Sprintf("agentd-%s-%s-%08x", nameTail(task, "/:", 40), container, h.Sum32())
}

// fnvCollision finds two ARNs of the pattern (with %d) whose 32-bit FNV-1a agree.
func fnvCollision(t *testing.T, pattern string) (string, string) {
	seen := map[uint32]string{}
	for i := 0; i < 1<<22; i++ {
		arn := fmt.Sprintf(pattern, i)
		h := fnv.New32a()
		h.Write([]byte(arn))
		if other, ok := seen[h.Sum32()]; ok {
			return other, arn
		}
		seen[h.Sum32()] = arn
	}
	t.Fatal("no FNV-1a collision among 4M ARNs")
	return "", ""
}
