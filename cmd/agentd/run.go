package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/backend"
	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/seal"
	"github.com/agentd/agentd/internal/simruntime"
)

// defaultDataDir is where `agentd run` keeps its journal, and where `agentd journal` looks.
const defaultDataDir = "/var/lib/agentd"

type runCmd struct {
	DataDir       string        `default:"/var/lib/agentd" env:"AGENTD_DATA_DIR" help:"Directory of the journal (journal.db) and the simulated runtime's file."`
	Backend       string        `required:"" env:"AGENTD_BACKEND" help:"Control plane base URL (http:// or https://)."`
	TokenFile     string        `env:"AGENTD_TOKEN_FILE" help:"File holding the bearer token; re-read when it changes."`
	CAFile        string        `env:"AGENTD_CA_FILE" help:"Extra CA certificates (PEM) for an https backend."`
	AgentID       string        `env:"AGENTD_AGENT_ID" help:"Agent id; generated on first start and kept in the journal when not given."`
	Runtime       string        `default:"docker" enum:"docker,sim" env:"AGENTD_RUNTIME" help:"Container runtime: docker or sim."`
	DockerHost    string        `env:"AGENTD_DOCKER_HOST" help:"Docker Engine address (default: the client's environment and defaults)."`
	CleanupWait   time.Duration `default:"3h" env:"AGENTD_CLEANUP_WAIT" help:"How long a stopped, acknowledged task is kept before cleanup, from its journaled stop time."`
	Listen        string        `default:"127.0.0.1:51678" env:"AGENTD_LISTEN" help:"Introspection API address."`
	Retention     time.Duration `default:"168h" env:"AGENTD_RETENTION" help:"How long the history and tombstone of a cleaned task are kept: a re-sent task is recognised for this long, and the id of a payload that still holds a live task is kept while that task lives, so a re-send of it never runs a task again. Negative: forever."`
	SnapshotEvery uint64        `hidden:"" default:"20000" env:"AGENTD_SNAPSHOT_EVERY" help:"Records between projection snapshots."`
	// JournalMaxBytes (issue 25): the disk the journal may take, whatever the retention.
	JournalMaxBytes int64 `default:"1073741824" env:"AGENTD_JOURNAL_MAX_BYTES" placeholder:"BYTES" help:"Bytes the journal may hold (default 1 GiB). Past it, compaction drops the oldest cleaned tasks' history before --retention ends, keeping their tombstones (a re-sent task is still recognised); too small for the live tasks' history shows in health (journal_budget). 0: no limit."`
	// MemoryLimit (issue 25): the Go runtime's soft memory limit (memlimit.go).
	MemoryLimit string `default:"auto" env:"AGENTD_MEMORY_LIMIT" placeholder:"BYTES|auto" help:"Soft memory limit of the agent's Go runtime: past it the agent collects garbage sooner and gives freed memory back at once; it never fails for it. auto (the default): twice what the agent holds at rest, at least 64 MiB, measured after recovery and after each burst, raised to 1.5 times the live heap when a burst holds more than five sixths of it (GOMEMLIMIT, when set, wins over auto). Bytes, optionally with KiB, MiB or GiB; 0: none."`
	// Images (issue 17): the Docker runtime's pulls.
	RegistryAuthFile      string        `placeholder:"FILE" env:"AGENTD_REGISTRY_AUTH_FILE" help:"Registry credentials: a Docker config.json (auths with auth or username/password, keyed by registry host[:port]); re-read when it changes."`
	PullPolicy            string        `default:"if-not-present" enum:"always,if-not-present,never" env:"AGENTD_PULL_POLICY" help:"Pull policy of a container that names none: always, if-not-present or never."`
	PullInactivityTimeout time.Duration `default:"1m" env:"AGENTD_PULL_INACTIVITY_TIMEOUT" help:"A pull that makes no progress for this long is abandoned and tried again (no deadline while it progresses)."`
	OTLPEndpoint          string        `name:"otlp-endpoint" placeholder:"URL" env:"AGENTD_OTLP_ENDPOINT" help:"Ship every journal record as an OpenTelemetry log to this OTLP/HTTP base URL ({URL}/v1/logs, PROTOCOL.md §5). OTEL_EXPORTER_OTLP_ENDPOINT, _LOGS_ENDPOINT, _HEADERS, _CERTIFICATE and OTEL_RESOURCE_ATTRIBUTES work as the OpenTelemetry specification says."`
	AllowBindRoot         []string      `name:"allow-bind-root" env:"AGENTD_ALLOW_BIND_ROOT" placeholder:"DIR" help:"A host directory under which tasks may bind-mount (repeatable; none by default: a task asking for a bind mount is invalid)."`
	// SimDir: a real engine keeps its containers in a store of its own, not in the agent's data
	// directory; the power-loss loop keeps the simulated one apart too, so a power cut of the
	// agent's disk leaves what the runtime did (cmd/agentd/powerloss_test.go).
	SimDir string `hidden:"" placeholder:"DIR" env:"AGENTD_SIM_DIR" help:"Directory of the simulated runtime's file (default: --data-dir)."`
	trustFlags
	logFlags
	imageGCFlags
	// The settings file and --print-config: config.go.
	Config       string `placeholder:"FILE" env:"AGENTD_CONFIG" help:"JSON settings file, keys as the flags in snake_case (default /etc/agentd/agentd.json when it exists). A flag beats AGENTD_*, which beats the file."`
	PrintConfig  bool   `help:"Print the effective settings and where each came from (flag, env, file, default), then exit."`
	configLoaded string
}

