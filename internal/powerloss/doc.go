// Package powerloss holds agentd's power-loss tests (issue 44): a journal workload run on a
// lazy file system (internal/lazyfs), every crash state its log allows checked, and the
// tests that show the suite catches a planted missing fsync. A SIGKILL leaves every write in
// the kernel's cache; these states are what a host that loses power keeps.
//
// The promise they hold agentd to: in every crash state the journal opens, or is refused by an
// error naming the file and the damage (never a panic, never a silent fresh journal); every
// append acknowledged before the cut is there with its sequence number; the projection's
// checker (agentd journal verify) finds nothing; the seal key and the shipping position are an
// old or a new value, never torn. Run them with make test-powerloss (root and /dev/fuse).
package powerloss
