//! Traces (`[telemetry] otlp_endpoint`): a fleet of three replicas over three Redis nodes
//! exports to a local OTLP/HTTP receiver whose bodies are decoded with the published
//! `opentelemetry-proto` messages; the webhook receiver checks the `traceparent` it was sent.
#![cfg(feature = "otel")]

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::fleet::{Fleet, FleetToml};
use common::{Receiver, RedisCluster};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// Webhook deliveries to wait for: three runs are enough to see distinct traces, and a second
/// per slot under load keeps the wait generous (the bound is a failure bound, not a timing).
const RUNS: usize = 3;
const RUNS_WITHIN: Duration = Duration::from_secs(60);

/// Every span of every OTLP request the receiver got; a body that is not an OTLP protobuf
/// export fails the test.
fn spans(otlp: &Receiver) -> Vec<Span> {
    let mut spans = Vec::new();
    for request in otlp.received() {
        assert_eq!(request.url.path(), "/v1/traces", "OTLP/HTTP traces path");
        let content_type = request
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(content_type.as_deref(), Some("application/x-protobuf"));
        let export = ExportTraceServiceRequest::decode(request.body.as_slice())
            .expect("an OTLP ExportTraceServiceRequest protobuf body");
        for resource in export.resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    spans
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let kv = span.attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// `traceparent` = 00-TRACEID-PARENTID-FLAGS: the trace id and parent span id, in hex.
fn traceparent(request: &wiremock::Request) -> (String, String) {
    let value = request
        .headers
        .get("traceparent")
        .unwrap_or_else(|| panic!("no traceparent on the webhook: {:?}", request.headers))
        .to_str()
        .unwrap()
        .to_owned();
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {value:?}");
    assert_eq!(parts[0], "00", "W3C version");
    (parts[1].to_owned(), parts[2].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_won_run_is_a_new_trace_with_race_and_delivery_children_joined_by_the_webhook() {
    // The exporter is one per process: this test and the other that installs one each run alone.
    if !common::in_own_process(
        "traces::each_won_run_is_a_new_trace_with_race_and_delivery_children_joined_by_the_webhook",
    ) {
        return;
    }
    let cluster = RedisCluster::start(3);
    let webhook = Receiver::start();
    let otlp = Receiver::start();
    let urls = cluster.urls();
    let text = FleetToml::new(&urls, &webhook.uri(), "traces").render()
        + &format!("\n[telemetry]\notlp_endpoint = \"{}\"\n", otlp.uri());
    let fleet = Fleet::start_named(&text, &["r1", "r2", "r3"]).await;
    let delivered = webhook.wait_for_async(RUNS, RUNS_WITHIN).await;
    // Stopping flushes the spans still queued.
    fleet.stop().await;
    assert!(
        delivered.len() >= RUNS,
        "only {} webhook deliveries",
        delivered.len()
    );
    let webhooks = webhook.received();

    let spans = spans(&otlp);
    let roots: Vec<&Span> = spans.iter().filter(|s| s.name == "slotcron.run").collect();
    for root in &roots {
        assert!(
            root.parent_span_id.is_empty(),
            "slotcron.run is a root span"
        );
        for key in [
            "slotcron.job",
            "slotcron.slot",
            "slotcron.fence",
            "slotcron.trigger",
            "slotcron.attempt",
            "slotcron.replica",
        ] {
            assert!(
                attribute(root, key).is_some(),
                "root span without {key}: {root:?}"
            );
        }
        assert_eq!(attribute(root, "slotcron.job").as_deref(), Some("fault"));
        assert_eq!(
            attribute(root, "slotcron.trigger").as_deref(),
            Some("schedule")
        );
        assert_eq!(attribute(root, "slotcron.attempt").as_deref(), Some("1"));
    }
    // One root per won run: a slot never has two, and each its own trace.
    let mut per_slot: BTreeMap<String, usize> = BTreeMap::new();
    for root in &roots {
        *per_slot
            .entry(attribute(root, "slotcron.slot").unwrap())
            .or_default() += 1;
    }
    assert!(
        per_slot.values().all(|&n| n == 1),
        "a slot with several roots: {per_slot:?}"
    );
    let traces: HashSet<&[u8]> = roots.iter().map(|r| r.trace_id.as_slice()).collect();
    assert_eq!(traces.len(), roots.len(), "trace ids shared across runs");

    // Each delivered webhook names its run's trace, through its delivery attempt's span.
    for request in &webhooks {
        let slot = request.headers["x-slotcron-slot"]
            .to_str()
            .unwrap()
            .to_owned();
        let (trace_id, parent) = traceparent(request);
        let root = roots
            .iter()
            .find(|r| attribute(r, "slotcron.slot").as_deref() == Some(slot.as_str()))
            .unwrap_or_else(|| {
                panic!("no slotcron.run span for delivered slot {slot}: {per_slot:?}")
            });
        assert_eq!(
            hex::encode(&root.trace_id),
            trace_id,
            "the webhook's traceparent is not its run's trace"
        );
        let in_trace = |name: &str| -> Vec<&Span> {
            spans
                .iter()
                .filter(|s| s.name == name && s.trace_id == root.trace_id)
                .collect()
        };
        let race = in_trace("slotcron.race");
        assert_eq!(race.len(), 1, "one race span in the run's trace");
        assert_eq!(
            race[0].parent_span_id, root.span_id,
            "the race is the run's child"
        );
        let deliveries = in_trace("slotcron.delivery");
        assert!(!deliveries.is_empty(), "no delivery span for slot {slot}");
        assert!(
            deliveries.iter().all(|d| d.parent_span_id == root.span_id),
            "delivery spans are the run's children"
        );
        assert!(
            deliveries.iter().any(|d| hex::encode(&d.span_id) == parent),
            "the traceparent's parent is not one of the run's delivery attempts"
        );
    }
}
