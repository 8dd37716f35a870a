//! Where the status server runs: on a thread and a runtime of its own, reading on connections
//! of its own, so that however many clients load its pages it takes one core at most and no
//! place in the races' queues (issue 29, case 4).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Sources;
use crate::config::Config;
use crate::redis::Nodes;

/// The status page's own pool of connections to the nodes (`None` in standalone mode), so
/// that its reads of every job's history, pause log and watermark never queue on the
/// multiplexed connections the races use. A pool that cannot be opened (sentinel mode, no
/// primary named just now) leaves the page on the races' pool, with a warning.
async fn page_readers(config: &Config, replica: &str) -> Option<Arc<Nodes>> {
    let redis = config.redis.as_ref()?;
    let (urls, timeout, ca) = (&redis.nodes, redis.lock.node_timeout, redis.ca.as_deref());
    match Nodes::open(urls, timeout, ca, &redis.topology(), replica).await {
        Ok(nodes) => Some(Arc::new(nodes)),
        Err(e) => {
            tracing::warn!(replica = %replica, error = %e,
                "the status page reads on the races' connections: its own could not be opened");
            None
        }
    }
}

/// Binds `listen` and serves `sources` there on a thread of its own until `shutdown`, the
/// page reading on connections of its own; `tracker` waits for it all.
pub async fn spawn(
    listen: SocketAddr,
    mut sources: Sources,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the [http] listen address {listen}"))?;
    let readers = page_readers(&sources.config(), &sources.name).await;
    if let Some(nodes) = &readers {
        sources.history = sources.history.reading_on(nodes.clone());
        sources.control = sources.control.reading_on(nodes.clone());
        sources.audit = sources.audit.reading_on(nodes.clone());
    }
    tracing::info!(replica = %sources.name, %listen, "serving /healthz, /readyz, /metrics and the status page");
    // A std listener crosses to the server's runtime; tokio's is tied to this one.
    let listener = listener.into_std()?;
    let serving = serve_then_settle(listener, sources, shutdown.clone(), readers);
    on_a_thread_of_its_own(serving, tracker).context("starting the status server's thread")
}

async fn serve_then_settle(
    listener: std::net::TcpListener,
    sources: Sources,
    shutdown: CancellationToken,
    readers: Option<Arc<Nodes>>,
) {
    match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => super::serve(listener, sources, shutdown).await,
        Err(e) => tracing::error!(error = %e, "the status server cannot listen"),
    }
    if let Some(readers) = readers {
        readers.settle().await;
    }
}

/// Runs `serving` on a thread and a current-thread runtime of its own, tracked by `tracker`
/// (which a replica's shutdown waits for).
fn on_a_thread_of_its_own(
    serving: impl Future<Output = ()> + Send + 'static,
    tracker: &TaskTracker,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (done, finished) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("slotcron-http".into())
        .spawn(move || {
            runtime.block_on(serving);
            drop(done);
        })?;
    tracker.spawn(async move {
        // Err when the thread is done (the sender dropped): its only message.
        let _ = finished.await;
    });
    Ok(())
}