func (r *runCmd) Run(ctx context.Context, kctx *kong.Context) error {
	if r.PrintConfig {
		return r.printConfig(kctx.Stdout, kctx)
	}
	if _, err := backend.ParseURL(r.Backend); err != nil {
		return err // before anything is opened: credentials in --backend are refused, not used
	}
	if r.CleanupWait < 0 {
		return fmt.Errorf("--cleanup-wait %s: must be ≥ 0", r.CleanupWait)
	}
	if r.PullInactivityTimeout <= 0 {
		return fmt.Errorf("--pull-inactivity-timeout %s: must be > 0", r.PullInactivityTimeout)
	}
	log, err := r.logger("agent")
	if err != nil {
		return err
	}
	// Bind roots are opened once, here, and held for the agent's life: a source is resolved
	// beneath the directory a root named now, whatever it is relinked to later.
	roots, err := docker.OpenBindRoots(r.AllowBindRoot)
	if err != nil {
		return err
	}
	defer roots.Close()
	const rewrite = "a task with a writable bind there could rewrite the agent's own files (journal, seal key, token, CA, settings)"
	owned := []struct{ flag, path, why string }{{"--data-dir", r.DataDir, rewrite}, {"--token-file", r.TokenFile, rewrite}, {"--ca-file", r.CAFile, rewrite},
		{"--registry-auth-file", r.RegistryAuthFile, rewrite}, {"--api-token-file", r.APITokenFile, rewrite}, {"--config", r.Config, rewrite}}
	if len(r.AllowBindRoot) > 0 && r.Runtime == "docker" { // the simulated runtime mounts nothing
		sock, err := docker.SocketPath(r.DockerHost)
		if err != nil {
			return err
		}
		owned = append(owned, struct{ flag, path, why string }{dockerSocketSetting(r.DockerHost), sock,
			"a task binding the directory of the Docker Engine's socket could start a privileged container: root on the host"})
	}
	for _, own := range owned {
		if root := roots.Holds(own.path); root != "" {
			return fmt.Errorf("%s %s lies under --allow-bind-root %s: %s; keep it outside every bind root", own.flag, own.path, root, own.why)
		}
	}
	if len(r.AllowBindRoot) > 0 && r.Runtime == "docker" {
		if err := docker.CheckHostNamespaces(); err != nil {
			return err
		}
	}
	rules, err := protocol.NewRules(roots.Names())
	if err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(r.Listen); err == nil && !strings.HasPrefix(r.Listen, "unix:") {
		if n, err := strconv.Atoi(port); err == nil && n > 0 {
			rules.ReservedHostPorts = []int{n}
		}
	}
	images, err := r.imageGCFlags.config()
	if err != nil {
		return err
	}
	if r.JournalMaxBytes < 0 {
		return fmt.Errorf("--journal-max-bytes %d: must be ≥ 0 (0: no limit)", r.JournalMaxBytes)
	}
	memLimit, err := parseMemoryLimit(r.MemoryLimit)
	if err != nil {
		return err
	}
	a, err := startAgent(ctx, agentConfig{TaskRules: rules, BindRoots: roots,
		DataDir: r.DataDir, Backend: r.Backend, TokenFile: r.TokenFile, CAFile: r.CAFile, AgentID: r.AgentID,
		Runtime: r.Runtime, SimDir: r.SimDir, DockerHost: r.DockerHost, CleanupWait: r.CleanupWait, Listen: r.Listen, Trust: r.trustFlags, OTLPEndpoint: r.OTLPEndpoint,
		MemoryLimit: memLimit,
		Pulls:       pullSettings{AuthFile: r.RegistryAuthFile, Policy: r.PullPolicy, Inactivity: r.PullInactivityTimeout},
		Engine:      engine.Config{SnapshotEvery: r.SnapshotEvery, Retention: r.Retention, JournalMaxBytes: r.JournalMaxBytes, Images: images},
	}, log)
	if err != nil {
		return err
	}
	return a.wait(ctx)
}

