package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
)

func TestValidateNamesTheFieldAtFault(t *testing.T) {
	ok := func() Task {
		return Task{ARN: "task/1", DesiredStatus: "RUNNING", Containers: []Container{{Name: "app", Image: "registry.example/web:3"}}}
	}
	cases := map[string]struct {
		mutate func(*Task)
		want   string
	}{
		"valid":            {func(*Task) {}, ""},
		"no arn":           {func(t *Task) { t.ARN = "" }, "arn: missing"},
		"bad desired":      {func(t *Task) { t.DesiredStatus = "PAUSED" }, "desired_status"},
		"no containers":    {func(t *Task) { t.Containers = nil }, "containers: none"},
		"too many":         {func(t *Task) { t.Containers = make([]Container, 11) }, "containers: 11, at most 10"},
		"bad name":         {func(t *Task) { t.Containers[0].Name = "-x" }, "containers[0].name"},
		"long name":        {func(t *Task) { t.Containers[0].Name = strings.Repeat("a", 64) }, "containers[0].name"},
		"duplicate name":   {func(t *Task) { t.Containers = append(t.Containers, t.Containers[0]) }, "used twice"},
		"empty image":      {func(t *Task) { t.Containers[0].Image = "" }, "containers[0].image: empty"},
		"bad image":        {func(t *Task) { t.Containers[0].Image = "UPPER/Case" }, "not an image reference"},
		"env too large":    {func(t *Task) { t.Containers[0].Env = map[string]string{"A": strings.Repeat("x", 65<<10)} }, "containers[0].env"},
		"digest ok":        {func(t *Task) { t.Containers[0].Image = "web@sha256:" + strings.Repeat("a", 64) }, ""},
		"registry port ok": {func(t *Task) { t.Containers[0].Image = "localhost:5000/a/b:1.2" }, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			task := ok()
			tc.mutate(&task)
			err := Validate(&task)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused a valid task: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeTaskSalvagesTheARN(t *testing.T) {
	d := DecodeTask(json.RawMessage(`{"arn":"task/x","containers":"nope"}`))
	if d.ARN != "task/x" || d.Invalid == "" {
		t.Fatalf("%+v: want the arn kept and the task invalid", d)
	}
	d = DecodeTask(json.RawMessage(`{"arn":"task/y","desired_status":"RUNNING","extra":1,"containers":[{"name":"a","image":"b","privileged":true}]}`))
	if d.Invalid != "" || d.Task.Spec()[0].Essential != true {
		t.Fatalf("%+v: unknown fields are ignored and essential defaults to true", d)
	}
}

// FuzzDecodeTask: any bytes give a decision or an error naming a field, never a panic.
func FuzzDecodeTask(f *testing.F) {
	f.Add([]byte(`{"arn":"task/7f3a","family":"web","version":"3","desired_status":"RUNNING","containers":[{"name":"app","image":"registry.example/web:3","command":["serve"],"env":{"PORT":"8080"},"essential":true}]}`))
	f.Add([]byte(`{"arn":"t","containers":[]}`))
	f.Add([]byte(`[]`))
	// PROTOCOL.md 1.1 §4: every container field, and near misses of each.
	f.Add([]byte(fullTask()))
	f.Add([]byte(`{"arn":"t","desired_status":"RUNNING","containers":[{"name":"a","image":"b","ports":[{"container_port":80,"host_port":-1}],"mounts":[{"type":"bind","source":"/srv/../etc","target":"/x"}]}]}`))
	f.Add([]byte(`{"arn":"t","desired_status":"RUNNING","containers":[{"name":"a","image":"b","stop_timeout_s":"30","health_check":{"command":"CMD"},"log":{"max_files":1e9}}]}`))
	f.Add([]byte(`{"arn":"t","desired_status":"RUNNING","containers":[{"name":"a","image":"b","depends_on":[{"container":"a","condition":"HEALTHY"}],"labels":{"io.agentd.agent":"x"}}]}`))
	f.Add([]byte(`{"arn":"t","desired_status":"RUNNING","containers":[{"name":"a","image":"b","memory_mib":9223372036854775807,"cpu_shares":-5,"user":"0:0","working_dir":"/"}]}`))
	rules, _ := NewRules([]string{"/srv"})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, r := range []Rules{{}, rules} {
			d := r.DecodeTask(b)
			if d.Invalid == "" && (d.Task == nil || r.Validate(d.Task) != nil) {
				t.Fatalf("accepted an invalid task: %s", b)
			}
			if d.Invalid != "" {
				continue
			}
			// What is accepted is journaled and replayed: the spec survives its encoding.
			specs := d.Task.Spec()
			body, err := event.MarshalBody(&event.TaskAdded{Containers: specs})
			if err != nil {
				t.Fatalf("accepted task does not encode: %v", err)
			}
			if _, err := event.UnmarshalBody(event.TypeTaskAdded, body); err != nil {
				t.Fatalf("accepted task's record does not decode: %v", err)
			}
			for _, c := range specs {
				for _, m := range c.Mounts {
					if m.Type == event.MountBind && !r.bindAllowed(m.Source) {
						t.Fatalf("accepted a bind of %q outside %v", m.Source, r.AllowBindRoots)
					}
				}
				for k := range c.Labels {
					if strings.HasPrefix(strings.ToLower(k), AgentLabelPrefix) {
						t.Fatalf("accepted the agent's own label %q", k)
					}
				}
			}
		}
	})
}

// FuzzClassifyReport: any answer gives an outcome, never a panic, and only a readable 200
// settles anything.
func FuzzClassifyReport(f *testing.F) {
	f.Add(200, "", []byte(`{"accepted":["c-1"],"rejected":[{"id":"c-2","error":"unknown_task"}]}`))
	f.Add(429, "2", []byte(``))
	f.Add(429, "Wed, 21 Oct 2015 07:28:00 GMT", []byte(``))
	f.Add(400, "", []byte(`{"error":"changes: 0"}`))
	f.Add(200, "", []byte(`<html>`))
	f.Add(503, "", []byte(`x`))
	f.Fuzz(func(t *testing.T, status int, retryAfter string, body []byte) {
		r := ClassifyReport(status, retryAfter, body, time.Now())
		if r.Outcome == "" {
			t.Fatal("no outcome")
		}
		if r.Outcome != Settled && (len(r.Accepted) > 0 || len(r.Rejected) > 0) {
			t.Fatalf("status %d settled changes as %s", status, r.Outcome)
		}
		if r.Outcome == Settled && status != 200 {
			t.Fatalf("status %d settled", status)
		}
		if r.RetryAfter < 0 || r.RetryAfter > MaxRetryAfter {
			t.Fatalf("Retry-After %q gave %v", retryAfter, r.RetryAfter)
		}
	})
}
