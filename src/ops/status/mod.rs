//! The replica's HTTP endpoints (`[http] listen`): `/healthz`, `/readyz`, `/metrics` and `/`,
//! a server-rendered status page readable without JavaScript (`page`), served by an accept
//! loop that bounds what a client can hold open (`server`), on a thread of its own (`start`).
//!
//! What they show comes in [`Sources`], built by whoever starts the server: this module reads
//! the replica's parts but never the scheduler that owns them.

mod chart;
mod fleet;
mod page;
mod server;
mod snapshot;
mod start;
mod view;
mod words;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::Utc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::fleet::control::Control;
use crate::fleet::membership::Membership;
use crate::lock::SlotLock;
use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
use crate::ops::liveness::{Health, Liveness};
use crate::record::audit::Audit;
use crate::record::history::History;
use crate::time::schedule::SharedClock;
pub use snapshot::Pages;
pub use start::spawn;

/// Bound on the PING of each node that is not suspect, behind `/readyz`, `/metrics` and `/`.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

/// What the endpoints read: the replica's parts they show, handed over by the code that starts
/// the server, so this module depends on the parts and not on the scheduler that owns them.
#[derive(Clone)]
pub struct Sources {
    /// The replica's id: the page's title, and "this replica" in the fleet table.
    pub name: String,
    /// The lock, for its node pool: `/readyz`, `/metrics` and the page ping the nodes.
    pub lock: SlotLock,
    /// The run records: the page's strips, charts and fleet shares; read on the page's own
    /// connections to the nodes, not the races'.
    pub history: History,
    /// The pauses in force and their log (read like `history`): the overview's paused column
    /// and paused slots.
    pub control: Control,
    /// The audit trail: the page's latest control actions and reloads (read like `history`).
    pub audit: Audit,
    /// Served at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The clock the replica schedules on: "now" for next slots and relative times, so the page
    /// agrees with the timeline.
    pub clock: SharedClock,
    /// The timeline's watchdog, read by `/healthz`.
    pub liveness: Arc<Liveness>,
    /// The fleet's live replicas: the fleet table lists them, wins or not.
    pub membership: Membership,
    /// The configuration in force, swapped on reload.
    pub config: Arc<RwLock<Arc<Config>>>,
    /// The page's snapshot and renderings: what bounds a page load's cost.
    pub pages: Arc<Pages>,
    /// The runtime the races run on; the server runs on a thread of its own (see `start`).
    pub races: tokio::runtime::Handle,
}

