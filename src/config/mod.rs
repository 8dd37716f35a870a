//! jobs.toml, parsed once at start into checked types.
//!
//! Loading never panics and never stops at the first problem: it reports every error it finds,
//! each naming the file, the job and the field (the line for TOML syntax), and the caller exits
//! non-zero before anything starts.
//!
//! Each section is typed ([`raw`]) and then checked; a fleet built in code (the library's
//! `Fleet`) gives the typed sections itself and goes through the same checks ([`check_built`]),
//! so its errors are a file's, naming the job and the field.

mod actions;
mod alerts;
mod built;
mod calendars;
mod catch_up;
mod deadline;
pub mod deployment;
pub mod durations;
mod endpoints;
pub mod env;
pub mod error;
mod guard;
mod jitter;
mod jobs;
mod locate;
pub(crate) mod raw;
mod reload;
mod scheduler;
pub mod schema;
mod suggest;
mod typed;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use toml::{Table, Value};

use crate::action::Action;
use crate::action::template::Templates;
use crate::secret::Scrubber;
use crate::time::schedule::Schedule;
use crate::time::words;
pub(crate) use built::{Built, check_built};
pub(crate) use calendars::CalendarDays;
use durations::DurationRange;
pub use endpoints::{HttpConfig, RedisConfig, RedisMode, SERVER_COMPILED_OUT};
pub use env::{Env, ProcessEnv};
pub use error::{ConfigError, ConfigErrors, Location, Section};
pub use reload::{hash_change, reload, restart_only_changes};
pub use scheduler::{
    Candidates, ClockMode, DEFAULT_CANDIDATE_STAGGER, DEFAULT_CANDIDATES,
    DEFAULT_DESTINATION_CONFLICT_AFTER, DEFAULT_KEY_PREFIX, DEFAULT_MAX_CLOCK_SKEW,
    SchedulerConfig, start_window,
};

/// Default job `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A checked configuration.
#[derive(Debug)]
pub struct Config {
    /// The file it was read from, for messages and reloads.
    pub path: PathBuf,
    /// `[scheduler]`, with its defaults.
    pub scheduler: SchedulerConfig,
    /// `None`: standalone mode, an in-process lock.
    pub redis: Option<RedisConfig>,
    /// `[http]`: the health, metrics and status endpoints; `None`: not served.
    pub http: Option<HttpConfig>,
    /// `[telemetry] otlp_endpoint`: where a trace per won run goes; `None`: no traces.
    pub otlp_endpoint: Option<url::Url>,
    /// Enabled jobs, in file order.
    pub jobs: Vec<Arc<Job>>,
    /// Jobs with `enabled = false`: checked, not scheduled.
    pub disabled: Vec<String>,
    /// The schedules of the disabled jobs whose schedule checked: `check` says them in words,
    /// so a job shipped off (the WeCom stand-up) shows when it would run once turned on.
    pub disabled_schedules: BTreeMap<String, Schedule>,
    /// `[alert.NAME]`: the actions that tell someone a slot failed or was missed.
    pub alerts: BTreeMap<String, Arc<Action>>,
    /// Every template of every action, compiled once.
    pub templates: Arc<Templates>,
    /// Every secret value the config holds, for scrubbing free text before it is logged.
    pub scrubber: Arc<Scrubber>,
    /// Things that work but deserve a word at start (an even number of nodes, standalone mode).
    pub warnings: Vec<String>,
    /// The file's hash (xxh3 of its bytes, 16 hex digits): the audit trail names a reload's
    /// and a restart's change of configuration by it.
    pub hash: String,
}

impl Config {
    /// Serves the status endpoints on `listen`, whatever the file's `[http]` says (or without
    /// one): one file for replicas that share a host, each on its own port.
    pub fn override_http(&mut self, listen: std::net::SocketAddr) {
        let overridden = true;
        self.http = Some(HttpConfig { listen, overridden });
    }

