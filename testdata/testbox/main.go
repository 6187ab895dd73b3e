// Command testbox is the test container program: a tiny static binary that obeys the command
// words of DESIGN.md ("Runtimes"), so one scenario runs on the simulated runtime and on Docker.
//
//	[] or ["run"]            runs until stopped; SIGTERM ends it with exit code 143
//	["sleep", "2s"]          runs 2 s, then exits 0
//	["sleep", "2s", "3"]     runs 2 s, then exits 3
//	["exit", "3"]            exits 3 at once
//	["serve", "8080"]        answers HTTP on port 8080 until stopped: GET / says "testbox <hostname>",
//	                         GET /healthz is 200 until someone GETs /sick, 503 after
//	["probe", "8080"]        the health-check word: exits 0 if 127.0.0.1:8080/healthz answers 200, else 1
//	["alloc", "64"]          allocates and touches 64 MiB, then runs until stopped
//	["write", "/d/f", "hi"]  writes "hi" to /d/f, then exits 0
//	["cat", "/d/f"]          prints the content of /d/f to stdout, then exits 0 (2 if it cannot read it)
//	["linger", "5s"]         runs until stopped; SIGTERM makes it exit 0 after 5 s
//	["spew", "1024"]         writes 1024 KiB of numbered lines to stdout and one line to stderr, then runs until stopped
//
// The image has no shell: a health check runs testbox itself, ["CMD", "/testbox", "probe", "8080"].
// It is built into the image agentd-testbox:latest by `make testbox-image`, without a registry.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	term := make(chan os.Signal, 1)
	// As PID 1 a signal without a handler is ignored: handle SIGTERM and SIGINT ourselves.
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	args := os.Args[1:]
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "testbox: "+format+"\n", a...)
		os.Exit(2)
	}
	number := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			fail("%q: want a number", s)
		}
		return n
	}
	var after <-chan time.Time
	code := 0
	onTerm := func() { os.Exit(143) }
	switch {
	case len(args) == 0 || (len(args) == 1 && args[0] == "run"):
	case args[0] == "sleep" && (len(args) == 2 || len(args) == 3):
		d, err := time.ParseDuration(args[1])
		if err != nil {
			fail("sleep %q: %v", args[1], err)
		}
		if len(args) == 3 {
			if code, err = strconv.Atoi(args[2]); err != nil {
				fail("exit code %q: %v", args[2], err)
			}
		}
		after = time.After(d)
	case args[0] == "exit" && len(args) == 2:
		c, err := strconv.Atoi(args[1])
		if err != nil {
			fail("exit code %q: %v", args[1], err)
		}
		os.Exit(c)
	case args[0] == "serve" && len(args) == 2:
		serve(number(args[1]), fail)
	case args[0] == "probe" && len(args) == 2:
		os.Exit(probe(number(args[1])))
	case args[0] == "alloc" && len(args) == 2:
		alloc(number(args[1]))
	case args[0] == "write" && len(args) == 3:
		if err := os.WriteFile(args[1], []byte(args[2]), 0o644); err != nil {
			fail("write: %v", err)
		}
		os.Exit(0)
	case args[0] == "cat" && len(args) == 2:
		b, err := os.ReadFile(args[1])
		if err != nil {
			fail("cat: %v", err)
		}
		os.Stdout.Write(b)
		os.Exit(0)
	case args[0] == "linger" && len(args) == 2:
		d, err := time.ParseDuration(args[1])
		if err != nil {
			fail("linger %q: %v", args[1], err)
		}
		onTerm = func() { time.Sleep(d); os.Exit(0) }
	case args[0] == "spew" && len(args) == 2:
		spew(number(args[1]))
	default:
		fail("unknown command %q (run, sleep D [CODE], exit CODE, serve PORT, probe PORT, alloc MIB, write PATH TEXT, cat PATH, linger D, spew KIB)", args)
	}
	fmt.Println("testbox:", args)
	select {
	case <-term:
		onTerm()
	case <-after:
		os.Exit(code)
	}
}

// serve answers HTTP on port until the process ends; /healthz turns 503 for good after /sick.
func serve(port int, fail func(string, ...any)) {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		fail("serve: %v", err)
	}
	var sick atomic.Bool
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "testbox %s\n", host) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if sick.Load() {
			http.Error(w, "sick", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/sick", func(w http.ResponseWriter, r *http.Request) { sick.Store(true); fmt.Fprintln(w, "sick from now on") })
	go func() { _ = http.Serve(ln, mux) }()
}

func probe(port int) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil {
		fmt.Println("probe:", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Println("probe:", resp.Status)
		return 1
	}
	return 0
}

// held keeps the allocation reachable, so it is not collected.
var held [][]byte

// alloc allocates mib MiB in 1 MiB pieces and touches every page, so the memory is resident
// and a limit below it is crossed.
func alloc(mib int) {
	for i := 0; i < mib; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		held = append(held, b)
	}
	fmt.Printf("testbox: allocated %d MiB\n", mib)
}

// spew writes kib KiB of numbered lines to stdout and one line to stderr.
func spew(kib int) {
	line := make([]byte, 0, 128)
	total := 0
	for n := 0; total < kib<<10; n++ {
		line = fmt.Appendf(line[:0], "line %08d %s\n", n, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
		os.Stdout.Write(line)
		total += len(line)
	}
	fmt.Fprintln(os.Stderr, "testbox: spewed", kib, "KiB")
}
