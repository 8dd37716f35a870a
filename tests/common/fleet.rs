//! A fleet of in-process replicas over real Redis nodes: the one helper of this harness that
//! uses the slotcron crate itself (its config parser and its replicas), so fleet tests can give
//! each replica its own clock and stop them all through one shutdown.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use slotcron::unstable::config::{self, Config};
use slotcron::unstable::replica::{self, Replica};
use slotcron::unstable::time::schedule::{SharedClock, SystemClock};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// `text` parsed as jobs.toml with an empty environment; panics with the errors.
pub fn parse(text: &str) -> Config {
    let env: HashMap<String, String> = HashMap::new();
    config::parse(Path::new("jobs.toml"), text, &env).unwrap_or_else(|e| panic!("{e}"))
}

/// `text` parsed as a jobs.toml at `path` (files it names are relative to its folder) with
/// `env` as the whole environment; panics with the errors.
pub fn parse_with_env(path: &Path, text: &str, env: &[(&str, &str)]) -> Config {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    config::parse(path, text, &env).unwrap_or_else(|e| panic!("{e}"))
}

/// One standalone job (no `[redis]`: every race is won): `name`, every second, with `job`
/// lines (timeout, zone, …) and `action` as the lines of its `[job.action]`.
pub fn one_job(name: &str, job: &str, action: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\n{job}\n[job.action]\n{action}\n"
    )
}

/// Races the current slot of `config`'s first job as `replica` on the system clock and runs
/// it (standalone: always won); the result and the slot.
pub async fn run_current_slot(
    config: &Config,
    replica: &str,
) -> (
    slotcron::unstable::slot::SlotResult,
    slotcron::unstable::time::schedule::Slot,
) {
    let clock: SharedClock = Arc::new(SystemClock);
    let ctx = replica::race_context(config, replica.to_owned(), clock)
        .await
        .unwrap();
    let slot = slotcron::unstable::time::schedule::Slot::at(chrono::Utc::now());
    (ctx.run_slot(&config.jobs[0], slot).await, slot)
}

/// The file at `path` parsed as [`parse`] does.
pub fn parse_file(path: &Path) -> Config {
    parse(&std::fs::read_to_string(path).unwrap())
}

/// The jobs.toml of a fleet test: one `http` job posting to `{receiver}/hook`, raced over
/// `nodes`. The defaults are those of the fault tests; each field can be changed, and an empty
/// `job` or `timeout` renders no job or no timeout line.
pub struct FleetToml<'a> {
    /// The Redis nodes' URLs.
    pub nodes: &'a [String],
    /// The receiver's base URL.
    pub receiver: &'a str,
    /// `key_prefix`: a fresh one per test keeps their slots apart.
    pub prefix: &'a str,
    /// The job's name; empty: no job of its own (every job is in `rest`).
    pub job: &'a str,
    /// The job's cron expression.
    pub schedule: &'a str,
    /// The job's timeout; empty: no `timeout` line (slotcron's default).
    pub timeout: &'a str,
    /// `[scheduler]` lines beside `key_prefix`.
    pub scheduler: &'a str,
    /// `[redis]` lines beside `nodes`.
    pub redis: &'a str,
    /// `[[job]]` lines beside name, schedule and timeout.
    pub job_extra: &'a str,
    /// The lines of the job's `[job.action]`; empty: `http` to `{receiver}/hook`.
    pub action: &'a str,
    /// Text after the job: more `[[job]]` tables, `[http]`, `[alerts]`.
    pub rest: &'a str,
}

impl<'a> FleetToml<'a> {
    /// Job `fault` every second, 2 s timeout, 1 s allowed skew, 150 ms node timeout.
    pub fn new(nodes: &'a [String], receiver: &'a str, prefix: &'a str) -> Self {
        FleetToml {
            nodes,
            receiver,
            prefix,
            job: "fault",
            schedule: "* * * * * *",
            timeout: "2s",
            scheduler: "max_clock_skew = \"1s\"",
            redis: "node_timeout = \"150ms\"",
            job_extra: "",
            action: "",
            rest: "",
        }
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| format!("{n:?}")).collect();
        let http = http_action(&format!("{}/hook", self.receiver));
        let action = if self.action.is_empty() {
            &http
        } else {
            self.action
        };
        let job = if self.job.is_empty() {
            String::new()
        } else {
            format!(
                r#"
            [[job]]
            name = "{job}"
            schedule = "{schedule}"
            {timeout}
            {job_extra}
            [job.action]
            {action}"#,
                job = self.job,
                schedule = self.schedule,
                timeout = timeout_line(self.timeout),
                job_extra = self.job_extra,
            )
        };
        format!(
            r#"
            [scheduler]
            key_prefix = "{prefix}"
            {scheduler}
            [redis]
            nodes = [{nodes}]
            {redis}{job}
            {rest}
            "#,
            prefix = self.prefix,
            scheduler = self.scheduler,
            nodes = nodes.join(", "),
            redis = self.redis,
            rest = self.rest,
        )
    }
}