    /// This reload of `old`'s file, with the command line's overrides of `old`.
    fn with_overrides_of(mut self, old: &Config) -> Self {
        if let Some(http) = old.http.filter(|http| http.overridden) {
            self.http = Some(http);
        }
        self
    }
}

/// What a slot does while the job's previous run is still going somewhere in the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Skip the slot, with a log line (the default).
    #[default]
    Skip,
    /// Run it anyway.
    Allow,
}

/// Which missed slots a replica runs at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUpPolicy {
    /// Only the most recent missed slot.
    Latest,
    /// Every missed slot, oldest first.
    All,
}

/// Most slots `catch_up_policy = "all"` runs at one start: a window that can hold more is a
/// config error. Catch-up reaches back this many runs of the history at most.
pub const MAX_CATCH_UP_ALL: usize = 1000;

/// Running slots missed while the whole fleet was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    /// How far back a missed slot is still run.
    pub window: Duration,
    /// Which of the missed slots run.
    pub policy: CatchUpPolicy,
}

/// A checked job.
#[derive(Debug)]
pub struct Job {
    /// The job's unique name: its lock keys, history and metrics.
    pub name: String,
    /// When it runs, in its zone.
    pub schedule: Schedule,
    /// The whole action, retries included.
    pub timeout: Duration,
    /// Each slot is raced and sent a delay in `[0, jitter)` after its nominal instant, the same
    /// on every replica ([`crate::time::jitter::delay`]); zero: at the instant.
    pub jitter: Duration,
    /// What happens when a slot comes while the previous run goes on.
    pub overlap: Overlap,
    /// Catch-up of slots missed while no replica ran, if enabled.
    pub catch_up: Option<CatchUp>,
    /// What the winner does.
    pub action: Action,
    /// The `[alert.NAME]` told when a slot ends `failed`, is found `missed` or run twice, is
    /// not done by its `deadline`, or the job is done again after one of those (`recovered`).
    pub on_failure: Option<String>,
    /// `deadline`: after the slot's instant, when a slot not yet `done` is alerted (once
    /// across the fleet); checked to end before the job's next slot and to have an alert.
    pub deadline: Option<Duration>,
}

impl Job {
    /// The job's zone.
    pub fn zone(&self) -> Tz {
        self.schedule.zone()
    }

    /// The job's schedule in words, in the process's locale (`LANG`): for alert templates.
    pub fn schedule_words(&self) -> String {
        words::describe(&self.schedule, words::Lang::from_env())
    }
}

/// Reads and checks `path`, expanding `${VAR}` from the process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_with(path, &ProcessEnv)
}

/// [`load`] for a running replica's reload, on a blocking thread: the read and the checks
/// (a calendar expands its recurring events) stay off the runtime's workers, and a panic while
/// checking (a bug) comes back as an error of the file, so the reload is rejected and the
/// running schedule kept instead of the replica lost with it.
pub async fn load_guarded(path: &Path) -> Result<Config, ConfigErrors> {
    guard::guarded(path, load).await
}

/// [`load`] for a command that never sends (`history`, `pause`, `resume`, a `trigger` the fleet
/// runs): `[redis]`, the prefix and each job's schedule are checked as for a replica, but no
/// action's secret is resolved (its `${VAR}` left unexpanded, its `NAME_file` unread), so an
/// operator's workstation needs only the fleet's file. Each enabled job's action stands for the
/// unread one and fails if ever run: such a `Config` must not run slots.
pub fn load_without_secrets(path: &Path) -> Result<Config, ConfigErrors> {
    read_text(path).and_then(|text| parse_as(path, &text, &ProcessEnv, Secrets::Unresolved))
}

/// Whether the loader resolves the actions' secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Secrets {
    /// Expands `${VAR}` and reads `NAME_file` in every enabled job's action.
    Resolved,
    /// Leaves them: [`load_without_secrets`].
    Unresolved,
}

/// Reads and checks `path` against `env`.
pub fn load_with(path: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    parse(path, &read_text(path)?, env)
}

