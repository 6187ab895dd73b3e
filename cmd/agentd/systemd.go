package main

import (
	"context"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/agentd/agentd/internal/fsm"
)

// notifySystemd speaks systemd's notify protocol when systemd started the agent as a
// Type=notify service ($NOTIFY_SOCKET set; otherwise it returns at once and costs nothing):
//
//   - READY=1 once recovery has finished and the engine's loop answers a query: the same
//     moment /healthz can answer 200, so `systemctl start agentd` returns when the agent
//     really serves, and units ordered after it start then.
//   - WATCHDOG=1 every third of WatchdogSec, but only after the loop has answered an empty
//     query within that third. The query runs on the loop's own goroutine, so a loop that is
//     wedged (a deadlock, a call that never returns) stops the pings, and systemd kills and
//     restarts the agent, where a ticker of its own would have kept pinging forever.
//   - STOPPING=1 when the agent is asked to stop.
//
// It runs until ctx ends.
func (a *agent) notifySystemd(ctx context.Context) {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return // not started by systemd as a notify service: nothing to tell anyone
	}
	answers := func(within time.Duration) bool {
		qctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		return a.eng.Query(qctx, func(*fsm.State) {}) == nil
	}
	for !answers(time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	a.sdNotify(daemon.SdNotifyReady + "\nSTATUS=recovered; serving on " + a.listen)
	defer a.sdNotify(daemon.SdNotifyStopping)

	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		a.log.Warn().Err(err).Msg("systemd: the watchdog settings cannot be read; no watchdog pings")
	}
	if interval <= 0 {
		<-ctx.Done()
		return
	}
	period := interval / 3
	tick := time.NewTicker(period)
	defer tick.Stop()
	silent := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if answers(period) {
			a.sdNotify(daemon.SdNotifyWatchdog)
			if silent {
				a.log.Info().Msg("systemd watchdog: the engine's loop answers again; pings resume")
				silent = false
			}
		} else if ctx.Err() == nil && !silent {
			a.log.Error().Dur("within", period).Msg("systemd watchdog: the engine's loop did not answer; withholding pings so systemd restarts the agent")
			silent = true
		}
	}
}

func (a *agent) sdNotify(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		a.log.Warn().Err(err).Str("state", state).Msg("systemd: notification failed")
	}
}
