//! The status page (`/`, `/?job=NAME`): an overview of every job (failures first), the fleet's
//! replicas with their share of the wins, and per job its outcome strip, its chart and its
//! last runs. Server-rendered; the page refreshes itself every 10 s and needs no JavaScript.
//!
//! Every time is shown in one zone, the `[scheduler] timezone` (UTC when unset): the zone the
//! operators chose for the fleet, whatever each job's own zone.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use minijinja::{Environment, context};
use serde::Deserialize;

use super::Sources;
use super::fleet::fleet;
use super::snapshot::{AUDIT_SHOWN, Rendered, Snapshot};
use super::view::{ActionText, Frame, JobView, RUNS_READ, Reads, STRIP_SLOTS, job_view, moment};
use super::words::{meaning, place};
use crate::config::{Config, Job, RedisMode};
use crate::record::audit::{AuditEntry, AuditUnavailable};

/// The fates the strip's legend names, in the order a reader meets them.
pub(super) const OUTCOMES: [&str; 8] = [
    "done",
    "failed",
    "missed",
    "handed_off",
    "skipped",
    "paused",
    "running",
    "pending",
];

/// The page's parameters: `job`, a job's name or part of one (case-insensitive), and `runs`,
/// the jobs whose table of last runs is open (comma-separated names). Both live in the
/// address, so the page's 10 s refresh, which reloads it, keeps what the user opened.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct Filter {
    job: Option<String>,
    runs: Option<String>,
}

/// The page (404, with the list of jobs, when the filter matches none), from the replica's
/// snapshot: a load costs no Redis read and, but for a new address, no rendering
/// ([`super::snapshot`]).
pub async fn page(State(sources): State<Sources>, Query(filter): Query<Filter>) -> Response {
    let pages = sources.pages.clone();
    let address = filter.address();
    pages
        .page(&sources, address, move |snapshot| {
            render_page(snapshot, &filter)
        })
        .await
        .into_response()
}

impl Filter {
    /// The page's address as far as it changes the page: its key among the rendered pages.
    fn address(&self) -> String {
        format!("{:?}|{:?}", self.job, self.runs)
    }
}

/// The page of `filter` from `snapshot`.
fn render_page(snapshot: &Snapshot, filter: &Filter) -> Rendered {
    let config = &snapshot.config;
    let wanted = filter
        .job
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let jobs = select(&config.jobs, wanted);
    let reads = reads_of(snapshot, &jobs);
    let views = views(config, &jobs, &reads, &snapshot.frame);
    let unknown = wanted.is_some() && jobs.is_empty();
    let status = if unknown {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    let page = Page {
        replica: &snapshot.replica,
        config,
        frame: &snapshot.frame,
        wanted,
        open: &open_runs(filter.runs.as_deref()),
        nodes: &snapshot.nodes,
        shards: &snapshot.shards,
        live: &snapshot.live,
        reads: &reads,
        views: &views,
        audit: &snapshot.audit,
    };
    match render(&page) {
        Ok(html) => Rendered::html(status, html),
        Err(e) => Rendered::error(format!("status page: {e:#}\n")),
    }
}

/// The snapshot's reads of `jobs` (jobs of its configuration), in their order.
fn reads_of<'a>(snapshot: &'a Snapshot, jobs: &[Arc<Job>]) -> Vec<&'a Reads> {
    let by_name: HashMap<&str, &Reads> = (snapshot.config.jobs.iter())
        .map(|j| j.name.as_str())
        .zip(&snapshot.reads)
        .collect();
    jobs.iter()
        .filter_map(|j| by_name.get(j.name.as_str()).copied())
        .collect()
}

/// The jobs `wanted` names: the one of that exact name, else every name containing it
/// (ignoring case); every job without a filter.
fn select(jobs: &[Arc<Job>], wanted: Option<&str>) -> Vec<Arc<Job>> {
    let Some(wanted) = wanted else {
        return jobs.to_vec();
    };
    if let Some(exact) = jobs.iter().find(|j| j.name == wanted) {
        return vec![exact.clone()];
    }
    let needle = wanted.to_lowercase();
    jobs.iter()
        .filter(|j| j.name.to_lowercase().contains(&needle))
        .cloned()
        .collect()
}