/// The text of `path`, or the file-level error saying why not.
fn read_text(path: &Path) -> Result<String, ConfigErrors> {
    let shown = path.display().to_string();
    let fail = |e: ConfigError| ConfigErrors {
        path: shown.clone(),
        errors: vec![e],
    };
    let bytes = std::fs::read(path).map_err(|e| fail(ConfigError::file(read_error(&e))))?;
    String::from_utf8(bytes).map_err(|e| {
        fail(ConfigError::file(format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )))
    })
}

fn read_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "cannot read: no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "cannot read: permission denied".to_owned(),
        _ => format!("cannot read: {e}"),
    }
}

/// Test jobs: one `log` job per (name, cron), parsed the way a file is (for the unit tests of
/// the modules that take jobs: the timeline, the look-back).
#[cfg(test)]
pub(crate) fn log_jobs(schedules: &[(&str, &str)]) -> Vec<Arc<Job>> {
    let text: String = schedules
        .iter()
        .map(|(name, cron)| {
            format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"{cron}\"\n\
                 [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
            )
        })
        .collect();
    let env: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    parse(Path::new("t.toml"), &text, &env).unwrap().jobs
}

/// Checks the text of a jobs.toml.
pub fn parse(path: &Path, text: &str, env: &dyn Env) -> Result<Config, ConfigErrors> {
    parse_as(path, text, env, Secrets::Resolved)
}

/// [`parse`], resolving the actions' secrets or not.
fn parse_as(
    path: &Path,
    text: &str,
    env: &dyn Env,
    secrets: Secrets,
) -> Result<Config, ConfigErrors> {
    let mut loader = Loader::new(env);
    loader.secrets = secrets;
    let config = loader.load(path, text);
    match config {
        Some(config) if loader.errors.is_empty() => Ok(config),
        _ => {
            let mut errors = loader.errors;
            locate::locate(text, &mut errors, &loader.job_errors, &loader.scrubber);
            // In file order; the errors about the file as a whole (no line) last.
            errors.sort_by_key(|e| e.source.as_ref().map_or(usize::MAX, |s| s.line));
            Err(ConfigErrors {
                path: path.display().to_string(),
                errors,
            })
        }
    }
}

/// Gathers errors while checking one file.
struct Loader<'e> {
    env: &'e dyn Env,
    /// jobs.toml's directory: files named in it (`*_file`, `ca_file`, paths) are relative to it.
    config_dir: PathBuf,
    errors: Vec<ConfigError>,
    templates: Templates,
    scrubber: Scrubber,
    warnings: Vec<String>,
    /// `[calendar.NAME]` sections, checked before the jobs that name them.
    calendars: calendars::Calendars,
    /// `[alert.NAME]` sections, checked before the jobs that name them.
    alerts: alerts::Alerts,
    /// `[scheduler] on_failure`: the alert of every job without its own.
    default_on_failure: Option<String>,
    /// Which errors belong to which `[[job]]` of the file, to find their lines.
    job_errors: Vec<locate::JobErrors>,
    /// The keys the last [`Loader::typed`] refused and left out (reported), so that the checks
    /// which read them together with another key do not report the other key as well.
    rejected: Vec<String>,
    /// The keys of the action being checked that are given as `NAME_file`: an unknown one is
    /// reported as the `NAME_file` the file has, and one whose file could not be read is not
    /// reported missing as well.
    file_keys: Vec<String>,
    /// Whether the actions' secrets are resolved ([`load_without_secrets`]: not).
    secrets: Secrets,
    /// The checked schedules of the disabled jobs, for [`Config::disabled_schedules`].
    disabled_schedules: BTreeMap<String, Schedule>,
    /// The smallest gap between slots of each schedule (by its definition) a `jitter` was
    /// checked against: a thousand jobs on one cron walk its slots once, not a thousand times.
    gaps: std::collections::HashMap<String, Option<Duration>>,
}

