package main

import (
	"fmt"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// logFlags are shared by the long-running commands.
type logFlags struct {
	LogLevel  string `default:"info" enum:"debug,info,warn,error" env:"AGENTD_LOG_LEVEL" help:"Log level: debug, info, warn, error."`
	LogFormat string `default:"auto" enum:"auto,json,console" env:"AGENTD_LOG_FORMAT" help:"Log format: json, console, or auto (console on a terminal, JSON otherwise)."`
}

func (f logFlags) logger(component string) (zerolog.Logger, error) {
	// ParseLevel("") would mute everything: the enum above guarantees a name.
	lvl, err := zerolog.ParseLevel(f.LogLevel)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: %w", f.LogLevel, err)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	var w = zerolog.New(os.Stderr)
	if f.LogFormat == "console" || (f.LogFormat == "auto" && isatty.IsTerminal(os.Stderr.Fd())) {
		w = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"})
	}
	return w.Level(lvl).With().Timestamp().Str("component", component).Logger(), nil
}
