//! OpenTelemetry export (the `otel` feature): the spans every line is logged in (`request`
//! with its id, method and route; `job` with its id, attempt and operation) sent to an
//! OTLP/HTTP collector (`log.otlp_endpoint`, its `/v1/traces`) in batches from a thread of
//! their own, so a slow collector never slows a request. [`shutdown`] sends what is left
//! before the process exits. Without the feature, a configured endpoint is reported and
//! nothing is exported.

#[cfg(not(feature = "otel"))]
use super::settings::LogSettings;

#[cfg(feature = "otel")]
mod export {
    use std::sync::OnceLock;

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use opentelemetry_sdk::Resource;
    use tracing::Subscriber;
    use tracing_subscriber::registry::LookupSpan;
    use tracing_subscriber::Layer;

    use crate::telemetry::settings::LogSettings;

    /// The provider, kept to flush it at exit.
    static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

    pub fn layer<S>(settings: &LogSettings) -> Option<impl Layer<S>>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        if settings.otlp_endpoint.is_empty() {
            return None;
        }
        let endpoint = format!("{}/v1/traces", settings.otlp_endpoint.trim_end_matches('/'));
        let exporter = match opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(&endpoint).build() {
            Ok(exporter) => exporter,
            Err(err) => {
                // Logging is not set up yet: this goes to standard error as it is.
                eprintln!("yardmaster: spans are not exported to {endpoint}: {err}");
                return None;
            }
        };
        let resource = Resource::builder().with_service_name(settings.service_name.clone()).build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        let tracer = provider.tracer("yardmaster");
        let _ = PROVIDER.set(provider);
        Some(tracing_opentelemetry::layer().with_tracer(tracer))
    }

    pub fn shutdown() {
        if let Some(provider) = PROVIDER.get() {
            if let Err(err) = provider.shutdown() {
                eprintln!("yardmaster: the last spans were not exported: {err}");
            }
        }
    }
}

#[cfg(feature = "otel")]
pub use export::{layer, shutdown};

/// Without the `otel` feature: nothing to export; a configured endpoint is reported.
#[cfg(not(feature = "otel"))]
pub fn layer(settings: &LogSettings) -> Option<tracing_subscriber::layer::Identity> {
    if !settings.otlp_endpoint.is_empty() {
        eprintln!(
            "yardmaster: log.otlp_endpoint is set, but this build has no OpenTelemetry export: build with `--features otel`"
        );
    }
    None
}

#[cfg(not(feature = "otel"))]
pub fn shutdown() {}
