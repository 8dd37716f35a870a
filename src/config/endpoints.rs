//! `[redis]` (the nodes the fleet races on, and the Redlock's timings) and `[http]` (where the
//! status server listens), and their checks.

use std::collections::HashSet;
use std::path::Path;

use toml::Value;

use super::durations;
use super::raw::{RawHttpServer, RawRedis};
use super::{read_error, ConfigError, Loader, Section};
use crate::lock::LockConfig;
use crate::redis::NodeUrl;

/// `[redis] mode`: what the `nodes` are and what decides a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisMode {
    /// Independent primaries; a majority decides (the default).
    Redlock,
    /// `nodes` are sentinels that monitor the primary named `master`.
    Sentinel {
        /// `[redis] master`: the monitored primary's name.
        master: String,
    },
    /// `nodes` are seed nodes of one Redis Cluster: one logical member, keys under a hash tag.
    Cluster,
}

impl RedisMode {
    /// The prefix every Redis key and channel starts with, from `[scheduler] key_prefix`: as
    /// written, except in a cluster, where it is wrapped in a hash tag (`{slotcron}`) so every
    /// key hashes to one slot and a multi-key command (an `MGET` over many jobs' keys, a
    /// pipeline, a script's `KEYS`) is never refused as `CROSSSLOT`. The cost: one shard
    /// carries all of slotcron's keys (a few per job).
    pub fn key_prefix(&self, configured: &str) -> String {
        match self {
            RedisMode::Cluster => format!("{{{configured}}}"),
            RedisMode::Redlock | RedisMode::Sentinel { .. } => configured.to_owned(),
        }
    }
}

#[derive(Debug, Clone)]
/// `[redis]`: the nodes the fleet races on.
pub struct RedisConfig {
    /// What the nodes are (`mode`).
    pub mode: RedisMode,
    /// The nodes (redlock: a majority decides each slot; sentinel: the sentinels; cluster: the
    /// seed nodes).
    pub nodes: Vec<NodeUrl>,
    /// The Redlock's timings.
    pub lock: LockConfig,
    /// PEM root certificates for `rediss://` nodes (`ca_file`); `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// `[http]`: the status server.
pub struct HttpConfig {
    /// Where `/healthz`, `/readyz`, `/metrics` and the status page listen.
    pub listen: std::net::SocketAddr,
}

impl Loader<'_> {
    /// `Some(None)`: no [http]. `None`: errors were recorded.
    pub(super) fn http_server(&mut self, value: Option<Value>) -> Option<Option<HttpConfig>> {
        let Some(value) = value else {
            return Some(None);
        };
        let raw: RawHttpServer = self.typed(value, &Section::Http)?;
        match raw.listen.parse() {
            Ok(listen) => Some(Some(HttpConfig { listen })),
            Err(_) => {
                self.errors.push(ConfigError::field(
                    Section::Http,
                    "listen",
                    format!(
                        "{:?} is not an address and port such as \"0.0.0.0:9090\"",
                        raw.listen
                    ),
                ));
                None
            }
        }
    }

    /// `Some(None)`: no [redis] (standalone). `None`: errors were recorded.
    pub(super) fn redis(&mut self, value: Option<Value>) -> Option<Option<RedisConfig>> {
        let Some(value) = value else {
            return Some(None);
        };
        let raw: RawRedis = self.typed(value, &Section::Redis)?;
        let before = self.errors.len();
        let mode = self.redis_mode(&raw);
        let nodes = self.redis_nodes(&raw.nodes, &mode);
        let lock = self.lock_config(&raw);
        let ca = raw
            .ca_file
            .and_then(|file| self.read_beside(&file, Section::Redis, "ca_file"));
        (self.errors.len() == before).then_some(Some(RedisConfig {
            mode,
            nodes,
            lock,
            ca,
        }))
    }

    /// `mode` (and sentinel's `master`); an unknown mode is an error naming the field.
    fn redis_mode(&mut self, raw: &RawRedis) -> RedisMode {
        let mode = match raw.mode.as_deref().unwrap_or("redlock") {
            "redlock" => RedisMode::Redlock,
            "cluster" => RedisMode::Cluster,
            "sentinel" => match &raw.master {
                Some(master) if !master.is_empty() => RedisMode::Sentinel {
                    master: master.clone(),
                },
                _ => {
                    let message = "mode = \"sentinel\" needs the monitored primary's name \
                                   (master = \"NAME\")";
                    self.errors
                        .push(ConfigError::field(Section::Redis, "master", message));
                    RedisMode::Redlock
                }
            },
            other => {
                let message =
                    format!("{other:?} is not a mode (\"redlock\", \"sentinel\" or \"cluster\")");
                self.errors
                    .push(ConfigError::field(Section::Redis, "mode", message));
                RedisMode::Redlock
            }
        };
        if raw.master.is_some() && !matches!(mode, RedisMode::Sentinel { .. }) {
            let message = "master names a Sentinel primary: it needs mode = \"sentinel\"";
            self.errors
                .push(ConfigError::field(Section::Redis, "master", message));
        }
        mode
    }

