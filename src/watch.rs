//! Reload on a change of the configuration file, as SIGHUP does. The file's directory is
//! watched, not the file: a Kubernetes ConfigMap volume changes by a symlink swap (`..data` ->
//! a new directory, renamed into place), which never touches the inode the path first led to,
//! and editors often replace a file by renaming a new one over it. Only events that name the
//! file itself or one of the ConfigMap's `..` entries lead to a read of the file: everything
//! else in the directory (a log file written beside it, at every line) is ignored before it wakes
//! anything. A reload is asked for only when the file's bytes changed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Quiet time after an event before the file is read: a swap or a save is several events, and
/// a file written in place is complete only after its last write.
const SETTLE: Duration = Duration::from_millis(200);

/// Starts watching `config`'s directory; each change of its content sends on `reloads`, until
/// `shutdown`. The returned future is the watch; it owns the watcher.
pub fn watch_config(
    config: &Path,
    reloads: mpsc::Sender<()>,
    shutdown: CancellationToken,
) -> notify::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let (events, heard) = mpsc::channel(1);
    let name = config.file_name().map(|n| n.to_owned());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Opens and reads (`Access`) change nothing, and the watch's own read of the file is one.
        let changed = |e: &notify::Event| !e.kind.is_access();
        if event.is_ok_and(|e| changed(&e) && e.paths.iter().any(|p| concerns(p, name.as_deref())))
        {
            // An event already pending covers this one: the file is read once either way.
            let _ = events.try_send(());
        }
    })?;
    let dir = directory_of(config);
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    tracing::info!(config = %config.display(), dir = %dir.display(),
        "watching the configuration's directory: a change reloads it");
    Ok(follow(watcher, config.to_owned(), heard, reloads, shutdown))
}

/// Whether an event on `path` can change the configuration named `name` in the watched
/// directory: the file itself, or a ConfigMap's `..data` symlink and its `..<timestamp>`
/// directories (the kubelet's atomic writer swaps those, never the file's own name).
fn concerns(path: &Path, name: Option<&std::ffi::OsStr>) -> bool {
    match path.file_name() {
        Some(file) => Some(file) == name || file.as_encoded_bytes().starts_with(b".."),
        // An event on the directory itself (it was moved or removed).
        None => true,
    }
}

fn directory_of(config: &Path) -> PathBuf {
    match config.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Reads the file after each (settled) event and asks for a reload when its bytes changed.
async fn follow(
    watcher: RecommendedWatcher,
    config: PathBuf,
    mut heard: mpsc::Receiver<()>,
    reloads: mpsc::Sender<()>,
    shutdown: CancellationToken,
) {
    let _watcher = watcher;
    let mut last = tokio::fs::read(&config).await.ok();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            event = heard.recv() => if event.is_none() { return },
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SETTLE) => {}
        }
        // Events during the settling time are covered by this read.
        while heard.try_recv().is_ok() {}
        tracing::debug!(config = %config.display(), "the configuration's directory changed: reading the file");
        let now = tokio::fs::read(&config).await.ok();
        if now.is_some() && now != last {
            tracing::info!(config = %config.display(), "the configuration file changed: reloading");
            last = now;
            // A reload already pending covers this one too.
            let _ = reloads.try_send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_file_and_configmap_entries_concern_the_watch() {
        let name = Some(std::ffi::OsStr::new("jobs.toml"));
        assert!(concerns(Path::new("/etc/slotcron/jobs.toml"), name));
        assert!(concerns(Path::new("/etc/slotcron/..data"), name));
        assert!(concerns(Path::new("/etc/slotcron/..data_tmp"), name));
        assert!(concerns(
            Path::new("/etc/slotcron/..2026_11_23_10_00_00.1"),
            name
        ));
        assert!(!concerns(Path::new("/etc/slotcron/slotcron.log"), name));
        assert!(!concerns(Path::new("/etc/slotcron/jobs.toml.swp"), name));
        assert!(!concerns(Path::new("/etc/slotcron/notes.txt"), name));
    }
}
