//go:build !failpoints

// Package failpoint names the moments where a crash would hurt most — between a journal
// commit and what follows it — so that tests can kill a real process exactly there.
//
// In a normal build Hit is an empty function the compiler inlines away: failpoints cost
// nothing in production. Built with -tags failpoints, Hit(name) SIGKILLs the process when
// AGENTD_FAILPOINT names that point (name@N: at its N-th hit).
package failpoint

// Hit marks a crash point.
func Hit(name string) {}
