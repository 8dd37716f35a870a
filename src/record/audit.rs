//! The audit trail: who paused, resumed, triggered or reloaded what, when and why. Each entry is
//! one record in a capped stream on every Redis node (`{key_prefix}:audit`, beside the run
//! history), written like the history and counted like a lock: recorded once a majority took
//! it. Reads need a majority of the nodes to answer and merge their streams by the entry's own
//! id, so the same entry from several nodes is one.
//!
//! A control command records its entry *before* it acts (the intent): when a majority cannot
//! take it, the command is refused, nothing is done, and the minority that took it is asked to
//! drop it again, so the trail claims no action that did not happen. When the action itself
//! then does not take effect (another operator's pause holds, the nodes went away between the
//! two writes), a second record of the same id marks the entry `not_taken` with the reason;
//! a read shows the entry once, with its last word.
//!
//! Why so long: about 70 of its lines are unit tests; the code is one wire format (the entry:
//! written, withdrawn, read back, merged over the nodes, repaired onto a node restarted empty)
//! that stays in one file so that its writer and its readers change together.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use redis::Value;
use serde::{Deserialize, Serialize};

use crate::record::history::{Fields, stream_fields};
use crate::redis::{NodeError, Nodes, Replies};
use crate::time::fleet_clock::{FleetClock, Measurement};
use crate::time::schedule::{Clock, SystemClock};

/// Records kept per node (`XADD … MAXLEN ~`): one or two per control action.
pub const AUDIT_CAP: usize = 10_000;
/// Bound on one node's answer to an audit write or read.
const AUDIT_TIMEOUT: Duration = Duration::from_millis(500);
/// How far a node's stream id (its own clock when it took the entry) may be off the entry's
/// fleet-clock stamp: a `--since` read starts this much earlier on the stream, then filters by
/// the stamp. Far above any skew the fleet clock tolerates.
const STREAM_CLOCK_SLACK: chrono::Duration = chrono::Duration::minutes(10);

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    /// `slotcron pause` or [`crate::api::FleetHandle::pause`].
    Pause,
    /// `slotcron resume`.
    Resume,
    /// `slotcron resume --catch-up`: the resume and the catch-up of the newest paused slot.
    ResumeCatchUp,
    /// `slotcron trigger` (or `--local`).
    Trigger,
    /// A replica applied a new configuration (the entry names the config hash change).
    Reload,
    /// A replica refused a new configuration (the entry's reason is the errors).
    ReloadRejected,
    /// A replica started on a configuration whose hash differs from the one it last ran.
    ConfigHash,
}

impl AuditAction {
    /// The stored and printed name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Pause => "pause",
            AuditAction::Resume => "resume",
            AuditAction::ResumeCatchUp => "resume_catch_up",
            AuditAction::Trigger => "trigger",
            AuditAction::Reload => "reload",
            AuditAction::ReloadRejected => "reload_rejected",
            AuditAction::ConfigHash => "config_hash",
        }
    }

    /// Every action, in the order the CLI lists them.
    pub const ALL: [AuditAction; 7] = [
        AuditAction::Pause,
        AuditAction::Resume,
        AuditAction::ResumeCatchUp,
        AuditAction::Trigger,
        AuditAction::Reload,
        AuditAction::ReloadRejected,
        AuditAction::ConfigHash,
    ];

    fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the action an entry records took effect, as far as its writer knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditStatus {
    /// Recorded on a majority before the action, which then went ahead.
    Recorded,
    /// Recorded, but the action then did not take effect (`detail` says why).
    NotTaken,
}

impl AuditStatus {
    /// The stored and printed name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditStatus::Recorded => "recorded",
            AuditStatus::NotTaken => "not_taken",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "recorded" => Some(AuditStatus::Recorded),
            "not_taken" => Some(AuditStatus::NotTaken),
            _ => None,
        }
    }
}

/// One entry of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The entry's own id (its writer, stamp and a random part): the merge of the nodes'
    /// streams tells entries apart by it, never by the nodes' stream ids, which differ.
    pub id: String,
    /// When, on the fleet clock (the Redis nodes' `TIME`), not the writer's own clock.
    pub at: DateTime<Utc>,
    /// Who: `user@host` of the CLI, or the replica's id.
    pub actor: String,
    /// What.
    pub action: AuditAction,
    /// The job acted on (`None` for a reload, which concerns the whole file).
    pub job: Option<String>,
    /// Why: the operator's `--reason`, or a rejected reload's errors.
    pub reason: Option<String>,
    /// What else the action carried: a pause's end, a config hash change, who it was on behalf
    /// of, why it was not taken.
    pub detail: Option<String>,
    /// Whether it took effect.
    pub status: AuditStatus,
}