    /// `nodes`: each a Redis URL, none twice; an even count is warned about (in redlock mode,
    /// where the nodes vote).
    fn redis_nodes(&mut self, raw_nodes: &[String], mode: &RedisMode) -> Vec<NodeUrl> {
        if raw_nodes.is_empty() {
            self.errors.push(ConfigError::field(
                Section::Redis,
                "nodes",
                "needs at least one node (1, 3 or 5)",
            ));
        }
        let mut nodes = Vec::new();
        let mut seen = HashSet::new();
        for (i, raw_url) in raw_nodes.iter().enumerate() {
            let field = format!("nodes[{i}]");
            match self
                .expand(raw_url, &Section::Redis, &field)
                .map(|u| NodeUrl::parse(&u))
            {
                Some(Ok(url)) => {
                    if !seen.insert(url.address()) {
                        self.errors.push(ConfigError::field(
                            Section::Redis,
                            &field,
                            format!(
                                "{} is listed twice: a node must count once in the majority",
                                url.address()
                            ),
                        ));
                    }
                    self.scrubber.add(url.password().unwrap_or(""));
                    nodes.push(url);
                }
                Some(Err(e)) => {
                    self.errors
                        .push(ConfigError::field(Section::Redis, &field, e.to_string()))
                }
                None => {}
            }
        }
        if *mode == RedisMode::Redlock && nodes.len().is_multiple_of(2) && !nodes.is_empty() {
            self.warnings.push(format!(
                "{} Redis nodes: an even count tolerates no more failures than {} (use 1, 3 or 5)",
                nodes.len(),
                nodes.len() - 1
            ));
        }
        nodes
    }

    /// The Redlock's timings: `node_timeout`, `retry_delay`, `retry_count`, else the defaults.
    fn lock_config(&mut self, raw: &RawRedis) -> LockConfig {
        let mut lock = LockConfig::default();
        let node_timeout = raw.node_timeout.unwrap_or(lock.node_timeout);
        let node_timeout = self.bounded(
            &Section::Redis,
            "node_timeout",
            node_timeout,
            durations::NODE_TIMEOUT,
        );
        let retry_delay = raw.retry_delay.unwrap_or(lock.retry_delay);
        let retry_delay = self.bounded(
            &Section::Redis,
            "retry_delay",
            retry_delay,
            durations::RETRY_DELAY,
        );
        lock.node_timeout = node_timeout.unwrap_or(lock.node_timeout);
        lock.retry_delay = retry_delay.unwrap_or(lock.retry_delay);
        lock.retry_count = raw.retry_count.unwrap_or(lock.retry_count);
        lock
    }

    /// The prefix of every key in `mode` ([`RedisMode::key_prefix`]); in a cluster, a prefix
    /// with a brace of its own is refused (the hash tag would not be the whole prefix). `None`:
    /// the error was recorded.
    pub(super) fn key_prefix_for(&mut self, configured: &str, mode: &RedisMode) -> Option<String> {
        if *mode == RedisMode::Cluster && configured.contains(['{', '}']) {
            self.errors.push(ConfigError::field(
                Section::Scheduler,
                "key_prefix",
                format!(
                    "{configured:?} has a brace: with mode = \"cluster\" slotcron wraps the \
                     prefix in a hash tag itself ({{PREFIX}}), so write it without braces"
                ),
            ));
            return None;
        }
        Some(mode.key_prefix(configured))
    }

    /// Reads a file named in jobs.toml, relative to jobs.toml's directory.
    pub(super) fn read_beside(
        &mut self,
        file: &Path,
        section: Section,
        field: &str,
    ) -> Option<Vec<u8>> {
        let full = self.config_dir.join(file);
        std::fs::read(&full)
            .map_err(|e| {
                let message = format!("{}: {}", full.display(), read_error(&e));
                self.errors
                    .push(ConfigError::field(section, field, message));
            })
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_wraps_the_prefix_in_a_hash_tag_and_redlock_keeps_it() {
        assert_eq!(RedisMode::Cluster.key_prefix("slotcron"), "{slotcron}");
        assert_eq!(RedisMode::Redlock.key_prefix("slotcron"), "slotcron");
        let sentinel = RedisMode::Sentinel { master: "m".into() };
        assert_eq!(sentinel.key_prefix("slotcron"), "slotcron");
    }
}