// dockerSocketSetting names where the engine's address came from, for an error about its socket.
func dockerSocketSetting(flag string) string {
	switch {
	case flag != "":
		return "--docker-host socket"
	case os.Getenv("DOCKER_HOST") != "":
		return "DOCKER_HOST socket"
	}
	return "the Docker Engine's default socket"
}

type agentConfig struct {
	DataDir, Backend, TokenFile, CAFile, AgentID, Runtime, DockerHost, Listen string
	OTLPEndpoint                                                              string // --otlp-endpoint (the OTEL_* variables also count)
	SimDir                                                                    string // --sim-dir (empty: DataDir)
	CleanupWait                                                               time.Duration
	Engine                                                                    engine.Config
	TaskRules                                                                 protocol.Rules // --allow-bind-root; the engine must decode tasks with it
	BindRoots                                                                 *docker.BindRoots
	Trust                                                                     trustFlags
	Pulls                                                                     pullSettings
	MemoryLimit                                                               memoryLimit // --memory-limit (zero: the runtime's own)
}

// pullSettings are the image flags: --registry-auth-file, --pull-policy,
// --pull-inactivity-timeout (zero values: the runtime's defaults).
type pullSettings struct {
	AuthFile, Policy string
	Inactivity       time.Duration
}

// pullConfig reads the settings into the Docker runtime's; a credentials file that cannot be
// read refuses the start, naming it.
func (p pullSettings) pullConfig(log zerolog.Logger) (docker.PullConfig, error) {
	cfg := docker.PullConfig{DefaultPolicy: p.Policy, InactivityTimeout: p.Inactivity, Log: log}
	if p.AuthFile != "" {
		auth, err := docker.LoadRegistryAuth(p.AuthFile, log)
		if err != nil {
			return cfg, err
		}
		cfg.Auth = auth
	}
	return cfg, nil
}

// agent is a started daemon: the journal, the runtime, the engine and the introspection API.
type agent struct {
	log    zerolog.Logger
	j      *journal.Journal
	rt     runtime.Runtime
	cp     *backend.Client
	eng    *engine.Engine
	srv    *http.Server // the API on --listen
	listen string       // its address: bound, or (while retried) as configured
	// sockSrv is the API on the trusted local socket (--api-socket); nil without one.
	sockSrv *http.Server
	stopAPI context.CancelFunc // ends the retries of listeners not bound yet
	otlp    *otlpShipping
	runErr  chan error
}

