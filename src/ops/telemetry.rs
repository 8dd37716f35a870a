//! Logs: tracing with stable field names (`job`, `slot`, `replica`, `outcome`, `winner`,
//! `duration_ms`, `error`), as text for people or JSON lines for containers. `RUST_LOG` filters.

use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    /// Human-readable lines.
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(UnknownLogFormat(other.to_owned())),
        }
    }
}

/// `--log-format` named neither `text` nor `json`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown log format {0:?} (text or json)")]
pub struct UnknownLogFormat(pub String);

/// Colours on a terminal, unless `NO_COLOR` is set to anything but the empty string
/// (<https://no-color.org>).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The filter from `RUST_LOG` (default `info`). The file watcher's crate logs every inotify event
/// of the configuration's directory at `trace`; when the log itself is written into that
/// directory, each of those lines is a new event: a loop that wrote hundreds of MB in seconds.
/// So `notify` stays at `debug` unless `RUST_LOG` names it.
fn filter(rust_log: Option<&str>) -> EnvFilter {
    let filter = rust_log
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    if rust_log.is_some_and(|v| v.contains("notify")) {
        return filter;
    }
    filter.add_directive("notify=debug".parse().expect("a valid directive"))
}

/// Installs the global subscriber, writing to stdout. `RUST_LOG` overrides the default `info`.
pub fn init(format: LogFormat) {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    init_writing(format, std::io::stdout, ansi);
}

/// [`init`] writing to stderr: a CLI command's logs (`-v`), kept apart from its result on
/// stdout.
pub fn init_on_stderr(format: LogFormat) {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    init_writing(format, std::io::stderr, ansi);
}

/// The global subscriber writing to `writer`, coloured when it is a `terminal`.
fn init_writing<W>(format: LogFormat, writer: W, terminal: bool)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref());
    let ansi = colour(terminal, std::env::var_os("NO_COLOR"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(writer)
        // A log pipe its reader closed (`slotcron run | head`) is the reader's choice: the
        // schedule goes on, and each event would otherwise say so again on stderr.
        .log_internal_errors(false);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    // A subscriber already installed (tests running several replicas in one process) is fine.
    drop(result);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_turns_colours_off_on_a_terminal() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())), "an empty NO_COLOR is unset");
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None), "never colours into a pipe");
    }

    #[test]
    fn notify_stays_at_debug_unless_rust_log_names_it() {
        assert_eq!(filter(Some("trace")).to_string(), "notify=debug,trace");
        assert_eq!(filter(None).to_string(), "notify=debug,info");
        assert_eq!(
            filter(Some("info,notify=trace")).to_string(),
            "notify=trace,info"
        );
    }
}
