//! The replica's HTTP endpoints (`[http] listen`): `/healthz`, `/readyz`, `/metrics` and `/`,
//! a server-rendered status page readable without JavaScript.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State as AxumState;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use chrono::Utc;
use minijinja::{context, Environment};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::lock::SlotLock;
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

async fn healthz() -> &'static str {
    "ok\n"
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

async fn metrics(AxumState(state): AxumState<State>) -> Response {
    for (node, up) in probe(&state.replica.lock).await {
        state.replica.metrics.node_up(&node, up);
    }
    let body = state.replica.metrics.encode();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
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