/// The directory of jobs.toml, which the files it names are relative to (`.` for a bare name).
fn directory_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned()
}

impl<'e> Loader<'e> {
    fn new(env: &'e dyn Env) -> Self {
        Loader {
            env,
            config_dir: PathBuf::from("."),
            errors: Vec::new(),
            templates: Templates::default(),
            scrubber: Scrubber::default(),
            warnings: Vec::new(),
            calendars: calendars::Calendars::default(),
            alerts: alerts::Alerts::default(),
            default_on_failure: None,
            job_errors: Vec::new(),
            rejected: Vec::new(),
            file_keys: Vec::new(),
            secrets: Secrets::Resolved,
            disabled_schedules: BTreeMap::new(),
            gaps: Default::default(),
        }
    }

    fn load(&mut self, path: &Path, text: &str) -> Option<Config> {
        self.config_dir = directory_of(path);
        self.templates.set_env(self.env.vars());
        let mut table = match text.parse::<Table>() {
            Ok(table) => table,
            Err(e) => {
                self.syntax_errors(text, &e);
                return None;
            }
        };
        self.check_top_level(&table);
        let scheduler = self.scheduler(table.remove("scheduler"), text);
        let redis = self.redis(table.remove("redis"));
        let http = self.http_server(table.remove("http"));
        let otlp_endpoint = self.telemetry(table.remove("telemetry"));
        self.calendars(table.remove("calendar"));
        self.alerts(table.remove("alert"));
        if let Some(scheduler) = &scheduler {
            self.default_on_failure = self
                .on_failure(scheduler.on_failure.as_deref(), &Section::Scheduler)
                .flatten();
        }
        let (jobs, disabled) = self.jobs(table.remove("job"), scheduler.as_ref());
        self.check_something_runs(&jobs, &disabled);
        let sections = built::Sections {
            scheduler,
            redis,
            http,
            otlp_endpoint,
            jobs,
            disabled,
        };
        self.finish(path, sections, text.as_bytes())
    }

    /// Every syntax error of the file, one a line (the parser's own recovery: the errors that
    /// follow from one on its line are left out); `first` if the recovery finds none.
    fn syntax_errors(&mut self, text: &str, first: &toml::de::Error) {
        let (_, all) = toml::de::DeTable::parse_recoverable(text);
        let mut lines = std::collections::HashSet::new();
        let errors = match all.is_empty() {
            true => vec![syntax_error(text, first)],
            false => all.iter().map(|e| syntax_error(text, e)).collect(),
        };
        for error in errors {
            if let Location::Line { line, .. } = error.location
                && lines.insert(line)
            {
                self.errors.push(error);
            }
        }
    }

    /// Whether the actions' secrets are resolved ([`load_without_secrets`]: not).
    fn resolves(&self) -> bool {
        self.secrets == Secrets::Resolved
    }

    /// A file without jobs, or with every job disabled, is an error (when nothing else is).
    fn check_something_runs(&mut self, jobs: &[Arc<Job>], disabled: &[String]) {
        if jobs.is_empty() && disabled.is_empty() && self.errors.is_empty() {
            self.errors
                .push(ConfigError::file("no jobs: add at least one [[job]] table"));
        } else if jobs.is_empty() && self.errors.is_empty() {
            self.errors.push(ConfigError::file(
                "every job has enabled = false: nothing to run",
            ));
        }
    }