/// `timeout = "{timeout}"`, or nothing when `timeout` is empty.
fn timeout_line(timeout: &str) -> String {
    if timeout.is_empty() {
        String::new()
    } else {
        format!("timeout = \"{timeout}\"")
    }
}

/// An `http` action posting to `url`, as the lines of a `[job.action]`.
pub fn http_action(url: &str) -> String {
    format!("type = \"http\"\nurl = \"{url}\"")
}

/// One more `[[job]]` table, for a [`FleetToml`]'s `rest`: `name` on `schedule` with `timeout`
/// (no line if empty) and `extra` lines, and `action` as the lines of its `[job.action]`.
pub fn job_table(name: &str, schedule: &str, timeout: &str, extra: &str, action: &str) -> String {
    let timeout = timeout_line(timeout);
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n{timeout}\n{extra}\n\
         [job.action]\n{action}\n"
    )
}

/// One more `[[job]]` table, for a [`FleetToml`]'s `rest`: an `http` job posting to `url`, as
/// [`job_table`] renders it.
pub fn http_job(name: &str, schedule: &str, timeout: &str, url: &str, extra: &str) -> String {
    job_table(name, schedule, timeout, extra, &http_action(url))
}

/// `[[job]]` tables for a [`FleetToml`]'s `rest`: for each of `names`, an `http` job every second
/// posting to `{receiver}/hook`, with `timeout` (no line if empty).
pub fn hook_jobs(names: impl IntoIterator<Item = String>, timeout: &str, receiver: &str) -> String {
    let hook = format!("{receiver}/hook");
    names
        .into_iter()
        .map(|name| http_job(&name, "* * * * * *", timeout, &hook, ""))
        .collect()
}

/// A WeCom text action to `{receiver}/cgi-bin/webhook/send?key={key}` with `content`, as the
/// lines of a `[job.action]`.
pub fn wecom_action(receiver: &str, key: &str, content: &str) -> String {
    format!(
        "type = \"wecom\"\nwebhook = \"{receiver}/cgi-bin/webhook/send?key={key}\"\n\
         msgtype = \"text\"\ncontent = \"{content}\""
    )
}

/// What most process-fleet tests start from: three Redis nodes, a receiver, and a config
/// written to a temporary directory.
pub struct Bed {
    pub cluster: super::RedisCluster,
    pub receiver: super::Receiver,
    pub dir: tempfile::TempDir,
    /// The written config.
    pub path: std::path::PathBuf,
}

impl Bed {
    /// Three nodes and a receiver; `toml` makes the config's text of the nodes' URLs and the
    /// receiver's.
    pub fn start(toml: impl FnOnce(&[String], &str) -> String) -> Bed {
        let cluster = super::RedisCluster::start(3);
        let receiver = super::Receiver::start();
        let dir = tempfile::tempdir().unwrap();
        let path = super::write_config(dir.path(), &toml(&cluster.urls(), &receiver.uri()));
        Bed {
            cluster,
            receiver,
            dir,
            path,
        }
    }
}

/// Replicas of one config running in this process until [`Fleet::stop`].
pub struct Fleet {
    shutdown: CancellationToken,
    runs: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Fleet {
    /// One replica of `text` per name and clock, each with its own parsed copy of the config.
    pub async fn start(text: &str, replicas: Vec<(&str, SharedClock)>) -> Fleet {
        let shutdown = CancellationToken::new();
        let mut runs = Vec::new();
        for (name, clock) in replicas {
            let config = parse(text);
            let replica = Replica::connect(&config, name.to_owned(), clock)
                .await
                .unwrap();
            runs.push(tokio::spawn(replica::run_replica(
                replica,
                config,
                shutdown.clone(),
                None,
            )));
        }
        Fleet { shutdown, runs }
    }

    /// One replica of `text` per name, all on the system clock.
    pub async fn start_named(text: &str, names: &[&str]) -> Fleet {
        let system = |name| (name, Arc::new(SystemClock) as SharedClock);
        Fleet::start(text, names.iter().copied().map(system).collect()).await
    }

    /// Runs a fleet for `seconds`, then stops it.
    pub async fn run_for(text: &str, replicas: Vec<(&str, SharedClock)>, seconds: u64) {
        let fleet = Fleet::start(text, replicas).await;
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        fleet.stop().await;
    }

    /// Shuts every replica down and waits for each; panics if one stopped on an error.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for run in self.runs {
            run.await.unwrap().unwrap();
        }
    }
}
