package protocol

import (
	"strings"
	"testing"
)

// The engine's own parser decides: what Docker pulls is accepted (the regex this replaced
// refused the first three), and what it would refuse never reaches a runtime, with the field
// named.
func TestImageReferencesAreThoseTheEngineTakes(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	cases := []struct {
		image string
		ok    bool
	}{
		{"Registry.Example.com/app:1", true},
		{"[::1]:5000/app:1", true},
		{"a--b/c:1", true},
		{"localhost:5000/a/b:1.2", true},
		{"127.0.0.1:5000/app@" + digest, true},
		{"web@" + digest, true},
		{"web:1@" + digest, true},
		{"busybox", true},
		{"docker.io/library/busybox:latest", true},
		{"a__b/c", true},
		{"UPPER/Case", false},
		{"app:1:2", false},
		{"app:", false},
		{"-app", false},
		{"app/", false},
		{"app//b", false},
		{"app@sha256:abc", false},
		{strings.Repeat("a", 64), false}, // an image id is not a reference
		{"app:1 ; rm -rf /", false},
		{"app\x00", false},
		{"https://registry.example/app:1", false},
		{"app:" + strings.Repeat("t", 129), false},
	}
	for _, c := range cases {
		task := Task{ARN: "task/1", DesiredStatus: "RUNNING", Containers: []Container{{Name: "app", Image: c.image}}}
		err := Validate(&task)
		if c.ok && err != nil {
			t.Errorf("%q refused: %v", c.image, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "containers[0].image:")) {
			t.Errorf("%q: %v; want it refused, naming containers[0].image", c.image, err)
		}
	}
}
