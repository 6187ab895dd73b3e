// Command testbox is the test container program: a tiny static binary that obeys the command
// words of DESIGN.md ("Runtimes"), so one scenario runs on the simulated runtime and on Docker.
//
//	[] or ["run"]          runs until stopped; SIGTERM ends it with exit code 143
//	["sleep", "2s"]        runs 2 s, then exits 0
//	["sleep", "2s", "3"]   runs 2 s, then exits 3
//	["exit", "3"]          exits 3 at once
//
// It is built into the image agentd-testbox:latest by `make testbox-image`, without a registry.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
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
	var after <-chan time.Time
	code := 0
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
	default:
		fail("unknown command %q (run, sleep D [CODE], exit CODE)", args)
	}
	fmt.Println("testbox:", args)
	select {
	case <-term:
		os.Exit(143)
	case <-after:
		os.Exit(code)
	}
}
