//! What the status page costs, bounded whatever the number of page loads (issue 29, case 4:
//! twenty clients loading the page in a loop made every load read every job's history, pause
//! log and watermark from every node and render the whole page, and the replicas missed a
//! quarter of their slots).
//!
//! - The reads are a [`Snapshot`] taken at most once per [`SNAPSHOT_LIFE`], by one request at
//!   a time (single-flight: the loads that come meanwhile wait for it and share it), on the
//!   page's own connections to the nodes (see `replica::serve_status`), never the races'.
//! - A page is rendered from the snapshot once per address (up to [`PAGES_KEPT`] addresses),
//!   one rendering at a time, on a blocking thread: off the runtime the races run on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::future::join_all;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::view::{Frame, RUNS_READ, Reads};
use super::{Sources, probe, shards};
use crate::config::{Config, Job};
use crate::fleet::control::paused_intervals;
use crate::record::audit::{AuditEntry, AuditQuery, AuditUnavailable};
use crate::record::watermark;

/// How long a snapshot is shown before the next load reads again. Far below the page's own
/// 10 s refresh, so a reader sees nothing staler than it would have; a flood costs one round
/// of reads per this long.
pub const SNAPSHOT_LIFE: Duration = Duration::from_secs(2);
/// The audit trail's entries a snapshot reads and the page shows, the newest.
pub const AUDIT_SHOWN: usize = 20;
/// Addresses (filter and open tables) whose page is kept per snapshot: more distinct ones are
/// still rendered, one at a time, but not kept, so a client cannot grow the memory.
pub const PAGES_KEPT: usize = 64;

/// One round of the page's reads, shown until it is [`SNAPSHOT_LIFE`] old.
pub struct Snapshot {
    taken: Instant,
    /// The replica serving the page.
    pub replica: String,
    /// The configuration in force when it was taken (a reload swaps it).
    pub config: Arc<Config>,
    /// The replica's clock when it was taken: the page's "now".
    pub frame: Frame,
    /// Per job of `config.jobs`, in order.
    pub reads: Vec<Reads>,
    /// The nodes as the replica saw them (empty in standalone mode).
    pub nodes: Vec<(String, bool)>,
    /// A cluster's shards (empty unless the mode is cluster).
    pub shards: Vec<String>,
    /// The replicas of the membership view.
    pub live: Vec<String>,
    /// The audit trail's latest entries (or why it could not be read).
    pub audit: Result<Vec<AuditEntry>, AuditUnavailable>,
    /// The pages rendered from it, by address.
    pages: Mutex<HashMap<String, Rendered>>,
}

impl Snapshot {
    /// Reads what every job's section shows, and the nodes and the fleet.
    async fn take(sources: &Sources) -> Self {
        let config = sources.config();
        let frame = Frame {
            now: sources.clock.now(),
            zone: config.scheduler.timezone,
        };
        let latest = AuditQuery {
            limit: AUDIT_SHOWN,
            ..AuditQuery::default()
        };
        let (reads, nodes, shards, audit) = tokio::join!(
            read_all(sources, &config.jobs, &frame),
            probe(sources),
            shards(sources),
            sources.audit.read(&latest),
        );
        Snapshot {
            taken: Instant::now(),
            replica: sources.name.clone(),
            live: sources.membership.live(&sources.name),
            config,
            frame,
            reads,
            nodes,
            shards,
            audit,
            pages: Mutex::default(),
        }
    }

    fn is_fresh(&self) -> bool {
        self.taken.elapsed() < SNAPSHOT_LIFE
    }

    fn page(&self, address: &str) -> Option<Rendered> {
        self.lock_pages().get(address).cloned()
    }

    fn keep(&self, address: String, page: &Rendered) {
        let mut pages = self.lock_pages();
        if pages.len() < PAGES_KEPT {
            pages.insert(address, page.clone());
        }
    }

