//! jobs.toml exactly as users write it. Every table denies unknown fields, so a typo is an error
//! rather than a silently ignored setting. These types are what the checks take: `load` types a
//! file's sections into them, and the library's `Fleet` builds them in code (`check_built`);
//! both are checked into the domain types by the same code.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::action::command::RawCommand;
#[cfg(feature = "robots")]
use crate::action::dingtalk::RawDingTalk;
#[cfg(feature = "robots")]
use crate::action::feishu::RawFeishu;
use crate::action::http::RawHttp;
use crate::action::log::RawLog;
use crate::action::slack::RawSlack;
#[cfg(feature = "robots")]
use crate::action::wecom::RawWecom;
use crate::time::schedule::{DstGap, DstRepeat};

/// `[scheduler]` as written: every key optional (the table itself may be absent, hence
/// `Default`), so the checker can apply each default in one place and bound each duration
/// with an error that names the key.
#[derive(Debug, Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RawScheduler {
    /// The default zone of every job's schedule: an IANA name, checked against chrono-tz.
    pub timezone: Option<String>,
    /// The first part of every Redis key: checked non-empty and free of whitespace.
    pub key_prefix: Option<String>,
    /// How far the replicas' clocks may disagree; bounded by the checker.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub max_clock_skew: Option<Duration>,
    /// The `jitter` of every job without its own.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub jitter: Option<Duration>,
    /// Which clock slots are scheduled on.
    pub clock: Option<RawClockMode>,
    /// The `[alert.NAME]` every job without its own `on_failure` uses.
    pub on_failure: Option<String>,
    /// How many replicas race each slot: a count, or `"all"`.
    pub candidates: Option<RawCandidates>,
    /// How much later each further candidate joins the race; bounded by the checker.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub candidate_stagger: Option<Duration>,
    /// How long replicas on one prefix may send a job of one name to different places.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub destination_conflict_after: Option<Duration>,
    /// The deployment's name: checked non-empty.
    pub deployment: Option<String>,
    /// The `dst_repeat` of every job without its own.
    pub dst_repeat: Option<RawDstRepeat>,
    /// The `dst_gap` of every job without its own.
    pub dst_gap: Option<RawDstGap>,
}

/// `dst_repeat = "first" | "last" | "both"` as spelled in the file. Kept apart from
/// [`crate::time::schedule::DstRepeat`] so the domain type carries no serde spelling, and an
/// absent key keeps the rule of the cron's kind.
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawDstRepeat {
    /// The first pass of a repeated wall time.
    First,
    /// The second pass.
    Last,
    /// Both passes.
    Both,
}

/// `dst_gap = "shift" | "skip"` as spelled in the file (see [`RawDstRepeat`]).
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawDstGap {
    /// The first instant after the gap.
    Shift,
    /// No slot.
    Skip,
}

impl From<RawDstRepeat> for DstRepeat {
    fn from(raw: RawDstRepeat) -> Self {
        match raw {
            RawDstRepeat::First => DstRepeat::First,
            RawDstRepeat::Last => DstRepeat::Last,
            RawDstRepeat::Both => DstRepeat::Both,
        }
    }
}

impl From<RawDstGap> for DstGap {
    fn from(raw: RawDstGap) -> Self {
        match raw {
            RawDstGap::Shift => DstGap::Shift,
            RawDstGap::Skip => DstGap::Skip,
        }
    }
}

impl From<DstRepeat> for RawDstRepeat {
    fn from(repeat: DstRepeat) -> Self {
        match repeat {
            DstRepeat::First => RawDstRepeat::First,
            DstRepeat::Last => RawDstRepeat::Last,
            DstRepeat::Both => RawDstRepeat::Both,
        }
    }
}

impl From<DstGap> for RawDstGap {
    fn from(gap: DstGap) -> Self {
        match gap {
            DstGap::Shift => RawDstGap::Shift,
            DstGap::Skip => RawDstGap::Skip,
        }
    }
}

/// `candidates = 2` or `candidates = "all"`.
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone)]
#[serde(untagged)]
pub enum RawCandidates {
    /// A number as written (signed, so that `0` and `-1` reach the checker and get its error).
    Count(i64),
    /// A word: only `"all"` passes the checker.
    Word(String),
}

/// `clock = "redis" | "local"` as spelled in the file. Kept apart from [`super::ClockMode`] so
/// the domain type carries no serde spelling, and an absent key gets its default (`redis`) in
/// the checker, with the other defaults.
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawClockMode {
    /// Schedule on the fleet clock (the Redis nodes' `TIME`).
    Redis,
    /// Schedule on this replica's wall clock.
    Local,
}

