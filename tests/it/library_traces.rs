//! The library's job function runs inside its run's span (`Fleet::otlp_endpoint`): the trace
//! it sees is the one the local OTLP receiver gets as that run's `slotcron.run`. It runs in a
//! process of its own (`common::in_own_process`), since the exporter is one per process.
#![cfg(feature = "otel")]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Receiver, RedisCluster};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use slotcron::{Fleet, JobSpec};

/// Runs to wait for, and a bound that only a broken build reaches (a run a second).
const RUNS: usize = 2;
const RUNS_WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_job_function_runs_inside_its_runs_root_span() {
    // The exporter is one per process: this test and the other that installs one each run alone.
    if !common::in_own_process(
        "library_traces::a_library_job_function_runs_inside_its_runs_root_span",
    ) {
        return;
    }
    let cluster = RedisCluster::start(3);
    let otlp = Receiver::start();
    // The trace id each run's function saw as its current context (hex; zeros: no span).
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let handle = Fleet::new("lib-traced")
        .nodes(cluster.urls())
        .key_prefix("lib-traces")
        .otlp_endpoint(otlp.uri())
        .job(JobSpec::new("traced", "* * * * * *"), move |_ctx| {
            let cx = opentelemetry::Context::current();
            let trace = cx.span().span_context().trace_id().to_string();
            record.lock().unwrap().push(trace);
            async { Ok::<(), std::io::Error>(()) }
        })
        .start()
        .await
        .unwrap();
    common::wait_until(RUNS_WITHIN, || {
        (seen.lock().unwrap().len() >= RUNS).then_some(())
    });
    handle.shutdown().await.unwrap();

    let mut roots = Vec::new();
    for request in otlp.received() {
        let export = ExportTraceServiceRequest::decode(request.body.as_slice())
            .expect("an OTLP ExportTraceServiceRequest protobuf body");
        let spans = export
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans);
        for span in spans.flat_map(|s| s.spans) {
            if span.name == "slotcron.run" {
                roots.push(hex::encode(&span.trace_id));
            }
        }
    }
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= RUNS, "the job ran {} times", seen.len());
    for trace in &seen {
        assert_ne!(trace, &"0".repeat(32), "the function ran outside any span");
        assert!(
            roots.contains(trace),
            "the function's trace {trace} is no run's root: {roots:?}"
        );
    }
}