impl AuditEntry {
    /// A new entry of `action` by `actor` at `at` (fleet clock), with a fresh id.
    pub fn new(at: DateTime<Utc>, actor: &str, action: AuditAction) -> Self {
        AuditEntry {
            id: format!(
                "{}-{}-{:08x}",
                at.timestamp_millis(),
                actor,
                crate::seed::rng().random::<u32>()
            ),
            at,
            actor: actor.to_owned(),
            action,
            job: None,
            reason: None,
            detail: None,
            status: AuditStatus::Recorded,
        }
    }

    /// The same entry about `job`.
    pub fn job(mut self, job: &str) -> Self {
        self.job = Some(job.to_owned());
        self
    }

    /// The same entry with `reason`, if one is given.
    pub fn reason(mut self, reason: Option<&str>) -> Self {
        self.reason = reason.map(str::to_owned);
        self
    }

    /// The same entry with `detail`.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("id", self.id.clone()),
            ("at_ms", self.at.timestamp_millis().to_string()),
            ("actor", self.actor.clone()),
            ("action", self.action.as_str().to_owned()),
            ("status", self.status.as_str().to_owned()),
        ];
        let optional = [
            ("job", &self.job),
            ("reason", &self.reason),
            ("detail", &self.detail),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                fields.push((key, value.clone()));
            }
        }
        fields
    }

    fn from_fields(fields: &Fields) -> Option<Self> {
        let at_ms = fields.get("at_ms")?.parse::<i64>().ok()?;
        Some(AuditEntry {
            id: fields.get("id")?.clone(),
            at: DateTime::from_timestamp_millis(at_ms)?,
            actor: fields.get("actor")?.clone(),
            action: AuditAction::parse(fields.get("action")?)?,
            job: fields.get("job").cloned(),
            reason: fields.get("reason").cloned(),
            detail: fields.get("detail").cloned(),
            status: AuditStatus::parse(fields.get("status")?)?,
        })
    }
}

/// An entry fewer than a majority of the nodes took: the action was not done.
#[derive(Debug, thiserror::Error)]
#[error(
    "the audit entry reached {acked} of {nodes} Redis node(s), a majority ({needed}) needed, so \
     nothing was done: {errors}"
)]
pub struct AuditUnrecorded {
    /// Nodes that took it.
    pub acked: usize,
    /// Nodes in the pool.
    pub nodes: usize,
    /// A majority.
    pub needed: usize,
    /// The failing nodes' errors.
    pub errors: String,
}

/// The trail could not be read from a majority of the nodes.
#[derive(Debug, thiserror::Error)]
#[error("{answered} of {nodes} Redis node(s) answered the audit read, {needed} needed: {errors}")]
pub struct AuditUnavailable {
    /// Nodes that answered.
    pub answered: usize,
    /// Nodes in the pool.
    pub nodes: usize,
    /// A majority.
    pub needed: usize,
    /// The nodes' errors, joined.
    pub errors: String,
}

/// What a read of the trail selects.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Entries stamped at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Only this job's entries.
    pub job: Option<String>,
    /// At most this many, the newest.
    pub limit: usize,
}

/// Where the trail is kept.
#[derive(Debug, Clone)]
pub enum Audit {
    /// A capped stream on every node, merged at read.
    Redis {
        /// The pool the stream is kept on.
        nodes: Arc<Nodes>,
        /// The configuration's `key_prefix`.
        prefix: String,
    },
    /// Kept in this process (standalone mode: nothing else would read it).
    Local(Arc<Mutex<VecDeque<AuditEntry>>>),
}

impl Audit {
    /// A trail in this process.
    pub fn local() -> Self {
        Audit::Local(Arc::default())
    }

    /// The trail on `nodes` under `prefix`.
    pub fn redis(nodes: Arc<Nodes>, prefix: &str) -> Self {
        Audit::Redis {
            nodes,
            prefix: prefix.to_owned(),
        }
    }

