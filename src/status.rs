//! The replica's HTTP endpoints (`[http] listen`): `/healthz`, `/readyz`, `/metrics` and `/`,
//! a server-rendered status page readable without JavaScript.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State as AxumState;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use chrono::Utc;
use minijinja::{context, Environment};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::liveness::Health;
use crate::lock::SlotLock;
use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
use crate::scheduler::Replica;

/// Bound on the PING of each node that is not suspect, behind `/readyz`, `/metrics` and `/`.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// Runs shown per job on the status page.
const RUNS_SHOWN: usize = 10;
/// Upcoming slots shown per job on the status page.
const NEXT_SHOWN: usize = 3;

/// What the endpoints read.
#[derive(Clone)]
pub struct State {
    pub replica: Replica,
    /// The configuration in force, swapped on reload.
    pub config: Arc<RwLock<Arc<Config>>>,
}

/// Serves until `shutdown`.
pub async fn serve(listener: tokio::net::TcpListener, state: State, shutdown: CancellationToken) {
    let app = Router::new()
        .route("/", get(page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    {
        tracing::error!(error = %e, "the status server stopped");
    }
}

/// Live while the timeline is not overdue for a wake ([`crate::liveness`]): 503 names how late.
async fn healthz(AxumState(state): AxumState<State>) -> Response {
    let health = state.replica.liveness.check(tokio::time::Instant::now());
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
async fn probe(lock: &SlotLock) -> Vec<(String, bool)> {
    let Some(nodes) = lock.nodes() else {
        return Vec::new();
    };
    nodes
        .probe(PROBE_TIMEOUT)
        .await
        .into_iter()
        .map(|n| (n.address, n.up))
        .collect()
}

async fn readyz(AxumState(state): AxumState<State>) -> Response {
    let nodes = probe(&state.replica.lock).await;
    if nodes.is_empty() {
        return (StatusCode::OK, "ready: standalone\n").into_response();
    }
    let up = nodes.iter().filter(|(_, up)| *up).count();
    let needed = crate::lock::redlock::quorum(nodes.len());
    let status = if up >= needed {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let word = if up >= needed { "ready" } else { "not ready" };
    (
        status,
        format!(
            "{word}: {up}/{} redis nodes answer, {needed} needed\n",
            nodes.len()
        ),
    )
        .into_response()
}

async fn metrics(AxumState(state): AxumState<State>, headers: HeaderMap) -> Response {
    let metrics = &state.replica.metrics;
    for (node, up) in probe(&state.replica.lock).await {
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
fn report_calendar_coverage(state: &State) {
    let config = state
        .config
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let now = state.replica.clock.now();
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
        state
            .replica
            .metrics
            .calendar_beyond_coverage(&job.name, beyond);
    }
}

#[derive(Serialize)]
struct JobView {
    name: String,
    schedule: String,
    zone: String,
    action: String,
    next: Vec<String>,
    runs: Vec<RunView>,
    history_error: Option<String>,
}

#[derive(Serialize)]
struct RunView {
    slot: String,
    replica: String,
    outcome: String,
    duration: String,
    error: String,
}

async fn page(AxumState(state): AxumState<State>) -> Response {
    let config = state
        .config
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut jobs = Vec::new();
    for job in &config.jobs {
        let (runs, history_error) = match state.replica.history.read(&job.name, RUNS_SHOWN).await {
            Ok(runs) => (runs, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        jobs.push(JobView {
            name: job.name.clone(),
            schedule: job.schedule.expression().to_owned(),
            zone: job.zone().to_string(),
            action: job.action.target().map_or_else(
                || job.action.kind().to_owned(),
                |t| format!("{} → {}", job.action.kind(), config.scrubber.scrub(&t)),
            ),
            next: job
                .schedule
                .upcoming(Utc::now(), NEXT_SHOWN)
                .iter()
                .map(|s| s.rfc3339_in(job.zone()))
                .collect(),
            runs: runs
                .iter()
                .map(|r| RunView {
                    slot: r.slot.rfc3339_in(job.zone()),
                    replica: r.replica.clone(),
                    outcome: r.outcome.to_string(),
                    duration: r
                        .duration()
                        .map_or_else(String::new, |d| format!("{} ms", d.as_millis())),
                    error: r.error.clone().unwrap_or_default(),
                })
                .collect(),
            history_error,
        });
    }
    let nodes = probe(&state.replica.lock).await;
    match render_page(&state.replica.name, &config, &jobs, &nodes) {
        Ok(html) => Html(html).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("status page: {e}\n"),
        )
            .into_response(),
    }
}

fn render_page(
    replica: &str,
    config: &Config,
    jobs: &[JobView],
    nodes: &[(String, bool)],
) -> Result<String, minijinja::Error> {
    let mut env = Environment::new();
    // The `.html` name turns on auto-escaping: job names and errors are user text.
    env.add_template("status.html", PAGE)?;
    env.get_template("status.html")?.render(context! {
        replica => replica,
        config => config.path.display().to_string(),
        now => Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        standalone => config.redis.is_none(),
        nodes => nodes.iter().map(|(n, up)| context! { address => n, up => up }).collect::<Vec<_>>(),
        jobs => jobs,
    })
}

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="10">
<title>slotcron: {{ replica }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .4em 0; }
th, td { text-align: left; padding: .25em .8em; border-bottom: 1px solid #ddd; }
.outcome { font-weight: bold; padding: .1em .5em; border-radius: .3em; color: #fff; }
.done { background: #2e7d32; } .failed { background: #c62828; } .running { background: #1565c0; }
.up { color: #2e7d32; } .down { color: #c62828; }
.meta { color: #666; }
</style>
</head>
<body>
<h1>slotcron on <code>{{ replica }}</code></h1>
<p class="meta">{{ config }} · {{ now }} ·
{% if standalone %}standalone (in-process lock){% else %}redis:
{% for n in nodes %}<span class="{{ 'up' if n.up else 'down' }}">{{ n.address }} {{ 'up' if n.up else 'down' }}</span>{% if not loop.last %}, {% endif %}{% endfor %}{% endif %}</p>
{% for job in jobs %}
<h2 id="job-{{ job.name }}">{{ job.name }}</h2>
<p><code>{{ job.schedule }}</code> in {{ job.zone }} · {{ job.action }}</p>
<p>Next: {% for s in job.next %}<code>{{ s }}</code>{% if not loop.last %}, {% endif %}{% endfor %}</p>
{% if job.history_error %}<p class="down">history unavailable: {{ job.history_error }}</p>{% endif %}
<table>
<tr><th>slot</th><th>winner</th><th>outcome</th><th>duration</th><th>error</th></tr>
{% for r in job.runs %}<tr><td>{{ r.slot }}</td><td>{{ r.replica }}</td><td><span class="outcome {{ r.outcome }}">{{ r.outcome }}</span></td><td>{{ r.duration }}</td><td>{{ r.error }}</td></tr>
{% else %}<tr><td colspan="5" class="meta">no runs yet</td></tr>{% endfor %}
</table>
{% endfor %}
</body>
</html>
"#;

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
