//! jobs.toml exactly as users write it. Every table denies unknown fields, so a typo is an error
//! rather than a silently ignored setting. These types never leave the config module: `load`
//! checks them into the domain types.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::action::command::RawCommand;
use crate::action::dingtalk::RawDingTalk;
use crate::action::feishu::RawFeishu;
use crate::action::http::RawHttp;
use crate::action::log::RawLog;
use crate::action::slack::RawSlack;
use crate::action::wecom::RawWecom;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawScheduler {
    pub timezone: Option<String>,
    pub key_prefix: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub max_clock_skew: Option<Duration>,
    pub clock: Option<RawClockMode>,
    /// The `[alert.NAME]` every job without its own `on_failure` uses.
    pub on_failure: Option<String>,
    /// How many replicas race each slot: a count, or `"all"`.
    pub candidates: Option<RawCandidates>,
    #[serde(default, with = "humantime_serde")]
    pub candidate_stagger: Option<Duration>,
    /// How long replicas on one prefix may send a job of one name to different places.
    #[serde(default, with = "humantime_serde")]
    pub destination_conflict_after: Option<Duration>,
}

/// `candidates = 2` or `candidates = "all"`.
#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub enum RawCandidates {
    Count(i64),
    Word(String),
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawClockMode {
    Redis,
    Local,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    pub nodes: Vec<String>,
    #[serde(default, with = "humantime_serde")]
    pub node_timeout: Option<Duration>,
    pub retry_count: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub retry_delay: Option<Duration>,
    pub ca_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    pub name: String,
    pub schedule: String,
    pub timezone: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    pub enabled: Option<bool>,
    pub overlap: Option<RawOverlap>,
    #[serde(default, with = "humantime_serde")]
    pub catch_up: Option<Duration>,
    pub catch_up_policy: Option<RawCatchUpPolicy>,
    pub calendar: Option<String>,
    pub days: Option<RawDays>,
    pub on_failure: Option<String>,
    pub action: RawAction,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawDays {
    Workdays,
    Holidays,
}

/// `[calendar.NAME]`: the days come from a built-in data set, an .ics file and inline lists.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCalendar {
    pub builtin: Option<String>,
    pub ics: Option<PathBuf>,
    /// Dates as strings or TOML dates; checked one by one so an error names the entry.
    #[serde(default)]
    pub holidays: Vec<toml::Value>,
    #[serde(default)]
    pub workdays: Vec<toml::Value>,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawOverlap {
    Skip,
    Allow,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RawCatchUpPolicy {
    Latest,
    All,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpServer {
    pub listen: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum RawAction {
    Wecom(RawWecom),
    DingTalk(RawDingTalk),
    Feishu(RawFeishu),
    Slack(RawSlack),
    Http(RawHttp),
    Command(RawCommand),
    Log(RawLog),
}