/// The jobs' views in the overview's order: failing, then paused, then the rest, each in the
/// file's order.
fn views(config: &Config, jobs: &[Arc<Job>], reads: &[&Reads], frame: &Frame) -> Vec<JobView> {
    // A slot unrecorded past its start window counts as missed (as `history --since`).
    let skew = config.scheduler.start_window();
    let mut views: Vec<JobView> = jobs
        .iter()
        .zip(reads)
        .map(|(job, reads)| {
            // A slot with jitter is run up to `jitter` after its instant: pending until then.
            let settling = job.timeout + skew + job.jitter;
            let settling = chrono::Duration::from_std(settling).unwrap_or_default();
            let prefix = config.scheduler.key_prefix.as_str();
            job_view(
                job,
                &action_text(config, job),
                reads,
                (settling, prefix),
                frame,
            )
        })
        .collect();
    views.sort_by_key(|v| v.standing);
    views
}

/// The action's kind and target, secrets scrubbed, and where it sends.
fn action_text(config: &Config, job: &Job) -> ActionText {
    let kind = job.action.kind();
    let target = job.action.target().map(|t| config.scrubber.scrub(&t));
    ActionText {
        line: target
            .as_ref()
            .map_or_else(|| kind.to_owned(), |t| format!("{kind} → {t}")),
        kind,
        place: target.and_then(|t| place(kind, &t)),
    }
}

/// The fleet line: the last 24 h of the jobs shown, summed.
#[derive(Debug, Default, serde::Serialize)]
struct FleetLine {
    failed: usize,
    missed: usize,
    duplicated: usize,
    /// Slots skipped because their job was paused.
    paused: usize,
    /// Jobs paused now.
    paused_now: usize,
    /// The jobs counted only from their oldest run read (more runs than the page reads).
    shortened: Vec<String>,
}

fn fleet_line(views: &[JobView]) -> FleetLine {
    let mut line = FleetLine::default();
    for view in views {
        let day = &view.day;
        line.failed += day.failed;
        line.missed += day.missed;
        line.duplicated += day.duplicated;
        line.paused += day.paused;
        line.paused_now += usize::from(view.paused.is_some());
        if day.shortened {
            line.shortened.push(view.name.clone());
        }
    }
    line
}

/// What one rendering reads.
struct Page<'a> {
    replica: &'a str,
    config: &'a Config,
    frame: &'a Frame,
    wanted: Option<&'a str>,
    /// The jobs whose table of last runs is open.
    open: &'a [String],
    nodes: &'a [(String, bool)],
    /// A cluster's shards (empty unless the mode is cluster).
    shards: &'a [String],
    /// The replicas of the membership view (this one alone without membership).
    live: &'a [String],
    reads: &'a [&'a Reads],
    views: &'a [JobView],
    /// The audit trail's latest entries, or why they could not be read.
    audit: &'a Result<Vec<AuditEntry>, AuditUnavailable>,
}

fn render(page: &Page<'_>) -> Result<String, minijinja::Error> {
    let runs = page.reads.iter().flat_map(|r| r.runs.iter().flatten());
    let shares = fleet(runs, page.live, page.replica);
    let mut env = Environment::new();
    // The `.html` name turns on auto-escaping: job names, reasons and errors are user text.
    env.add_template("status.html", PAGE)?;
    env.get_template("status.html")?.render(context! {
        replica => page.replica,
        config => page.config.path.display().to_string(),
        now => moment(page.frame.now, page.frame),
        zone => page.frame.zone.name(),
        standalone => page.config.redis.is_none(),
        mode => page.config.redis.as_ref().map(|r| r.mode.name()),
        master => page.config.redis.as_ref().and_then(|r| match &r.mode {
            RedisMode::Sentinel { master } => Some(master.as_str()),
            _ => None,
        }),
        nodes => page.nodes.iter().map(|(n, up)| context! { address => n, up => up }).collect::<Vec<_>>(),
        shards => page.shards,
        filter => page.wanted,
        unknown => page.wanted.is_some() && page.views.is_empty(),
        job_names => page.config.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
        jobs => page.views,
        toggles => page.views.iter().map(|v| toggle(page, &v.name)).collect::<Vec<_>>(),
        wins => shares.iter().map(|s| s.wins).sum::<usize>(),
        fleet_line => fleet_line(page.views),
        runs_read => RUNS_READ,
        meanings => OUTCOMES.map(meaning),
        fleet => shares,
        strip_slots => STRIP_SLOTS,
        outcomes => OUTCOMES,
        audit => audit_rows(page),
        audit_error => page.audit.as_ref().err().map(ToString::to_string),
        audit_shown => AUDIT_SHOWN,
    })
}

