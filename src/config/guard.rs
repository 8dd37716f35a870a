//! A reload checked on a blocking thread, where a panic (a bug) becomes an error of the file: the
//! reload is rejected and the running schedule kept, instead of the replica lost with it.

use std::path::Path;

use super::{Config, ConfigError, ConfigErrors};

/// Runs `load` on `path` on a blocking thread; its panic becomes a file-level error.
pub(super) async fn guarded(
    path: &Path,
    load: fn(&Path) -> Result<Config, ConfigErrors>,
) -> Result<Config, ConfigErrors> {
    let owned = path.to_owned();
    match tokio::task::spawn_blocking(move || load(&owned)).await {
        Ok(result) => result,
        Err(failed) => Err(ConfigErrors {
            path: path.display().to_string(),
            errors: vec![ConfigError::file(format!(
                "checking the file failed ({}): this is a bug in slotcron, please report it",
                why_not_loaded(failed)
            ))],
        }),
    }
}

/// What stopped the loader's thread: its panic message, or the runtime's cancellation.
fn why_not_loaded(failed: tokio::task::JoinError) -> String {
    match failed.try_into_panic() {
        Ok(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|m| (*m).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            format!("panicked: {message}")
        }
        Err(cancelled) => cancelled.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_panic_while_loading_is_an_error_of_the_file() {
        let path = std::path::Path::new("/etc/slotcron/jobs.toml");
        let errors = super::guarded(path, |_| panic!("event out of range"))
            .await
            .unwrap_err();
        assert_eq!(errors.errors.len(), 1);
        let text = errors.to_string();
        assert!(
            text.starts_with(
                "/etc/slotcron/jobs.toml: checking the file failed (panicked: event out of range)"
            ),
            "{text}"
        );
    }
}
