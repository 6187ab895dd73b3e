package introspect_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/introspect"
)

// A followed container log holds its request like a long poll, so it counts against the same
// bound: eight at once, the ninth refused, while a plain read of the log still passes.
func TestFollowedLogsCountAsLongPolls(t *testing.T) {
	release := make(chan struct{})
	var entered sync.WaitGroup
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") == "1" {
			entered.Done()
			<-release
		}
	})
	api, _ := introspect.Guard(introspect.Options{Listen: "127.0.0.1:0"})
	ln, _ := serve(t, api, h)
	url := fmt.Sprintf("http://%s/v1/tasks/task/1/containers/app/logs", ln.Addr())
	c := &http.Client{Timeout: 10 * time.Second}
	const bound = 8
	entered.Add(bound)
	done := make(chan int, bound)
	for i := 0; i < bound; i++ {
		go func() {
			resp, err := c.Get(url + "?follow=1")
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	entered.Wait()
	if code := status(t, c, url+"?follow=1", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("followed log past the bound: HTTP %d, want 503", code)
	}
	if code := status(t, c, url+"?tail=5", ""); code != http.StatusOK {
		t.Fatalf("a plain log read while eight are followed: HTTP %d, want 200", code)
	}
	close(release)
	for i := 0; i < bound; i++ {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("a followed log within the bound: HTTP %d", code)
		}
	}
}