    fn check_top_level(&mut self, table: &Table) {
        const SECTIONS: [&str; 7] = [
            "scheduler",
            "redis",
            "http",
            "telemetry",
            "calendar",
            "alert",
            "job",
        ];
        for (key, value) in table {
            if SECTIONS.contains(&key.as_str()) {
                continue;
            }
            // The schema editors check the file against (`slotcron schema`); not ours to read.
            if key == "$schema" {
                if !value.is_str() {
                    self.errors.push(ConfigError::field(
                        Section::Top,
                        key,
                        "must be a string: the path or URL of the file's JSON Schema",
                    ));
                }
                continue;
            }
            let message = match suggest::closest(key, SECTIONS) {
                Some("job") => "unknown section or key; did you mean [[job]]?".to_owned(),
                Some(near @ ("calendar" | "alert")) => {
                    format!("unknown section or key; did you mean [{near}.NAME]?")
                }
                Some(near) => format!("unknown section or key; did you mean [{near}]?"),
                None => "unknown section or key (expected [scheduler], [redis], [http], \
                    [telemetry], [calendar.NAME], [alert.NAME] or [[job]])"
                    .to_owned(),
            };
            self.errors
                .push(ConfigError::field(Section::Top, key, message));
        }
    }

    /// `value` if it lies in `range`; otherwise an error naming the field, the value and the
    /// range.
    fn bounded(
        &mut self,
        section: &Section,
        field: &str,
        value: Duration,
        range: DurationRange,
    ) -> Option<Duration> {
        range
            .check(value)
            .map_err(|e| {
                self.errors
                    .push(ConfigError::field(section.clone(), field, e.to_string()))
            })
            .ok()
    }

    fn zone(&mut self, name: &str, section: Section) -> Option<Tz> {
        name.parse::<Tz>()
            .map_err(|_| {
                self.errors
                    .push(ConfigError::field(section, "timezone", unknown_zone(name)))
            })
            .ok()
    }

    /// Expands `${VAR}` in every string below `value`; `None` if any could not be (each
    /// reported: one unset variable does not hide the next).
    fn expand_all(&mut self, value: &mut Value, section: &Section, path: &str) -> Option<()> {
        let mut ok = true;
        match value {
            Value::String(s) => match self.expand(s, section, path) {
                Some(expanded) => *s = expanded,
                None => ok = false,
            },
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    ok &= self
                        .expand_all(item, section, &format!("{path}[{i}]"))
                        .is_some();
                }
            }
            Value::Table(table) => {
                for (key, item) in table.iter_mut() {
                    ok &= self
                        .expand_all(item, section, &format!("{path}.{key}"))
                        .is_some();
                }
            }
            _ => {}
        }
        ok.then_some(())
    }

    fn expand(&mut self, text: &str, section: &Section, field: &str) -> Option<String> {
        match env::expand(text, self.env) {
            Ok(expanded) => {
                for value in &expanded.values {
                    self.scrubber.add(value);
                }
                Some(expanded.text)
            }
            Err(e) => {
                self.errors
                    .push(ConfigError::field(section.clone(), field, e.to_string()));
                None
            }
        }
    }
}

/// The error for a zone chrono-tz does not know: the closest name when one is near.
fn unknown_zone(name: &str) -> String {
    let zones = chrono_tz::TZ_VARIANTS.iter().map(|z| z.name());
    match suggest::closest(name, zones) {
        Some(near) => format!("unknown time zone {name:?}; did you mean {near:?}?"),
        None => {
            format!("unknown time zone {name:?} (use an IANA name such as Asia/Shanghai or UTC)")
        }
    }
}

/// A TOML syntax error with its line and column, and the job it falls in when there is one.
fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let offset = e.span().map_or(0, |s| s.start).min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    ConfigError {
        location: Location::Line {
            line,
            column,
            job: enclosing_job(before),
        },
        message: format!("TOML syntax: {}", e.message().trim()),
        source: None,
    }
}

/// The `name` of the last `[[job]]` header before an error, read line by line (the file does not
/// parse, so this is a best effort).
fn enclosing_job(before: &str) -> Option<String> {
    let start = before.rfind("[[job]]")?;
    before[start..].lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "name").then(|| value.trim().trim_matches('"').to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enclosing_job_reads_the_last_header() {
        let text = "[[job]]\nname = \"a\"\n[[job]]\nname = \"b\"\nschedule = ";
        assert_eq!(enclosing_job(text).as_deref(), Some("b"));
        assert_eq!(enclosing_job("[scheduler]\n"), None);
    }
}