// startAgent opens everything in the order that keeps the guarantees: the journal (or a clear
// error, never a hang, if another agentd holds it), the agent id, the runtime, recovery, and
// only then the loop and the API.
func startAgent(ctx context.Context, c agentConfig, log zerolog.Logger) (*agent, error) {
	if c.Trust.APIFollowIdle < 0 || c.Trust.APIFollowLifetime < 0 {
		return nil, fmt.Errorf("--api-follow-idle %s, --api-follow-lifetime %s: must not be negative", c.Trust.APIFollowIdle, c.Trust.APIFollowLifetime)
	}
	limits := introspect.Limits{FollowIdle: c.Trust.APIFollowIdle, FollowLifetime: c.Trust.APIFollowLifetime}
	api, err := introspect.Guard(introspect.Options{Listen: c.Listen, TokenFile: c.Trust.APITokenFile, Hosts: c.Trust.APIHost, Group: c.Trust.APIGroup, Limits: limits})
	if err != nil {
		return nil, err
	}
	var sockAPI *introspect.API // the trusted local socket (--api-socket); none when --listen is one
	if sock := c.Trust.apiSocket(c.DataDir); sock != "" && !strings.HasPrefix(c.Listen, "unix:") {
		if c.Trust.APISocket != "" { // the default lies in the data directory, checked as it opens
			if err := checkAPISocketDir(sock); err != nil {
				return nil, err
			}
		}
		if sockAPI, err = introspect.Guard(introspect.Options{Listen: "unix:" + sock, Flag: "--api-socket", TokenFile: c.Trust.APITokenFile, Limits: limits}); err != nil {
			return nil, err
		}
	}
	a := &agent{log: log, runErr: make(chan error, 1)}
	apiCtx, stopAPI := context.WithCancel(ctx)
	a.stopAPI = stopAPI
	fail := func(err error) (*agent, error) { a.close(); return nil, err }
	var key *seal.Key
	a.j, key, err = openSealedJournal(ctx, c.DataDir, c.Trust.NewSealKey)
	if err != nil {
		return fail(err)
	}
	id, err := engine.ResolveAgentID(ctx, a.j, c.AgentID)
	if err != nil {
		return fail(err)
	}
	log = log.With().Str("agent", id).Logger()
	a.log = log
	switch c.Runtime {
	case "sim":
		var sim *simruntime.Runtime
		if sim, err = simruntime.Open(cmp.Or(c.SimDir, c.DataDir), id, nil); err == nil {
			a.rt = sim
			sim.SetBindRoots(c.BindRoots)
			err = sim.SetDefaultPullPolicy(c.Pulls.Policy)
		}
	case "docker":
		var pulls docker.PullConfig
		if pulls, err = c.Pulls.pullConfig(log); err != nil {
			return fail(err)
		}
		a.rt, err = newDockerRuntime(ctx, c.DockerHost, id, pulls, c.BindRoots)
		if a.rt != nil && errors.Is(err, runtime.ErrUnavailable) {
			log.Warn().Err(err).Msg("the Docker Engine does not answer; the agent runs unhealthy and keeps asking")
			err = nil
		}
	default:
		err = fmt.Errorf("--runtime %q: want docker or sim", c.Runtime)
	}
	if err != nil {
		return fail(err)
	}
	a.cp, err = backend.New(backend.Config{URL: c.Backend, AgentID: id, TokenFile: c.TokenFile, CAFile: c.CAFile, AllowPlainToken: c.Trust.AllowPlainToken})
	if err != nil {
		return fail(err)
	}
	// Env values are sealed before the engine sees a payload and opened only for the runtime.
	rt := seal.OpeningRuntime{Runtime: a.rt, Key: key}
	cp := seal.SealingControlPlane{Inner: a.cp, Key: key}
	cfg := c.Engine
	cfg.TaskRules = c.TaskRules // the bind roots --allow-bind-root allows
	cfg.AgentID, cfg.Version, cfg.RuntimeName, cfg.CleanupWait = id, buildVersion().Version, c.Runtime, c.CleanupWait
	cfg.ReleaseMemory = func() { // once idle after a burst: the limit follows what it holds at rest
		debug.FreeOSMemory()
		c.MemoryLimit.apply(goMemoryAtRest())
	}
	a.eng = engine.New(cfg, a.j, rt, cp, nil, nil, log)
	a.eng.RegisterStateCollector()
	registerHealthCollector(a.eng) // healthmetrics.go
	// The API answers 503 while recovering, so it starts first.
	h := introspect.Handler(a.eng, introspect.Info{Version: buildVersion().Version, DataDir: c.DataDir, Runtime: c.Runtime, Logs: a.rt}, fsm.Config{CleanupWait: c.CleanupWait})
	a.srv = api.Server(h)
	a.listen = a.serveAPI(apiCtx, api, a.srv, introspect.HealthListen)
	if sockAPI != nil {
		a.sockSrv = sockAPI.Server(h)
		a.serveAPI(apiCtx, sockAPI, a.sockSrv, introspect.HealthSocket)
	}
	if err := a.eng.Recover(ctx); err != nil {
		return fail(err)
	}
	// What recovery decoded and replayed is garbage now, and the records it replayed are
	// mapped pages it touched; without this the runtime keeps the garbage resident until its
	// next collection (forced only every two minutes when idle), and a restarted agent's RSS
	// counts both: 66–152 MB at rest with 20,000 remembered tasks instead of their footprint
	// (issue 25, bench rss).
	a.j.ReleaseMapped()
	debug.FreeOSMemory()
	limit := c.MemoryLimit.apply(goMemoryAtRest())
	go c.MemoryLimit.follow(ctx, time.Second) // an auto limit never falls under what a burst holds live
	log.Info().Int64("memory_limit", limit).Str("data_dir", c.DataDir).Str("runtime", c.Runtime).Str("backend", c.Backend).Str("listen", a.listen).Str("api_socket", c.Trust.apiSocket(c.DataDir)).
		Dur("cleanup_wait", c.CleanupWait).Msg("agent running")
	// Shipping starts after recovery: it reads only committed records, from its saved position.
	if a.otlp, err = startOTLP(ctx, c.OTLPEndpoint, a.j, a.eng, id, log); err != nil {
		return fail(err)
	}
	go func() { a.runErr <- a.eng.Run(ctx) }()
	go a.notifySystemd(ctx) // READY=1 and watchdog pings under systemd: systemd.go
	return a, nil
}