    /// The same trail read on `nodes` (the status page's own connections).
    pub fn reading_on(&self, nodes: Arc<Nodes>) -> Self {
        match self {
            Audit::Redis { prefix, .. } => Audit::redis(nodes, prefix),
            Audit::Local(_) => self.clone(),
        }
    }

    /// The fleet's time now, measured on the nodes for a process that keeps no fleet clock (the
    /// CLI); this machine's clock only when no node answers (the write then fails anyway).
    pub async fn fleet_now(&self) -> DateTime<Utc> {
        let Audit::Redis { nodes, .. } = self else {
            return SystemClock.now();
        };
        let clock = FleetClock::new(Arc::new(SystemClock), true);
        match clock.measure(nodes).await {
            Measurement::NoAnswer => SystemClock.now(),
            Measurement::First { .. } | Measurement::Again { .. } => clock.fleet_now(),
        }
    }

    /// Records `entry` on every node that is up; an error unless a majority took it, and then
    /// the nodes that did are asked to drop it again (best effort), so that no entry claims an
    /// action that was refused.
    pub async fn record(&self, entry: &AuditEntry) -> Result<(), AuditUnrecorded> {
        let (nodes, prefix) = match self {
            Audit::Redis { nodes, prefix } => (nodes, prefix),
            Audit::Local(entries) => {
                push_local(entries, entry.clone());
                return Ok(());
            }
        };
        let replies = nodes
            .query::<String>(xadd(prefix, entry), AUDIT_TIMEOUT, Replies::settled)
            .await;
        let acked = replies.answered();
        if acked >= nodes.quorum() {
            return Ok(());
        }
        let errors: Vec<String> = replies.errors().map(ToString::to_string).collect();
        withdraw(nodes, prefix, replies.into_answers()).await;
        Err(AuditUnrecorded {
            acked,
            nodes: nodes.len(),
            needed: nodes.quorum(),
            errors: if errors.is_empty() {
                "no answer from the rest (down at their last try)".to_owned()
            } else {
                errors.join("; ")
            },
        })
    }

    /// Marks `entry` as not taken, with `why` (best effort: the action is already settled).
    pub async fn not_taken(&self, entry: &AuditEntry, why: &str) {
        let settled = AuditEntry {
            status: AuditStatus::NotTaken,
            detail: Some(match &entry.detail {
                Some(detail) => format!("{detail}; not taken: {why}"),
                None => format!("not taken: {why}"),
            }),
            ..entry.clone()
        };
        if let Err(e) = self.record(&settled).await {
            tracing::warn!(id = %entry.id, error = %e, "audit entry not marked not_taken");
        }
    }

    /// Records `entry` for an action already done (a replica's reload): a majority missing is
    /// logged, never an error (the action stands either way).
    pub async fn note(&self, entry: &AuditEntry) {
        if let Err(e) = self.record(entry).await {
            tracing::warn!(action = %entry.action, actor = %entry.actor, error = %e,
                "audit entry not recorded on a majority of the Redis nodes");
        }
    }

