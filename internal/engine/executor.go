package engine

// Executor runs slow work (runtime calls, HTTP) off the loop. The input f returns is handed
// back to the loop.
type Executor interface {
	Go(f func() Input)
}

// goExecutor runs work on goroutines, at most Workers at once, and hands results to the loop.
// Slow work (pulls, which may take minutes) has slots of its own, so it never holds up a stop.
type goExecutor struct {
	e    *Engine
	sem  chan struct{}
	slow chan struct{}
}

func (g *goExecutor) Go(f func() Input) { g.run(g.sem, f) }

// GoSlow runs work that may take minutes, on the slow slots.
func (g *goExecutor) GoSlow(f func() Input) { g.run(g.slow, f) }

func (g *goExecutor) run(sem chan struct{}, f func() Input) {
	g.e.inbox.wg.Add(1)
	go func() {
		defer g.e.inbox.wg.Done()
		sem <- struct{}{}
		in := f()
		<-sem
		if in != nil {
			g.e.inbox.in <- in
		}
	}()
}

// slowExecutor is an Executor with separate slots for slow work.
type slowExecutor interface{ GoSlow(f func() Input) }
