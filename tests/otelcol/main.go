// siding-otelcol: the OpenTelemetry Collector that siding's tracing test runs, built from the
// collector's core Go modules only: one receiver (OTLP) and one exporter (OTLP/HTTP, which the
// test points with `encoding: json` at an HTTP server of its own), and a telemetry factory
// that only logs (no internal metrics or traces, so none of the SDK configuration modules).
// `make setup` builds it into .tools/otelcol/ (docs/operations.md, "Tracing").
package main

import (
	"context"
	"log"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry"
	"go.uber.org/zap"
)

// telemetryConfig is the collector's own `service.telemetry` section: nothing to set.
type telemetryConfig struct{}

// logOnly is the collector's own telemetry: its log, as JSON on stderr; meters and tracers
// are the telemetry package's no-op defaults.
func logOnly() telemetry.Factory {
	return telemetry.NewFactory(
		func() component.Config { return &telemetryConfig{} },
		telemetry.WithCreateLogger(func(
			_ context.Context, settings telemetry.LoggerSettings, _ component.Config,
		) (*zap.Logger, component.ShutdownFunc, error) {
			build := settings.BuildZapLogger
			if build == nil {
				build = zap.Config.Build
			}
			logger, err := build(zap.NewProductionConfig())
			if err != nil {
				return nil, nil, err
			}
			return logger, func(context.Context) error { _ = logger.Sync(); return nil }, nil
		}),
	)
}

func factories() (otelcol.Factories, error) {
	receivers, err := otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	exporters, err := otelcol.MakeFactoryMap[exporter.Factory](otlphttpexporter.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	return otelcol.Factories{Receivers: receivers, Exporters: exporters, Telemetry: logOnly()}, nil
}

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "siding-otelcol",
			Description: "OpenTelemetry Collector (OTLP receiver, OTLP/HTTP exporter) for siding's tests",
			Version:     "0.161.0",
		},
		Factories: factories,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					fileprovider.NewFactory(), envprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatal(err)
	}
}
