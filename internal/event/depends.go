package event

// Met says where a dependency stands given what the projection knows of the container it
// names: its known status, exit code (nil until known) and health verdict. met: the
// dependent may start. impossible: the condition can never hold any more (the container
// stopped without meeting it), so the task stops with a reason naming the dependency
// (PROTOCOL.md §4). Neither: wait.
//
// It is pure, so the projection's decisions can use it on replay as in live operation.
func (d Dependency) Met(known Status, exitCode *int, health Health) (met, impossible bool) {
	stopped := known == StatusStopped
	switch d.Condition {
	case DependStart:
		// Started is RUNNING or later; a container that stopped without ever running (a
		// failed pull, create or start) never started.
		if known == StatusRunning || (stopped && exitCode != nil) {
			return true, false
		}
		return false, stopped
	case DependComplete:
		return stopped, false
	case DependSuccess:
		if stopped {
			ok := exitCode != nil && *exitCode == 0
			return ok, !ok
		}
		return false, false
	case DependHealthy:
		if health == HealthHealthy && known == StatusRunning {
			return true, false
		}
		return false, stopped
	}
	return false, true // an unknown condition never holds (validation refuses it at arrival)
}

// OutOfMemoryReason is the reason of a container the kernel killed for going over its
// memory limit; the protocol has it start with "OutOfMemory".
const OutOfMemoryReason = "OutOfMemory: killed for going over its memory limit"