/// The audit section's rows: with a filter, the entries of the jobs shown and the fleet-wide
/// ones (reloads).
fn audit_rows(page: &Page<'_>) -> Vec<minijinja::Value> {
    let entries = page.audit.as_ref().map(Vec::as_slice).unwrap_or_default();
    let shown = |e: &&AuditEntry| {
        page.wanted.is_none()
            || e.job
                .as_ref()
                .is_none_or(|job| page.views.iter().any(|v| &v.name == job))
    };
    entries
        .iter()
        .filter(shown)
        .map(|e| {
            context! {
                at => moment(e.at, page.frame),
                action => e.action.as_str(),
                job => e.job,
                actor => e.actor,
                status => e.status.as_str(),
                reason => e.reason,
                detail => e.detail,
            }
        })
        .collect()
}

/// `runs=a,b` as names.
fn open_runs(runs: Option<&str>) -> Vec<String> {
    runs.into_iter()
        .flat_map(|r| r.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether `job`'s table of last runs is open, and the address that flips it while keeping the
/// filter and the other open tables (a link, not `<details>`: the page has no script to carry
/// an element's state across its refresh).
fn toggle(page: &Page<'_>, job: &str) -> minijinja::Value {
    let open = page.open.iter().any(|n| n == job);
    let runs: Vec<&str> = page
        .open
        .iter()
        .map(String::as_str)
        .filter(|n| *n != job)
        .chain((!open).then_some(job))
        .collect();
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    if let Some(wanted) = page.wanted {
        query.append_pair("job", wanted);
    }
    if !runs.is_empty() {
        query.append_pair("runs", &runs.join(","));
    }
    let query = query.finish();
    let href = match query.is_empty() {
        true => format!("/#job-{job}"),
        false => format!("/?{query}#job-{job}"),
    };
    context! { open => open, href => href }
}

/// The page's template: placement only; every number and word is computed in Rust.
const PAGE: &str = include_str!("page.html");

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;

    fn jobs(names: &[&str]) -> Vec<Arc<Job>> {
        let text: String = names
            .iter()
            .map(|n| format!("[[job]]\nname = {n:?}\nschedule = \"0 * * * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n"))
            .collect();
        crate::config::parse(Path::new("t.toml"), &text, &HashMap::new())
            .unwrap()
            .jobs
    }

    fn names(jobs: &[Arc<Job>]) -> Vec<&str> {
        jobs.iter().map(|j| j.name.as_str()).collect()
    }

    fn rendered(config: &Config, wanted: Option<&str>, reads: &[Reads]) -> String {
        rendered_with(config, wanted, reads, &Ok(Vec::new()))
    }

    fn rendered_with(
        config: &Config,
        wanted: Option<&str>,
        reads: &[Reads],
        audit: &Result<Vec<AuditEntry>, AuditUnavailable>,
    ) -> String {
        let frame = Frame {
            now: chrono::Utc::now(),
            zone: chrono_tz::UTC,
        };
        let jobs = select(&config.jobs, wanted);
        let reads: Vec<&Reads> = reads.iter().collect();
        let views = views(config, &jobs, &reads[..jobs.len()], &frame);
        render(&Page {
            replica: "r<1>",
            config,
            frame: &frame,
            wanted,
            open: &[],
            nodes: &[],
            shards: &[],
            live: &[],
            reads: &reads,
            views: &views,
            audit,
        })
        .unwrap()
    }

    fn no_reads(n: usize) -> Vec<Reads> {
        (0..n)
            .map(|_| Reads {
                runs: Ok(Vec::new()),
                paused: Vec::new(),
                watermark: None,
                pause: None,
                last_alert: None,
            })
            .collect()
    }

    #[test]
    fn a_runs_toggle_flips_its_job_and_keeps_the_filter_and_the_other_open_tables() {
        let config = crate::config::parse(
            Path::new("t.toml"),
            "[[job]]\nname = \"a\"\nschedule = \"0 * * * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n",
            &HashMap::new(),
        )
        .unwrap();
        let frame = Frame {
            now: chrono::Utc::now(),
            zone: chrono_tz::UTC,
        };
        let open = open_runs(Some("a, b,,"));
        assert_eq!(open, ["a", "b"]);
        let page = Page {
            replica: "r",
            config: &config,
            frame: &frame,
            wanted: Some("x y"),
            open: &open,
            nodes: &[],
            shards: &[],
            live: &[],
            reads: &[],
            views: &[],
            audit: &Ok(Vec::new()),
        };
        let href = |job| toggle(&page, job).get_attr("href").unwrap().to_string();
        assert_eq!(
            href("a"),
            "/?job=x+y&runs=b#job-a",
            "closes a, keeps b open"
        );
        assert_eq!(href("c"), "/?job=x+y&runs=a%2Cb%2Cc#job-c", "opens c too");
        let page = Page {
            wanted: None,
            open: &[],
            ..page
        };
        assert_eq!(
            toggle(&page, "a").get_attr("href").unwrap().to_string(),
            "/?runs=a#job-a"
        );
    }

    #[test]
    fn user_text_is_escaped_and_a_filter_that_matches_nothing_is_named() {
        let text = "[[job]]\nname = \"a.b\"\nschedule = \"0 * * * * *\"\n\
                    [job.action]\ntype = \"log\"\ncontent = \"x\"\n";
        let config = crate::config::parse(Path::new("t.toml"), text, &HashMap::new()).unwrap();
        let html = rendered(&config, None, &no_reads(1));
        assert!(
            html.contains("r&lt;1&gt;") && !html.contains("r<1>"),
            "{html}"
        );
        assert!(html.contains(r#"<table class="overview">"#));
        let html = rendered(&config, Some("<zz>"), &[]);
        assert!(html.contains("No job matches <q>&lt;zz&gt;</q>"), "{html}");
        assert!(!html.contains(r#"<table class="overview">"#));
    }

    #[test]
    fn a_filter_picks_the_exact_name_else_every_name_containing_it() {
        let all = jobs(&["push", "push-eu", "Report"]);
        assert_eq!(names(&select(&all, None)), ["push", "push-eu", "Report"]);
        assert_eq!(names(&select(&all, Some("push"))), ["push"]);
        assert_eq!(names(&select(&all, Some("PUS"))), ["push", "push-eu"]);
        assert_eq!(names(&select(&all, Some("report"))), ["Report"]);
        assert!(select(&all, Some("nope")).is_empty());
    }

    #[test]
    fn the_audit_section_shows_the_jobs_shown_and_the_reloads_escaped() {
        use crate::record::audit::AuditAction;
        let config = crate::config::parse(
            Path::new("t.toml"),
            "[[job]]\nname = \"a\"\nschedule = \"0 * * * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n\
             [[job]]\nname = \"b\"\nschedule = \"0 * * * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n",
            &HashMap::new(),
        )
        .unwrap();
        let now = chrono::Utc::now();
        let entries = vec![
            AuditEntry::new(now, "ops@host", AuditAction::Pause)
                .job("a")
                .reason(Some("<holiday>")),
            AuditEntry::new(now, "ops@host", AuditAction::Trigger).job("b"),
            AuditEntry::new(now, "replica-1", AuditAction::Reload).detail("config hash 1 -> 2"),
        ];
        let html = rendered_with(&config, Some("a"), &no_reads(2), &Ok(entries));
        let section = &html[html.find("id=\"audit\"").unwrap()..];
        assert!(section.contains("&lt;holiday&gt;"), "{section}");
        assert!(section.contains("config hash 1 -&gt; 2"), "{section}");
        assert!(!section.contains("<td>trigger</td>"), "{section}");
        let unavailable = AuditUnavailable {
            answered: 1,
            nodes: 3,
            needed: 2,
            errors: "refused".into(),
        };
        let down = rendered_with(&config, None, &no_reads(2), &Err(unavailable));
        assert!(down.contains("audit trail unavailable: 1 of 3"));
    }
}