    /// A std mutex: held for a lookup or an insert, never across an await.
    fn lock_pages(&self) -> std::sync::MutexGuard<'_, HashMap<String, Rendered>> {
        self.pages.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every job's reads at once: a snapshot costs one round of Redis reads, not one per job.
async fn read_all(sources: &Sources, jobs: &[Arc<Job>], frame: &Frame) -> Vec<Reads> {
    join_all(jobs.iter().map(|job| read_job(sources, job, frame))).await
}

/// A job's runs, pause log and watermark (read together), and its pause as this replica
/// knows it.
async fn read_job(sources: &Sources, job: &Job, frame: &Frame) -> Reads {
    let (runs, log, watermark, last_alert) = tokio::join!(
        sources.history.read(&job.name, RUNS_READ),
        sources.control.log(&job.name),
        watermark::recorded(&sources.history, &job.name),
        crate::record::alerts::last(&sources.history, &job.name),
    );
    Reads {
        runs,
        paused: paused_intervals(&log),
        watermark,
        pause: sources.control.paused(&job.name, frame.now),
        last_alert: last_alert.ok().flatten(),
    }
}

/// A rendered page (or its error), cheap to clone and to send again.
#[derive(Clone)]
pub struct Rendered {
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
}

impl Rendered {
    /// `html` answered with `status`.
    pub fn html(status: StatusCode, html: String) -> Self {
        Rendered {
            status,
            content_type: "text/html; charset=utf-8",
            body: Bytes::from(html),
        }
    }

    /// A plain-text error.
    pub fn error(text: String) -> Self {
        Rendered {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from(text),
        }
    }
}

impl IntoResponse for Rendered {
    fn into_response(self) -> Response {
        let headers = [(header::CONTENT_TYPE, self.content_type)];
        (self.status, headers, self.body).into_response()
    }
}

/// The page's snapshot and its renderings, one per replica.
pub struct Pages {
    /// The newest snapshot. A tokio mutex, held across the reads on purpose: the one load that
    /// finds it stale reads; the loads that come meanwhile queue here and take its result.
    newest: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
    /// One rendering at a time (each on a blocking thread).
    renders: Semaphore,
}

impl Default for Pages {
    fn default() -> Self {
        Pages {
            newest: tokio::sync::Mutex::new(None),
            renders: Semaphore::new(1),
        }
    }
}

impl Pages {
    /// The page at `address`, from a snapshot at most `SNAPSHOT_LIFE` old: kept, or rendered
    /// by `render` on a blocking thread, one rendering at a time.
    pub async fn page(
        &self,
        sources: &Sources,
        address: String,
        render: impl FnOnce(&Snapshot) -> Rendered + Send + 'static,
    ) -> Rendered {
        let snapshot = self.snapshot(sources).await;
        if let Some(page) = snapshot.page(&address) {
            return page;
        }
        // Never closed: the permit is always granted.
        let _permit = self.renders.acquire().await;
        if let Some(page) = snapshot.page(&address) {
            return page;
        }
        let page = render_off_the_runtime(snapshot.clone(), render).await;
        snapshot.keep(address, &page);
        page
    }

    /// The newest snapshot, taken again when it is older than [`SNAPSHOT_LIFE`].
    async fn snapshot(&self, sources: &Sources) -> Arc<Snapshot> {
        let mut newest = self.newest.lock().await;
        if let Some(fresh) = newest.as_ref().filter(|s| s.is_fresh()) {
            return fresh.clone();
        }
        let taken = Arc::new(Snapshot::take(sources).await);
        *newest = Some(taken.clone());
        taken
    }
}

/// `render` of `snapshot` on a blocking thread: a page of many jobs is milliseconds of CPU
/// that the runtime's workers owe the races.
async fn render_off_the_runtime(
    snapshot: Arc<Snapshot>,
    render: impl FnOnce(&Snapshot) -> Rendered + Send + 'static,
) -> Rendered {
    tokio::task::spawn_blocking(move || render(&snapshot))
        .await
        .unwrap_or_else(|e| Rendered::error(format!("status page: {e}\n")))
}
