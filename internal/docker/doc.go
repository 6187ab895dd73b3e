// Package docker is agentd's Docker Engine runtime: the runtime contract (package runtime)
// kept by a real engine through its API socket. The simulated runtime (package simruntime)
// keeps the same contract; package runtimetest holds the tests both pass.
//
// Images (issue 17): PullImage pulls as a pull policy says and reports the digest it used
// (pull.go: retries of transient failures, an inactivity timeout instead of a deadline, a
// cached image when "always" cannot reach the registry); registry credentials come from a
// Docker config.json re-read when it changes (registryauth.go) and never appear in an error
// or a log line; an image is the agent's only when its pull fetched an id the engine lacked,
// and RemoveImage takes back only the agent's names of it (an untag, never forced: Docker
// deletes the image with its last name; images.go).
package docker