/// `[redis]` as written: the node URLs stay strings here so the checker can parse each one and
/// name the entry at fault (and warn about an even count); the lock's tuning is optional, its
/// defaults applied by the checker.
#[derive(Debug, Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    /// `redis://` or `rediss://` URLs, one per independent node.
    pub nodes: Vec<String>,
    /// Bound on one node's answer in a race.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub node_timeout: Option<Duration>,
    /// Extra attempts after a split vote.
    pub retry_count: Option<u32>,
    /// Upper bound of the random delay between attempts.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub retry_delay: Option<Duration>,
    /// The CA that signs `rediss://` nodes' certificates, relative to the config's directory.
    pub ca_file: Option<std::path::PathBuf>,
    /// `"redlock"` (the default), `"sentinel"` or `"cluster"`: a string, so the checker's error
    /// names the field and the words it takes.
    pub mode: Option<String>,
    /// Sentinel mode: the name the sentinels monitor the primary under.
    pub master: Option<String>,
    /// Sentinel and cluster modes: replicas of the lock's primary that must acknowledge a won
    /// slot before it runs.
    pub wait_replicas: Option<u32>,
    /// Sentinel mode: the primary's user, when not the sentinels' (`nodes`' URLs).
    pub primary_username: Option<String>,
    /// Sentinel mode: the primary's password, when not the sentinels'.
    pub primary_password: Option<String>,
}

/// One `[[job]]` as written: the cron, zone, calendar and alert stay strings here because
/// checking them needs the rest of the file (the scheduler's zone, the `[calendar.NAME]` and
/// `[alert.NAME]` tables) and an error that names the job.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    /// The job's name: unique, part of its Redis keys.
    pub name: String,
    /// A 5- or 6-field cron expression.
    pub schedule: String,
    /// The job's zone, over `[scheduler] timezone`.
    pub timezone: Option<String>,
    /// How long one run may take.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
    /// How far after its nominal instant a slot may be raced and sent: a delay in
    /// `[0, jitter)`, the same on every replica; over `[scheduler] jitter`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub jitter: Option<Duration>,
    /// `false`: the job is checked but not scheduled.
    pub enabled: Option<bool>,
    /// What a slot does while the previous run still goes on.
    pub overlap: Option<RawOverlap>,
    /// How far back a starting replica looks for missed slots.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub catch_up: Option<Duration>,
    /// Which of the missed slots it runs.
    pub catch_up_policy: Option<RawCatchUpPolicy>,
    /// The `[calendar.NAME]` whose days filter the schedule.
    pub calendar: Option<String>,
    /// Which of that calendar's days the job runs on.
    pub days: Option<RawDays>,
    /// The `[alert.NAME]` told when a slot fails.
    pub on_failure: Option<String>,
    /// After a slot's nominal instant, the time by which it must be `done`: past it, one
    /// `deadline` alert goes to the job's `on_failure` alert (`"10m"`; none by default).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub deadline: Option<Duration>,
    /// A repeated wall time: over `[scheduler] dst_repeat`.
    pub dst_repeat: Option<RawDstRepeat>,
    /// A skipped wall time: over `[scheduler] dst_gap`.
    pub dst_gap: Option<RawDstGap>,
    /// `[job.action]`: typed into a [`RawAction`] on its own, so that a mistake inside it does
    /// not stop the checks of the job's other keys.
    #[schemars(
        with = "RawAction",
        description = "What the winner of a slot does: a robot's message, a request, a command."
    )]
    pub action: toml::Value,
}

impl RawJob {
    /// A job built in code: `name` on `schedule`, every other key unset (set them with struct
    /// update syntax); its action table empty, never read (the caller gives the checked action
    /// to [`super::check_built`]).
    pub fn new(name: String, schedule: String) -> Self {
        RawJob {
            name,
            schedule,
            timezone: None,
            timeout: None,
            jitter: None,
            enabled: None,
            overlap: None,
            catch_up: None,
            catch_up_policy: None,
            calendar: None,
            days: None,
            on_failure: None,
            deadline: None,
            dst_repeat: None,
            dst_gap: None,
            action: toml::Value::Table(toml::Table::new()),
        }
    }
}

/// `days = "workdays" | "holidays"` as spelled in the file; the checker turns it into
/// [`crate::time::calendar::Days`] only together with a `calendar` (days without one is an error).
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawDays {
    /// The calendar's working days.
    Workdays,
    /// The calendar's days off.
    Holidays,
}

/// `[calendar.NAME]`: the days come from a built-in data set, an .ics file and inline lists.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCalendar {
    /// The name of a built-in data set (`cn`).
    pub builtin: Option<String>,
    /// An .ics file, relative to the config's directory.
    pub ics: Option<PathBuf>,
    /// Dates as strings or TOML dates; checked one by one so an error names the entry.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub holidays: Vec<toml::Value>,
    /// Working days over the others (a weekend made a working day), read like `holidays`.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub workdays: Vec<toml::Value>,
}

