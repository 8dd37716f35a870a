//! `[redis]` (the nodes the fleet races on, and the Redlock's timings) and `[http]` (where the
//! status server listens), and their checks.

use std::collections::HashSet;
use std::path::Path;

use toml::Value;

use super::durations;
use super::raw::{RawHttpServer, RawRedis};
use super::{ConfigError, Loader, Section, read_error};
use crate::lock::LockConfig;
use crate::redis::PrimaryAuth;
use crate::redis::{Connector, NodeUrl, Topology};

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
    /// Replicas that must acknowledge a won slot's key before it runs (`WAIT`), in the modes
    /// whose primary has replicas; fewer in time and the slot still runs, counted.
    pub wait_replicas: u32,
    /// Sentinel mode: the primary's credentials (`primary_username`, `primary_password`).
    pub primary_auth: PrimaryAuth,
    /// Where the nodes' connections come from: TCP, as no file can say otherwise; a
    /// simulation sets its dialer in code (see [`crate::redis::connector`]).
    pub connector: Connector,
    /// Where the actions' HTTP requests go: the network, as no file can say otherwise; a
    /// simulation, which dials its nodes above, sends to its receivers here (see
    /// [`crate::action::egress`]).
    pub egress: crate::action::egress::Egress,
}

/// `[redis] mode`: what `nodes` are, and what a slot's lock rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisMode {
    /// `nodes` are independent primaries; a majority decides each slot (the default).
    Redlock,
    /// `nodes` are sentinels; the lock lives on the primary they name `master`.
    Sentinel {
        /// The name the sentinels monitor the primary under.
        master: String,
    },
    /// `nodes` are seeds of a Redis Cluster; each key lives on the shard owning its hash slot.
    Cluster,
}

impl RedisConfig {
    /// The pool's layout, as the Redis layer takes it ([`crate::redis::Nodes::open`]).
    pub fn topology(&self) -> Topology {
        match &self.mode {
            RedisMode::Redlock => Topology::Redlock,
            RedisMode::Sentinel { master } => Topology::Sentinel {
                master: master.clone(),
                auth: self.primary_auth.clone(),
                wait_replicas: self.wait_replicas,
            },
            RedisMode::Cluster => Topology::Cluster {
                wait_replicas: self.wait_replicas,
            },
        }
    }
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