// wait runs until ctx ends (SIGTERM/SIGINT), then shuts down cleanly: the loop journals
// agent_stopped, the API closes, the journal closes. Containers keep running.
func (a *agent) wait(ctx context.Context) error {
	err := <-a.runErr
	a.close()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (a *agent) close() {
	if a.stopAPI != nil {
		a.stopAPI()
	}
	if a.srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = a.srv.Shutdown(sctx)
		cancel()
	}
	if a.sockSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = a.sockSrv.Shutdown(sctx)
		cancel()
	}
	if a.cp != nil {
		a.cp.Close()
	}
	a.otlp.stop() // its position is written before the journal closes
	if a.rt != nil {
		a.rt.Close()
	}
	if a.j != nil {
		if err := a.j.Close(); err != nil {
			a.log.Error().Err(err).Msg("closing the journal")
		}
	}
}

// newDockerRuntime connects to the Docker Engine. An engine that is down gives a runtime and
// an ErrUnavailable error (the agent runs without it and keeps asking); a misconfigured one
// gives no runtime.
func newDockerRuntime(ctx context.Context, host, agentID string, pulls docker.PullConfig, roots *docker.BindRoots) (runtime.Runtime, error) {
	e, err := docker.NewEngine(ctx, host, agentID, pulls)
	if e == nil {
		return nil, err
	}
	if berr := e.SetBindRoots(roots); berr != nil {
		e.Close()
		return nil, berr
	}
	return e, err
}

// serveAPI serves srv on api's listener, bound now (its address returned) or, when it cannot
// be, by a retry (introspect/keep.go): meanwhile the health source src is degraded, naming
// who holds the address, and the agent works on.
func (a *agent) serveAPI(ctx context.Context, api *introspect.API, srv *http.Server, src engine.HealthSource) string {
	a.eng.RegisterDegradedSource(src)
	ln, err := api.Listen()
	if err == nil {
		go func() { _ = srv.Serve(ln) }()
		return ln.Addr().String()
	}
	go func() {
		said := ""
		ln := api.KeepTrying(ctx, err, func(problem string) {
			a.eng.SetDegraded(src, problem)
			if problem != "" && problem != said { // once per change, not per retry
				a.log.Warn().Str("source", string(src)).Str("problem", problem).Msg("the API is not listening; the agent runs on, degraded")
			}
			said = problem
		})
		if ln != nil {
			a.log.Info().Str("source", string(src)).Str("listen", ln.Addr().String()).Msg("API listening")
			_ = srv.Serve(ln)
		}
	}()
	return api.Addr()
}
