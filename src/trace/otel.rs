//! The OpenTelemetry side of [`super`]: one tracer provider per process, installed by the first
//! replica whose configuration names an endpoint.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use reqwest::header::{HeaderMap, HeaderValue};

use super::RunIds;

/// Spans wait at most this long before they are sent: a run's trace shows up within a second
/// or so, and a busy replica still sends one request a batch, not one a span.
const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// The provider and its tracer, once an endpoint is configured; unset, nothing is traced.
static TRACING: OnceLock<(SdkTracerProvider, SdkTracer)> = OnceLock::new();

/// The exporter's requests, sent by the shared reqwest 0.13 client on the replica's tokio
/// runtime: the SDK's batch processor sends from a thread of its own, which has no reactor.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?;
        note_export(&sent);
        sent
    }
}

/// Whether the last export failed: the SDK's own diagnostics are compiled out, so a collector
/// that cannot be reached is logged here, once when exports start failing and once when they
/// work again (not once a batch).
static FAILING: AtomicBool = AtomicBool::new(false);

fn note_export(sent: &Result<Response<Bytes>, HttpError>) {
    let error = match sent {
        Ok(response) if response.status().is_success() => None,
        Ok(response) => Some(format!("the collector answered {}", response.status())),
        Err(e) => Some(e.to_string()),
    };
    match error {
        Some(error) if !FAILING.swap(true, Ordering::Relaxed) => {
            tracing::warn!(error = %error, "traces: exporting spans failed; runs go on, their spans are dropped");
        }
        None if FAILING.swap(false, Ordering::Relaxed) => {
            tracing::info!("traces: exporting spans works again");
        }
        _ => {}
    }
}

/// Starts exporting to `endpoint`'s `/v1/traces` (OTLP/HTTP protobuf). Called from inside the
/// replica's runtime; a second call (another replica in the same process) keeps the first.
pub fn install(endpoint: &url::Url, replica: &str, client: reqwest::Client) {
    if TRACING.get().is_some() {
        return;
    }
    match provider(endpoint, client) {
        Ok(provider) => {
            let tracer = provider.tracer("slotcron");
            if TRACING.set((provider, tracer)).is_ok() {
                tracing::info!(%endpoint, replica = %replica, "traces: a span per won run, over OTLP/HTTP");
            }
        }
        Err(e) => tracing::warn!(%endpoint, replica = %replica, error = %e,
            "traces: cannot build the OTLP exporter; running without traces"),
    }
}

fn provider(endpoint: &url::Url, client: reqwest::Client) -> anyhow::Result<SdkTracerProvider> {
    let traces = endpoint.join("v1/traces")?;
    let client = OnRuntime {
        client,
        runtime: tokio::runtime::Handle::try_current()?,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces.as_str())
        .with_http_client(client)
        .build()?;
    let batch = BatchConfigBuilder::default()
        .with_scheduled_delay(EXPORT_DELAY)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("slotcron")
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build())
}

/// Sends the spans still queued (at shutdown). It blocks: call it off the runtime's workers.
pub fn shutdown() {
    if let Some((provider, _)) = TRACING.get() {
        drop(provider.force_flush());
    }
}

/// A won run's root span (`None` with traces off), as the context its work runs in.
pub struct RunSpan(Option<Context>);

impl RunSpan {
    /// Runs `run` inside the span (its delivery attempts and the job's function are children),
    /// then ends the span.
    pub async fn within<F: std::future::Future>(&self, run: F) -> F::Output {
        match &self.0 {
            Some(cx) => {
                let out = run.with_context(cx.clone()).await;
                cx.span().end();
                out
            }
            None => run.await,
        }
    }
}

/// A new trace for a won run: the root `slotcron.run`, started when its race did, with the
/// race as its first child.
pub fn run_span(ids: &RunIds<'_>, (raced, won): (SystemTime, SystemTime)) -> RunSpan {
    let Some((_, tracer)) = TRACING.get() else {
        return RunSpan(None);
    };
    let attempt = i64::from(ids.fence.handoff()) + 1;
    let root = tracer
        .span_builder("slotcron.run")
        .with_start_time(raced)
        .with_attributes([
            KeyValue::new("slotcron.job", ids.job.to_owned()),
            KeyValue::new("slotcron.slot", ids.slot.rfc3339_utc()),
            KeyValue::new("slotcron.fence", ids.fence.get()),
            KeyValue::new("slotcron.trigger", ids.trigger),
            KeyValue::new("slotcron.attempt", attempt),
            KeyValue::new("slotcron.replica", ids.replica.to_owned()),
        ])
        // A new trace each run, whatever context the caller is in.
        .start_with_context(tracer, &Context::new());
    let cx = Context::new().with_span(root);
    let mut race = tracer
        .span_builder("slotcron.race")
        .with_start_time(raced)
        .start_with_context(tracer, &cx);
    race.end_with_timestamp(won);
    RunSpan(Some(cx))
}

/// One delivery attempt of the run in whose context it is made; ended when dropped. Outside a
/// run (an alert) or with traces off: nothing.
pub struct AttemptSpan(Option<Context>);

/// The child span `slotcron.delivery` for attempt number `attempt`.
pub fn attempt_span(attempt: u32) -> AttemptSpan {
    let Some((_, tracer)) = TRACING.get() else {
        return AttemptSpan(None);
    };
    let parent = Context::current();
    if !parent.has_active_span() {
        return AttemptSpan(None);
    }
    let span = tracer
        .span_builder("slotcron.delivery")
        .with_attributes([KeyValue::new("slotcron.attempt", i64::from(attempt))])
        .start_with_context(tracer, &parent);
    AttemptSpan(Some(parent.with_span(span)))
}

impl AttemptSpan {
    /// The W3C `traceparent` of this attempt, so the receiver's spans join the run.
    pub fn traceparent(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(cx) = &self.0 {
            let span = cx.span();
            let sc = span.span_context();
            let value = format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            );
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert("traceparent", value);
            }
        }
        headers
    }
}

impl Drop for AttemptSpan {
    fn drop(&mut self) {
        if let Some(cx) = &self.0 {
            cx.span().end();
        }
    }
}
