//go:build syncbug

package journal

// A planted durability bug, for the power-loss suite's test of itself (make test-powerloss,
// internal/powerloss): group commits of records skip bbolt's two fdatasyncs, so Append
// acknowledges records that are still only in the page cache. A SIGKILL never notices; a
// power cut loses them. Never build agentd with this tag.
func init() { skipRecordSync = true }