    /// The mode as `mode` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            RedisMode::Redlock => "redlock",
            RedisMode::Sentinel { .. } => "sentinel",
            RedisMode::Cluster => "cluster",
        }
    }

    /// What the mode guarantees, for `check` (the book's Redis topologies chapter says it at length).
    pub fn guarantee(&self) -> &'static str {
        match self {
            RedisMode::Redlock => {
                "a slot runs at most once while a majority of the nodes keep their keys \
                 (a node lost or restarted empty costs nothing while the others are a majority)"
            }
            RedisMode::Cluster => {
                "one shard decides (every key under one hash tag): a slot runs at most once \
                 while that shard's primary lives; a failover can lose a lock the promoted \
                 replica had not received, so a slot may run twice then, and slots due before \
                 the promotion are missed (WAIT on the shard's primary narrows the first; a slot \
                 whose key no replica acknowledged still runs, counted in \
                 slotcron_unreplicated_runs_total)"
            }
            RedisMode::Sentinel { .. } => {
                "a slot runs at most once while the primary lives; a failover can lose a lock \
                 the new primary had not received, so a slot may run twice then (WAIT narrows \
                 that window; a slot whose key no replica acknowledged still runs, counted in \
                 slotcron_unreplicated_runs_total)"
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// `[http]`: the status server.
pub struct HttpConfig {
    /// Where `/healthz`, `/readyz`, `/metrics` and the status page listen.
    pub listen: std::net::SocketAddr,
    /// `listen` is the command line's (`run --http-listen`), not the file's: a reload keeps it.
    pub overridden: bool,
}

/// The error for `mode = "sentinel"` without `master`.
const SENTINEL_NEEDS_MASTER: &str = "mode = \"sentinel\" needs the monitored primary's name \
    (master = \"NAME\"): the name the sentinels monitor the primary under";
/// The warning for `wait_replicas` in redlock mode.
const NO_WAIT_IN_REDLOCK: &str = "[redis] wait_replicas is not used in mode = \"redlock\": each \
    node is an independent primary, and the majority itself keeps a lock through one node's loss";

/// The error for `[http]` (or `Fleet::http`) in a build without the status server.
pub const SERVER_COMPILED_OUT: &str = "the status server is compiled out of this build of \
    slotcron: enable its `server` feature";

impl Loader<'_> {
    /// `Some(None)`: no [http]. `None`: errors were recorded.
    pub(super) fn http_server(&mut self, value: Option<Value>) -> Option<Option<HttpConfig>> {
        let Some(value) = value else {
            return Some(None);
        };
        let raw: RawHttpServer = self.typed(value, &Section::Http)?;
        self.check_http(raw).map(Some)
    }

    /// `[http]` as a typed value (the file's, or `Fleet::http`) checked.
    pub(super) fn check_http(&mut self, raw: RawHttpServer) -> Option<HttpConfig> {
        if !cfg!(feature = "server") {
            let error = ConfigError::field(Section::Http, "listen", SERVER_COMPILED_OUT);
            self.errors.push(error);
            return None;
        }
        match raw.listen.parse() {
            Ok(listen) => Some(HttpConfig {
                listen,
                overridden: false,
            }),
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

    /// `[telemetry] otlp_endpoint`: an http(s) URL. `Some(None)`: no traces. `None`: errors
    /// were recorded.
    pub(super) fn telemetry(&mut self, value: Option<Value>) -> Option<Option<url::Url>> {
        let Some(value) = value else {
            return Some(None);
        };
        let raw: super::raw::RawTelemetry = self.typed(value, &Section::Telemetry)?;
        self.check_telemetry(raw)
    }

    /// `[telemetry]` as a typed value (the file's, or `Fleet::otlp_endpoint`) checked.
    pub(super) fn check_telemetry(
        &mut self,
        raw: super::raw::RawTelemetry,
    ) -> Option<Option<url::Url>> {
        let Some(endpoint) = raw.otlp_endpoint else {
            return Some(None);
        };
        match url::Url::parse(&endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => Some(Some(url)),
            _ => {
                self.errors.push(ConfigError::field(
                    Section::Telemetry,
                    "otlp_endpoint",
                    format!("{endpoint:?} is not an http(s) URL such as \"http://collector:4318\""),
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
        self.check_redis(raw).map(Some)
    }

    /// `[redis]` as a typed value (the file's, or `Fleet::nodes`) checked.
    pub(super) fn check_redis(&mut self, raw: RawRedis) -> Option<RedisConfig> {
        let before = self.errors.len();
        let mode = self.redis_mode(&raw);
        let nodes = self.redis_nodes(&raw.nodes, mode.as_ref());
        let lock = self.lock_config(&raw);
        let primary_auth = self.primary_auth(&raw, mode.as_ref());
        let ca = (raw.ca_file.as_ref())
            .and_then(|file| self.read_beside(file, Section::Redis, "ca_file"));
        (self.errors.len() == before).then_some(RedisConfig {
            nodes,
            lock,
            ca,
            mode: mode?,
            wait_replicas: raw.wait_replicas.unwrap_or(1),
            primary_auth,
            connector: Connector::Tcp,
            egress: Default::default(),
        })
    }

    /// `mode`, and `master` with it (required by sentinel, refused by the others).
    fn redis_mode(&mut self, raw: &RawRedis) -> Option<RedisMode> {
        let mode = match raw.mode.as_deref().unwrap_or("redlock") {
            "redlock" => RedisMode::Redlock,
            "cluster" => RedisMode::Cluster,
            "sentinel" => match raw.master.as_deref().map(str::trim) {
                Some(master) if !master.is_empty() => RedisMode::Sentinel {
                    master: master.to_owned(),
                },
                _ => return self.redis_error("master", SENTINEL_NEEDS_MASTER),
            },
            other => {
                const MODES: [&str; 3] = ["redlock", "sentinel", "cluster"];
                let message = match super::suggest::closest(other, MODES) {
                    Some(near) => format!("{other:?} is not a mode; did you mean {near:?}?"),
                    None => format!(
                        "{other:?} is not a mode: use \"redlock\", \"sentinel\" or \"cluster\""
                    ),
                };
                return self.redis_error("mode", message);
            }
        };
        if raw.master.is_some() && !matches!(mode, RedisMode::Sentinel { .. }) {
            let message = "names a Sentinel primary: it needs mode = \"sentinel\"";
            return self.redis_error("master", message);
        }
        if raw.wait_replicas.is_some() && mode == RedisMode::Redlock {
            self.warnings.push(NO_WAIT_IN_REDLOCK.to_owned());
        }
        Some(mode)
    }

    /// `primary_username` and `primary_password` (`${VAR}` expanded, the password scrubbed):
    /// sentinel mode only.
    fn primary_auth(&mut self, raw: &RawRedis, mode: Option<&RedisMode>) -> PrimaryAuth {
        let keys = [
            ("primary_username", &raw.primary_username),
            ("primary_password", &raw.primary_password),
        ];
        let sentinel = matches!(mode, Some(RedisMode::Sentinel { .. }));
        let mut values = keys.map(|(field, value)| {
            let value = value.as_ref()?;
            if !sentinel {
                self.redis_error::<()>(field, "is for mode = \"sentinel\" only");
            }
            self.expand(value, &Section::Redis, field)
        });
        let password = values[1].take();
        self.scrubber.add(password.as_deref().unwrap_or(""));
        PrimaryAuth {
            username: values[0].take(),
            password,
        }
    }

    /// Records an error on `[redis] field`; `None` for the caller to return.
    fn redis_error<T>(&mut self, field: &str, message: impl Into<String>) -> Option<T> {
        self.errors
            .push(ConfigError::field(Section::Redis, field, message));
        None
    }

    /// `nodes`: each a Redis URL, none twice; an even count is warned about in redlock mode
    /// (sentinels and cluster seeds are not a majority of ours).
    fn redis_nodes(&mut self, raw_nodes: &[String], mode: Option<&RedisMode>) -> Vec<NodeUrl> {
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
        let redlock = mode == Some(&RedisMode::Redlock);
        if redlock && nodes.len().is_multiple_of(2) && !nodes.is_empty() {
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

/// A build without the status server or .ics calendars (`cargo test --no-default-features --lib
/// compiled_out`): a jobs.toml that needs them is refused by file, section, field and feature.
#[cfg(all(test, not(feature = "server"), not(feature = "ics")))]
mod compiled_out {
    use std::collections::HashMap;
    use std::path::Path;

    #[test]
    fn http_and_an_ics_calendar_in_a_build_without_them_name_the_feature_to_enable() {
        let text = "[http]\nlisten = \"127.0.0.1:9090\"\n\n[calendar.office]\nics = \"office.ics\"\n\n\
            [[job]]\nname = \"j\"\nschedule = \"* * * * *\"\ncalendar = \"office\"\n\
            [job.action]\ntype = \"log\"\ncontent = \"x\"\n";
        let no_env = HashMap::<String, String>::new();
        let errors = super::super::parse(Path::new("jobs.toml"), text, &no_env)
            .expect_err("refused")
            .to_string();
        let lines: Vec<&str> = errors.lines().collect();
        let http = lines.iter().find(|l| l.contains("listen")).expect("[http]");
        assert!(
            http.starts_with("jobs.toml") && http.contains("[http]"),
            "{http}"
        );
        assert!(http.contains("`server` feature"), "{http}");
        let ics = lines.iter().find(|l| l.contains("ics")).expect("ics");
        assert!(
            ics.starts_with("jobs.toml") && ics.contains("office.ics"),
            "{ics}"
        );
        assert!(ics.contains("`ics` feature"), "{ics}");
    }
}