impl Sources {
    /// The configuration in force now (a reload swaps it; a poisoned lock still holds one).
    fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Serves until `shutdown`, then drains for at most [`server::HTTP_GRACE`].
async fn serve(listener: tokio::net::TcpListener, sources: Sources, shutdown: CancellationToken) {
    let app = Router::new()
        .route("/", get(page::page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(sources);
    server::serve(listener, app, shutdown).await;
}

/// Live while the timeline is not overdue for a wake ([`crate::ops::liveness`]): 503 names how late.
async fn healthz(AxumState(state): AxumState<Sources>) -> Response {
    let health = state.liveness.check(tokio::time::Instant::now());
    let status = if health.is_live() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, describe(health)).into_response()
}

fn describe(health: Health) -> String {
    let ago = |d: Option<Duration>| {
        d.map_or_else(
            || "has not woken yet".to_owned(),
            |d| format!("woke {:.1} s ago", d.as_secs_f64()),
        )
    };
    match health {
        Health::Waiting { due_in, last_wake } => format!(
            "ok: the timeline {}; next wake in {:.1} s\n",
            ago(last_wake),
            due_in.as_secs_f64()
        ),
        Health::Idle { last_wake } => {
            format!("ok: the timeline {}; no wake pending\n", ago(last_wake))
        }
        Health::Overdue { late } => format!(
            "unhealthy: the timeline has not woken for a slot due {:.1} s ago\n",
            late.as_secs_f64()
        ),
    }
}

/// The replica's view of its nodes after a PING to each (a suspect node is pinged, so its
/// recovery is seen, but not waited for); empty in standalone mode.
async fn probe(sources: &Sources) -> Vec<(String, bool)> {
    let lock = sources.lock.clone();
    on_the_races_runtime(sources, async move {
        let Some(nodes) = lock.nodes() else {
            return Vec::new();
        };
        nodes
            .probe(PROBE_TIMEOUT)
            .await
            .into_iter()
            .map(|n| (n.address, n.up))
            .collect()
    })
    .await
}

/// A cluster's shards as it says now (`slots A-B: primary …, replicas …`); empty unless the
/// mode is cluster.
async fn shards(sources: &Sources) -> Vec<String> {
    let lock = sources.lock.clone();
    on_the_races_runtime(sources, async move {
        let Some(nodes) = lock.nodes() else {
            return Vec::new();
        };
        let mut shards = Vec::new();
        for node in nodes.iter() {
            let found = node.shards(PROBE_TIMEOUT).await.unwrap_or_default();
            shards.extend(found.iter().map(ToString::to_string));
        }
        shards
    })
    .await
}

/// Runs a call into the races' node pool on the races' runtime, not the server's: a call may
/// reopen one of the pool's connections, and a connection is driven by the runtime that opened
/// it. Empty when that runtime is shutting down.
async fn on_the_races_runtime<T: Default + Send + 'static>(
    sources: &Sources,
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    sources.races.spawn(call).await.unwrap_or_default()
}

async fn readyz(AxumState(state): AxumState<Sources>) -> Response {
    if !state.clock.measured() {
        let why = "not ready: the fleet clock is not measured yet (no Redis node answered TIME)\n";
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    }
    let nodes = probe(&state).await;
    if nodes.is_empty() {
        return (StatusCode::OK, "ready: standalone\n").into_response();
    }
    let up = nodes.iter().filter(|(_, up)| *up).count();
    let needed = crate::redis::quorum(nodes.len());
    let topology = state.lock.nodes().map(|n| n.describe()).unwrap_or_default();
    let answer = format!(
        "{up}/{} redis nodes answer, {needed} needed ({topology})",
        nodes.len()
    );
    let cannot_race = state.liveness.cannot_race(tokio::time::Instant::now());
    let (status, mut text) = match cannot_race {
        _ if up < needed => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {answer}\n"),
        ),
        Some(c) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the races of the last {} slots found no majority of the nodes \
                 (for {:.1} s), though {answer}\n",
                c.instants,
                c.since.as_secs_f64()
            ),
        ),
        None => (StatusCode::OK, format!("ready: {answer}\n")),
    };
    for shard in shards(&state).await {
        text.push_str(&format!("cluster shard {shard}\n"));
    }
    (status, text).into_response()
}

async fn metrics(AxumState(state): AxumState<Sources>, headers: HeaderMap) -> Response {
    let metrics = &state.metrics;
    for (node, up) in probe(&state).await {
        metrics.node_up(&node, up);
    }
    declare_jobs(metrics, &state.config);
    report_calendar_coverage(&state);
    let (content_type, body) = if accepts_openmetrics(&headers) {
        (OPENMETRICS_CONTENT_TYPE, metrics.encode_openmetrics())
    } else {
        (TEXT_CONTENT_TYPE, metrics.encode())
    };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Every configured job's series, at zero until its first slot, and its current interval.
fn declare_jobs(metrics: &Metrics, config: &RwLock<Arc<Config>>) {
    let config = config.read().unwrap_or_else(|p| p.into_inner()).clone();
    let now = Utc::now();
    for job in &config.jobs {
        metrics.declare_job(&job.name);
        let next = job.schedule.upcoming(now, 2);
        let gap = match next.as_slice() {
            [a, b] => (b.instant() - a.instant()).to_std().ok(),
            _ => None,
        };
        metrics.schedule_interval(&job.name, gap);
    }
}

/// Whether the scraper asked for OpenMetrics (Prometheus does, in its `Accept`); anyone else
/// gets the classic text format.
fn accepts_openmetrics(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().starts_with("application/openmetrics-text"))
}

/// For each job on a built-in calendar: is its next slot past the data (a Monday-to-Friday
/// guess)? Computed at scrape time on the replica's clock, like the node gauges.
fn report_calendar_coverage(state: &Sources) {
    let config = state.config();
    let now = state.clock.now();
    for job in &config.jobs {
        let Some(filter) = job.schedule.day_filter() else {
            continue;
        };
        if filter.calendar.coverage().is_none() {
            continue;
        }
        let beyond = job.schedule.next_after(now).is_some_and(|slot| {
            filter
                .calendar
                .is_beyond_coverage(job.schedule.local_date(slot))
        });
        state.metrics.calendar_beyond_coverage(&job.name, beyond);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, value.parse().unwrap());
        headers
    }

    #[test]
    fn openmetrics_only_for_a_scraper_that_asks_for_it() {
        // What Prometheus 2.x sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(accepts_openmetrics(&accept(prometheus)));
        assert!(!accepts_openmetrics(&accept("*/*")));
        assert!(!accepts_openmetrics(&HeaderMap::new()));
    }
}
