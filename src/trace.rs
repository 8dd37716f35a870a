//! Traces (`[telemetry] otlp_endpoint`, the `otel` feature): each run a replica wins is a new
//! root span `slotcron.run`, with a child for its race and one for each delivery attempt, sent
//! as OTLP/HTTP protobuf to the endpoint's `/v1/traces`. An `http` action carries the W3C
//! `traceparent` of its attempt, and a job's function runs inside the run's context.
//!
//! Unset (or without the feature), nothing is built: every function here returns at once.

#[cfg(feature = "otel")]
mod otel;

/// What a run's root span says about it.
pub struct RunIds<'a> {
    /// `slotcron.job`.
    pub job: &'a str,
    /// `slotcron.slot`, RFC 3339 UTC.
    pub slot: crate::time::schedule::Slot,
    /// `slotcron.fence`; `slotcron.attempt` is its handoff number plus one.
    pub fence: crate::time::schedule::Fence,
    /// `slotcron.trigger`.
    pub trigger: &'static str,
    /// `slotcron.replica`.
    pub replica: &'a str,
}

#[cfg(feature = "otel")]
pub use otel::{AttemptSpan, RunSpan, attempt_span, install, run_span, shutdown};

#[cfg(not(feature = "otel"))]
mod off {
    use std::time::SystemTime;

    /// Without the `otel` feature: nothing.
    pub struct RunSpan;

    impl RunSpan {
        /// Runs `run` as is.
        pub async fn within<F: std::future::Future>(&self, run: F) -> F::Output {
            run.await
        }
    }

    /// Without the `otel` feature, an endpoint is ignored (with a warning).
    pub fn install(endpoint: &url::Url, _replica: &str, _client: reqwest::Client) {
        tracing::warn!(%endpoint, "otlp_endpoint is set but this build has no `otel` feature: no traces");
    }

    /// Nothing to flush.
    pub fn shutdown() {}

    /// Nothing.
    pub fn run_span(_: &crate::trace::RunIds<'_>, _: (SystemTime, SystemTime)) -> RunSpan {
        RunSpan
    }

    /// Nothing.
    pub fn attempt_span(_: u32) -> AttemptSpan {
        AttemptSpan
    }

    /// Nothing.
    pub struct AttemptSpan;

    impl AttemptSpan {
        /// No header.
        pub fn traceparent(&self) -> reqwest::header::HeaderMap {
            reqwest::header::HeaderMap::new()
        }
    }
}

#[cfg(not(feature = "otel"))]
pub use off::{AttemptSpan, RunSpan, attempt_span, install, run_span, shutdown};
