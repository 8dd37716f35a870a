//! jobs.toml exactly as users write it. Every table denies unknown fields, so a typo is an error
//! rather than a silently ignored setting. These types never leave the config module: `load`
//! checks them into the domain types.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWecom {
    pub webhook: String,
    pub msgtype: RawMsgType,
    pub content: Option<String>,
    pub mentioned_list: Option<Vec<String>>,
    pub mentioned_mobile_list: Option<Vec<String>>,
    pub image_path: Option<PathBuf>,
    pub image_url: Option<String>,
    pub articles: Option<Vec<RawArticle>>,
    pub media_path: Option<PathBuf>,
    pub template_card: Option<toml::Value>,
    pub rate: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawMsgType {
    Text,
    Markdown,
    MarkdownV2,
    Image,
    News,
    File,
    Voice,
    TemplateCard,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArticle {
    pub title: String,
    pub description: Option<String>,
    pub url: String,
    pub picurl: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDingTalk {
    pub webhook: String,
    pub secret: Option<String>,
    pub msgtype: RawDingTalkMsgType,
    pub content: Option<String>,
    pub title: Option<String>,
    pub text: Option<String>,
    pub message_url: Option<String>,
    pub pic_url: Option<String>,
    pub single_title: Option<String>,
    pub single_url: Option<String>,
    pub buttons: Option<Vec<RawButton>>,
    pub at_mobiles: Option<Vec<String>>,
    pub at_user_ids: Option<Vec<String>>,
    pub at_all: Option<bool>,
    pub rate: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
pub enum RawDingTalkMsgType {
    #[serde(rename = "text")]
    Text,
    #[serde(rename = "markdown")]
    Markdown,
    #[serde(rename = "link")]
    Link,
    #[serde(rename = "actionCard")]
    ActionCard,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawButton {
    pub title: String,
    pub url: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFeishu {
    pub webhook: String,
    pub secret: Option<String>,
    pub msg_type: RawFeishuMsgType,
    pub text: Option<String>,
    pub post: Option<toml::Value>,
    pub card: Option<toml::Value>,
    pub rate: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawFeishuMsgType {
    Text,
    Post,
    Interactive,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSlack {
    pub webhook: String,
    pub text: Option<String>,
    pub blocks: Option<toml::Value>,
    pub rate: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    pub url: String,
    pub method: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Option<String>,
    pub rate: Option<String>,
    pub success_status: Option<String>,
    pub success_json: Option<RawSuccessJson>,
    pub retry_uncertain: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSuccessJson {
    pub field: String,
    pub equals: toml::Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCommand {
    pub argv: Option<Vec<String>>,
    pub shell: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub content: String,
}
