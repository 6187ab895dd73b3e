package event

import (
	"encoding/json"
	"testing"
)

// A record's body decodes to exactly one value of its type: bytes after it are damage the
// checksum cannot see (a writer's bug), refused by name rather than half read.
func TestABodyDecodesToOneValueAndNoMore(t *testing.T) {
	code := 3
	typ := (&ContainerTransitioned{}).Type()
	body, err := json.Marshal(&ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &code})
	if err != nil {
		t.Fatal(err)
	}
	e, err := UnmarshalBody(typ, body)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.(*ContainerTransitioned); got.To != "STOPPED" || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Fatalf("decoded %+v", got)
	}
	for _, bad := range []string{string(body) + string(body), string(body) + "]", string(body) + " x", "", "{"} {
		if _, err := UnmarshalBody(typ, []byte(bad)); err == nil {
			t.Errorf("body %q decoded without error", bad)
		}
	}
}
