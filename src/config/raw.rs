//! jobs.toml exactly as users write it. Every table denies unknown fields, so a typo is an error
//! rather than a silently ignored setting. These types never leave the config module: `load`
//! checks them into the domain types.

use std::collections::BTreeMap;
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
    pub action: RawAction,
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
    Http(RawHttp),
    Log(RawLog),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWecom {
    pub webhook: String,
    pub msgtype: RawMsgType,
    pub content: String,
    #[serde(default)]
    pub mentioned_list: Vec<String>,
    #[serde(default)]
    pub mentioned_mobile_list: Vec<String>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawMsgType {
    Text,
    Markdown,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    pub url: String,
    pub method: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub content: String,
}