/// `overlap = "skip" | "allow"` as spelled in the file. Kept apart from [`super::Overlap`] so
/// the domain type carries no serde spelling and the default (`skip`) is the checker's.
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawOverlap {
    /// A slot due while the previous run goes on is skipped.
    Skip,
    /// It runs anyway.
    Allow,
}

/// `catch_up_policy = "latest" | "all"` as spelled in the file. Kept apart from
/// [`super::CatchUpPolicy`] so the domain type carries no serde spelling and the default
/// (`latest`) is the checker's.
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawCatchUpPolicy {
    /// Only the most recent missed slot runs.
    Latest,
    /// Every missed slot in the window runs.
    All,
}

impl From<super::CatchUpPolicy> for RawCatchUpPolicy {
    fn from(policy: super::CatchUpPolicy) -> Self {
        match policy {
            super::CatchUpPolicy::Latest => RawCatchUpPolicy::Latest,
            super::CatchUpPolicy::All => RawCatchUpPolicy::All,
        }
    }
}

impl From<super::Overlap> for RawOverlap {
    fn from(overlap: super::Overlap) -> Self {
        match overlap {
            super::Overlap::Skip => RawOverlap::Skip,
            super::Overlap::Allow => RawOverlap::Allow,
        }
    }
}

/// `[http]` as written: `listen` stays a string so a bad address gets the checker's error,
/// which names the key and shows the expected form, instead of serde's.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHttpServer {
    /// Address and port of the metrics, health and status endpoints (`0.0.0.0:9090`).
    pub listen: String,
}

/// `[telemetry]` as written.
#[derive(Debug, Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// OTLP/HTTP base URL (`http://host:4318`): spans go to its `/v1/traces`.
    pub otlp_endpoint: Option<String>,
}

/// A robot's table in a build without the `robots` feature: taken whole, its keys unread, so
/// that the checker refuses it naming the feature (serde would call the `type` unknown).
#[cfg(not(feature = "robots"))]
pub type CompiledOut = serde_json::Map<String, serde_json::Value>;
#[cfg(not(feature = "robots"))]
type RawWecom = CompiledOut;
#[cfg(not(feature = "robots"))]
type RawDingTalk = CompiledOut;
#[cfg(not(feature = "robots"))]
type RawFeishu = CompiledOut;

/// `[job.action]` as written, chosen by its `type`: each variant is the action module's own raw
/// table, so every action keeps its keys and their checks beside its code, and an unknown
/// `type` or a key of another type is serde's error naming the job.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
#[cfg_attr(
    not(feature = "robots"),
    expect(
        dead_code,
        reason = "a robot's table is refused unread without the feature"
    )
)]
pub enum RawAction {
    /// `type = "wecom"`: a WeCom group robot.
    Wecom(RawWecom),
    /// `type = "dingtalk"`: a DingTalk custom robot.
    DingTalk(RawDingTalk),
    /// `type = "feishu"`: a Feishu (Lark) custom bot.
    Feishu(RawFeishu),
    /// `type = "slack"`: a Slack incoming webhook.
    Slack(RawSlack),
    /// `type = "http"`: any HTTP request.
    Http(RawHttp),
    /// `type = "command"`: a local command.
    Command(RawCommand),
    /// `type = "log"`: a log line only.
    Log(RawLog),
}

/// The whole file as written, for its JSON Schema only (`slotcron schema`): the loader reads the
/// sections one by one from a TOML table instead, so that a mistake in one does not hide the
/// others'. Its keys are the ones `check_top_level` accepts.
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    title = "slotcron jobs.toml",
    description = "slotcron's schedule: every replica runs this file; one wins each slot."
)]
#[expect(dead_code, reason = "never built: only its schema is used")]
pub struct RawFile {
    /// The schema editors check the file against; the loader ignores it.
    #[schemars(rename = "$schema")]
    pub schema: Option<String>,
    /// Settings shared by every job.
    pub scheduler: Option<RawScheduler>,
    /// The Redis nodes the replicas race on; absent: standalone mode, ONE replica.
    pub redis: Option<RawRedis>,
    /// The health, metrics and status endpoints.
    pub http: Option<RawHttpServer>,
    /// Traces: a span per won run, over OTLP/HTTP.
    pub telemetry: Option<RawTelemetry>,
    /// `[calendar.NAME]`: days a job's `calendar` names.
    #[schemars(default)]
    pub calendar: std::collections::BTreeMap<String, RawCalendar>,
    /// `[alert.NAME]`: actions told when a slot fails or is missed.
    #[schemars(default)]
    pub alert: std::collections::BTreeMap<String, RawAction>,
    /// The jobs, `[[job]]` each.
    pub job: Vec<RawJob>,
}