    /// The entries `query` selects, newest first, one per id, merged across a majority of the
    /// nodes.
    pub async fn read(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, AuditUnavailable> {
        let entries = match self {
            Audit::Redis { nodes, prefix } => read_nodes(nodes, prefix, query).await?,
            Audit::Local(entries) => {
                let entries = entries.lock().unwrap_or_else(|p| p.into_inner());
                entries.iter().cloned().collect()
            }
        };
        let mut merged = merge(entries);
        merged.retain(|e| {
            query.since.is_none_or(|since| e.at >= since)
                && query
                    .job
                    .as_ref()
                    .is_none_or(|job| e.job.as_ref() == Some(job))
        });
        merged.truncate(query.limit);
        Ok(merged)
    }
}

impl Audit {
    /// Keeps `hash` as the configuration `replica` runs, and returns the one it ran before
    /// when that differs (as most answering nodes held it; `None` on a first start, an
    /// unchanged file, or when no node answered). Kept [`CONFIG_HASH_TTL`]: a replica id
    /// unseen that long is gone.
    pub async fn config_hash_seen(&self, replica: &str, hash: &str) -> Option<String> {
        let Audit::Redis { nodes, prefix } = self else {
            return None;
        };
        let mut cmd = redis::cmd("SET");
        cmd.arg(config_hash_key(prefix, replica))
            .arg(hash)
            .arg("GET")
            .arg("EX")
            .arg(CONFIG_HASH_TTL.as_secs());
        let replies = nodes
            .query::<Option<String>>(cmd, AUDIT_TIMEOUT, Replies::settled)
            .await;
        let mut held: HashMap<&Option<String>, usize> = HashMap::new();
        for previous in replies.values() {
            *held.entry(previous).or_default() += 1;
        }
        let most = held
            .into_iter()
            .max_by_key(|(value, n)| (*n, value.is_some()));
        most.and_then(|(previous, _)| previous.clone())
            .filter(|previous| previous != hash)
    }
}

impl Audit {
    /// Copies the trail's newest entries (up to [`REPAIR_ENTRIES`]) that a majority of the
    /// nodes hold onto each answering node that lacks them: a node restarted empty, which
    /// would otherwise leave a recorded entry on fewer nodes at each rolling restart until none.
    /// An entry on fewer than a majority (a refused one whose withdrawal failed) is not spread.
    pub async fn repair(&self) {
        let Audit::Redis { nodes, prefix } = self else {
            return;
        };
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(audit_key(prefix)).arg("+").arg("-");
        cmd.arg("COUNT").arg(REPAIR_ENTRIES);
        let reads = nodes
            .query::<Value>(cmd, AUDIT_TIMEOUT, Replies::settled)
            .await;
        let held: Vec<Option<Vec<AuditEntry>>> = reads
            .into_answers()
            .into_iter()
            .map(|a| a.and_then(Result::ok).map(parse_entries))
            .collect();
        for (i, missing) in missing_per_node(&held, nodes.quorum()) {
            tracing::info!(
                node = i,
                entries = missing.len(),
                "audit trail repaired onto a node that lacked entries"
            );
            let mut pipe = redis::pipe();
            for entry in missing.iter().rev() {
                pipe.add_command(xadd(prefix, entry)).ignore();
            }
            let _ = nodes
                .ask_one(i, |node| async move {
                    node.query_pipe::<Value>(&pipe, AUDIT_TIMEOUT * 4).await
                })
                .await;
        }
    }
}

/// Entries a node restarted empty gets back ([`Audit::repair`]).
pub const REPAIR_ENTRIES: usize = 2000;

/// For each node that answered (`held`), the records held by at least `quorum` nodes that it
/// lacks, newest first.
fn missing_per_node(
    held: &[Option<Vec<AuditEntry>>],
    quorum: usize,
) -> Vec<(usize, Vec<AuditEntry>)> {
    let mut all: Vec<&AuditEntry> = held.iter().flatten().flatten().collect();
    // Newest first; the records of one entry (`recorded`, `not_taken`) side by side.
    all.sort_by(|a, b| (b.at, &b.id, b.status).cmp(&(a.at, &a.id, a.status)));
    all.dedup();
    let on_a_majority: Vec<&AuditEntry> = all
        .into_iter()
        .filter(|e| held.iter().flatten().filter(|h| h.contains(e)).count() >= quorum)
        .collect();
    held.iter()
        .enumerate()
        .filter_map(|(i, h)| Some((i, h.as_ref()?)))
        .map(|(i, h)| {
            let lacking = on_a_majority.iter().filter(|e| !h.contains(e));
            (i, lacking.map(|e| (*e).clone()).collect::<Vec<_>>())
        })
        .filter(|(_, missing)| !missing.is_empty())
        .collect()
}

/// How long a replica's last config hash is kept without the replica starting or reloading.
pub const CONFIG_HASH_TTL: Duration = Duration::from_secs(90 * 24 * 3600);

/// Where a replica's last config hash is kept.
fn config_hash_key(prefix: &str, replica: &str) -> String {
    format!("{prefix}:audit:config:{replica}")
}

fn push_local(entries: &Mutex<VecDeque<AuditEntry>>, entry: AuditEntry) {
    let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
    entries.push_front(entry);
    entries.truncate(AUDIT_CAP);
}

/// The trail's stream: one per fleet (a reload concerns no one job).
pub fn audit_key(prefix: &str) -> String {
    format!("{prefix}:audit")
}

fn xadd(prefix: &str, entry: &AuditEntry) -> redis::Cmd {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(audit_key(prefix))
        .arg("MAXLEN")
        .arg("~")
        .arg(AUDIT_CAP)
        .arg("*");
    for (k, v) in entry.fields() {
        cmd.arg(k).arg(v);
    }
    cmd
}

/// Drops a refused entry from the nodes that took it (`answers`: each node's stream id).
async fn withdraw(nodes: &Nodes, prefix: &str, answers: Vec<Option<Result<String, NodeError>>>) {
    for (i, answer) in answers.into_iter().enumerate() {
        let Some(Ok(stream_id)) = answer else {
            continue;
        };
        let mut cmd = redis::cmd("XDEL");
        cmd.arg(audit_key(prefix)).arg(&stream_id);
        let dropped = nodes
            .ask_one(i, |node| async move {
                node.query::<Value>(&cmd, AUDIT_TIMEOUT).await
            })
            .await;
        if let Err(e) = dropped {
            tracing::warn!(node = i, stream_id, error = %e,
                "a refused audit entry could not be withdrawn from a node that took it");
        }
    }
}

/// Reads the newest entries (from `since`, with the stream clock's slack) from a majority.
async fn read_nodes(
    nodes: &Nodes,
    prefix: &str,
    query: &AuditQuery,
) -> Result<Vec<AuditEntry>, AuditUnavailable> {
    let mut cmd = redis::cmd("XREVRANGE");
    cmd.arg(audit_key(prefix)).arg("+");
    match query.since {
        Some(since) => cmd.arg((since - STREAM_CLOCK_SLACK).timestamp_millis().max(0)),
        None => cmd.arg("-"),
    };
    // Up to two records per entry (its intent and its `not_taken`); a job's are among others.
    let count = match query.job {
        Some(_) => AUDIT_CAP,
        None => query.limit.saturating_mul(2).clamp(2, AUDIT_CAP),
    };
    cmd.arg("COUNT").arg(count);
    let needed = nodes.quorum();
    let reads = nodes
        .query::<Value>(cmd, AUDIT_TIMEOUT, |r| {
            r.settled() && r.answered() >= needed
        })
        .await;
    if reads.answered() < needed {
        let errors: Vec<String> = reads.errors().map(ToString::to_string).collect();
        return Err(AuditUnavailable {
            answered: reads.answered(),
            nodes: nodes.len(),
            needed,
            errors: errors.join("; "),
        });
    }
    Ok(reads.values().cloned().flat_map(parse_entries).collect())
}

/// One entry per id (its last word: `not_taken` over `recorded`), newest first.
pub fn merge(entries: Vec<AuditEntry>) -> Vec<AuditEntry> {
    let mut by_id: BTreeMap<(DateTime<Utc>, String), AuditEntry> = BTreeMap::new();
    for entry in entries {
        let key = (entry.at, entry.id.clone());
        match by_id.get(&key) {
            Some(kept) if kept.status >= entry.status => {}
            _ => {
                by_id.insert(key, entry);
            }
        }
    }
    by_id.into_values().rev().collect()
}

/// Stream entries into audit entries; malformed ones are skipped.
fn parse_entries(value: Value) -> Vec<AuditEntry> {
    stream_fields(value)
        .iter()
        .filter_map(AuditEntry::from_fields)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at_s: i64) -> AuditEntry {
        let at = DateTime::from_timestamp(at_s, 0).unwrap();
        AuditEntry::new(at, "ops@host", AuditAction::Pause)
            .job("report")
            .reason(Some("receiver down"))
    }

    #[test]
    fn fields_round_trip() {
        let e = entry(10).detail("until resumed");
        let fields: Fields = e
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(AuditEntry::from_fields(&fields), Some(e));
    }

    #[test]
    fn the_same_entry_from_several_nodes_is_one_and_not_taken_is_its_last_word() {
        let (a, b) = (entry(10), entry(20));
        let refused = AuditEntry {
            status: AuditStatus::NotTaken,
            ..b.clone()
        };
        let merged = merge(vec![a.clone(), b.clone(), a.clone(), refused.clone(), b]);
        assert_eq!(merged, vec![refused, a]);
    }

    #[test]
    fn a_node_restarted_empty_gets_the_entries_a_majority_holds_but_no_stray() {
        let (a, b, stray) = (entry(10), entry(20), entry(30));
        let held = vec![
            Some(vec![stray.clone(), b.clone(), a.clone()]),
            Some(vec![b.clone(), a.clone()]),
            Some(Vec::new()),
        ];
        assert_eq!(missing_per_node(&held, 2), vec![(2, vec![b, a])]);
    }

    #[test]
    fn every_action_reads_back_by_its_name() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.as_str()), Some(action));
        }
    }
}
