package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
)

// jsonLinesConfig: where the exporter appends.
type jsonLinesConfig struct {
	Path string `mapstructure:"path"`
}

func (c *jsonLinesConfig) Validate() error {
	if c.Path == "" {
		return errors.New("jsonlines: path is required")
	}
	return nil
}

func newJSONLinesFactory() exporter.Factory {
	return exporter.NewFactory(component.MustNewType("jsonlines"),
		func() component.Config { return &jsonLinesConfig{} },
		exporter.WithLogs(createJSONLines, component.StabilityLevelDevelopment))
}

func createJSONLines(ctx context.Context, set exporter.Settings, cfg component.Config) (exporter.Logs, error) {
	path := cfg.(*jsonLinesConfig).Path
	var mu sync.Mutex
	var m plog.JSONMarshaler
	push := func(_ context.Context, ld plog.Logs) error {
		b, err := m.MarshalLogs(ld)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(append(b, '\n')); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return exporterhelper.NewLogs(ctx, set, cfg, push)
}

// faultConfig: a file whose content switches the fault — "refuse" (a retryable error: the
// OTLP receiver answers 503), "stall" (hold each request 2 s), anything else passes.
type faultConfig struct {
	File string `mapstructure:"file"`
}

func newFaultFactory() processor.Factory {
	return processor.NewFactory(component.MustNewType("fault"),
		func() component.Config { return &faultConfig{} },
		processor.WithLogs(createFault, component.StabilityLevelDevelopment))
}

func createFault(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	file := cfg.(*faultConfig).File
	process := func(ctx context.Context, ld plog.Logs) (plog.Logs, error) {
		if file == "" {
			return ld, nil
		}
		b, _ := os.ReadFile(file)
		switch strings.TrimSpace(string(b)) {
		case "refuse":
			return ld, errors.New("fault: refusing (test)")
		case "stall":
			select {
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
				return ld, ctx.Err()
			}
		}
		return ld, nil
	}
	return processorhelper.NewLogs(ctx, set, cfg, next, process)
}
