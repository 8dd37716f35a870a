//! Run history: who ran what. The winner of a slot records the run (when it ends, and when it
//! starts if it runs long or its job catches up) in a capped stream per job on every Redis
//! node; reads merge the nodes, so the history survives any minority of nodes being down or
//! restarted empty. Standalone mode keeps the history in the process.
//!
//! Why so long: about 95 of its lines are unit tests; the code is one wire format (the run
//! record: written, read back, merged over the nodes) that stays in one file so that its writer
//! and its readers change together.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::Value;
use serde::Serialize;

use crate::redis::{Nodes, Replies};
use crate::time::schedule::{Fence, Slot};

/// Records kept per job and node (`XADD … MAXLEN ~`); one or two per run.
pub const HISTORY_CAP: usize = 2000;
/// Bound on a history write or read per node (not on the race path).
const HISTORY_TIMEOUT: Duration = Duration::from_millis(250);

/// What a failed run's receiver may have seen: the `delivery` field of its log line and record.
/// Kept here, beside the record, so the actions below the race can name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Nothing reached the receiver, or it answered that it refused the message.
    NotDelivered,
    /// A request may have reached the receiver and been acted on.
    Uncertain,
}

impl DeliveryState {
    /// The value of the `delivery` log field.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::NotDelivered => "not_delivered",
            DeliveryState::Uncertain => "uncertain",
        }
    }

    /// Reads the state's stored name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "not_delivered" => Some(DeliveryState::NotDelivered),
            "uncertain" => Some(DeliveryState::Uncertain),
            _ => None,
        }
    }
}

/// The state of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Won and started; no end recorded (still running, or the winner died).
    Running,
    /// The run ended in success.
    Done,
    /// The run ended in failure.
    Failed,
    /// Nothing left the winner: it offered the slot to the fleet (see `handoff`).
    HandedOff,
    /// Won, not run: the job's previous run was still going (`overlap = "skip"`). Stored as
    /// `skipped`, the word its log line uses (`outcome = "skipped"`, `reason = "overlap"`).
    Overlapped,
}

impl RunState {
    /// The state's stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Done => "done",
            RunState::Failed => "failed",
            RunState::HandedOff => "handed_off",
            RunState::Overlapped => "skipped",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(RunState::Running),
            "done" => Some(RunState::Done),
            "failed" => Some(RunState::Failed),
            "handed_off" => Some(RunState::HandedOff),
            "skipped" => Some(RunState::Overlapped),
            _ => None,
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run of one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRecord {
    /// The job run.
    pub job: String,
    #[serde(serialize_with = "serialize_slot")]
    /// The slot run.
    pub slot: Slot,
    /// The replica that won and ran it.
    pub replica: String,
    /// When the run started.
    pub started: DateTime<Utc>,
    /// When it ended (`None` while it runs).
    pub finished: Option<DateTime<Utc>>,
    /// How it ended.
    pub outcome: RunState,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Attempts the action made.
    pub attempts: u32,
    /// What started the run: `schedule`, `catch_up`, `trigger` or `handoff`.
    pub trigger: String,
    /// The run's fencing token (the slot's epoch ms plus its handoff number).
    #[serde(serialize_with = "serialize_fence")]
    pub fence: Fence,
    /// On a failed or handed-off run: whether the receiver may have acted on it.
    #[serde(serialize_with = "serialize_delivery")]
    pub delivery: Option<DeliveryState>,
    /// On a handoff: the replica that won the slot first and could not deliver it.
    pub previous_winner: Option<String>,
}

fn serialize_fence<S: serde::Serializer>(fence: &Fence, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(fence.get())
}

fn serialize_delivery<S: serde::Serializer>(
    delivery: &Option<DeliveryState>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match delivery {
        Some(d) => s.serialize_str(d.as_str()),
        None => s.serialize_none(),
    }
}

fn serialize_slot<S: serde::Serializer>(slot: &Slot, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&slot.rfc3339_utc())
}

impl RunRecord {
    /// How long the run took, once it ended.
    pub fn duration(&self) -> Option<Duration> {
        self.finished.and_then(|f| (f - self.started).to_std().ok())
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("job", self.job.clone()),
            ("slot_ms", self.slot.epoch_ms().to_string()),
            ("replica", self.replica.clone()),
            ("started_ms", self.started.timestamp_millis().to_string()),
            ("outcome", self.outcome.as_str().to_owned()),
            ("attempts", self.attempts.to_string()),
            ("trigger", self.trigger.clone()),
            ("fence", self.fence.get().to_string()),
        ];
        if let Some(d) = self.delivery {
            fields.push(("delivery", d.as_str().to_owned()));
        }
        if let Some(p) = &self.previous_winner {
            fields.push(("previous_winner", p.clone()));
        }
        if let Some(f) = self.finished {
            fields.push(("finished_ms", f.timestamp_millis().to_string()));
        }
        if let Some(e) = &self.error {
            fields.push(("error", e.clone()));
        }
        fields
    }

    fn from_fields(fields: &Fields) -> Option<Self> {
        let ms = |k: &str| fields.get(k).and_then(|v| v.parse::<i64>().ok());
        let time = |k: &str| ms(k).and_then(DateTime::from_timestamp_millis);
        let slot = Slot::at(time("slot_ms")?);
        Some(RunRecord {
            job: fields.get("job")?.clone(),
            slot,
            replica: fields.get("replica")?.clone(),
            started: time("started_ms")?,
            finished: time("finished_ms"),
            outcome: RunState::parse(fields.get("outcome")?)?,
            error: fields.get("error").cloned(),
            attempts: fields
                .get("attempts")
                .and_then(|a| a.parse().ok())
                .unwrap_or(0),
            // Records written before these fields existed read as a schedule's first run.
            trigger: fields
                .get("trigger")
                .cloned()
                .unwrap_or_else(|| "schedule".to_owned()),
            fence: ms("fence").map_or(Fence::new(slot, 0), |f| {
                Fence::new(slot, (f - slot.epoch_ms()).clamp(0, 255) as u8)
            }),
            delivery: fields.get("delivery").and_then(|d| DeliveryState::parse(d)),
            previous_winner: fields.get("previous_winner").cloned(),
        })
    }

    /// What tells one run from another: its job and fence, its start (to the millisecond, as
    /// stored) and its replica. Two runs under one [`Self::lease`] mean the slot ran twice.
    fn run_id(&self) -> (&str, Fence, i64, &str) {
        let (job, fence) = self.lease();
        (job, fence, self.started.timestamp_millis(), &self.replica)
    }

    /// The lock the run held: its job's slot key at its fence. A fence is the slot's time (plus
    /// the handoff), so two jobs due at one instant share its value: it names a run only with
    /// the job.
    fn lease(&self) -> (&str, Fence) {
        (&self.job, self.fence)
    }

    /// Of two records of the same slot, the one that says more: an end beats a start.
    fn supersedes(&self, other: &RunRecord) -> bool {
        (self.finished.is_some(), self.finished, self.started)
            > (other.finished.is_some(), other.finished, other.started)
    }
}

/// Where runs are recorded.
#[derive(Debug, Clone)]
pub enum History {
    /// A capped stream per job on every node, merged at read.
    Redis {
        /// The pool the streams are kept on.
        nodes: Arc<Nodes>,
        /// The configuration's `key_prefix`.
        prefix: String,
    },
    /// Kept in this process (standalone mode).
    Local(Arc<LocalStore>),
}

/// What standalone mode keeps in the process: the runs, and the alert log's lines (JSON, as
/// `record::alerts` stores them on the nodes), so the alert log needs no store of its own.
#[derive(Debug, Default)]
pub struct LocalStore {
    /// The runs, newest first.
    runs: Mutex<VecDeque<RunRecord>>,
    /// The alert log's lines, newest first.
    pub alert_lines: Mutex<VecDeque<String>>,
}

/// History could not be read from a majority of the nodes.
#[derive(Debug, thiserror::Error)]
#[error("{answered} Redis node(s) answered the history read, {needed} needed: {errors}")]
pub struct HistoryUnavailable {
    /// Nodes that answered.
    pub answered: usize,
    /// A majority.
    pub needed: usize,
    /// The nodes' errors, joined.
    pub errors: String,
}

impl History {
    /// A history in this process.
    pub fn local() -> Self {
        History::Local(Arc::default())
    }

    /// The same history read and written on `nodes` (the status page's own connections).
    pub fn reading_on(&self, nodes: Arc<Nodes>) -> Self {
        match self {
            History::Redis { prefix, .. } => History::Redis {
                nodes,
                prefix: prefix.clone(),
            },
            History::Local(_) => self.clone(),
        }
    }

    /// Records `record` on every node (best effort: a node that is down misses it, the others
    /// keep it; a suspect node gets it but is not waited for). Never fails the run.
    pub async fn record(&self, record: &RunRecord) {
        match self {
            History::Redis { nodes, prefix } => {
                let writes = nodes
                    .query::<Value>(xadd(prefix, record), HISTORY_TIMEOUT, Replies::settled)
                    .await;
                for e in writes.errors() {
                    tracing::debug!(job = %record.job, slot = %record.slot, error = %e, "history write missed a node");
                }
            }
            History::Local(store) => {
                let mut runs = store.runs.lock().unwrap_or_else(|p| p.into_inner());
                runs.push_front(record.clone());
                runs.truncate(HISTORY_CAP);
            }
        }
    }

    /// Records `record` like [`Self::record`] and returns, in the same round trip, the records
    /// among the newest `look` entries of its job's stream that share its fence, from every node
    /// that took it (unmerged): the winner looks for another run of its slot under the same
    /// fence, which only a failed lock allows.
    pub async fn record_and_read(&self, record: &RunRecord, look: usize) -> Vec<RunRecord> {
        match self {
            History::Redis { nodes, prefix } => {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(RECORD_AND_READ_SCRIPT)
                    .arg(1)
                    .arg(stream_key(prefix, &record.job))
                    .arg(HISTORY_CAP)
                    .arg(look)
                    .arg(record.fence.get());
                for (k, v) in record.fields() {
                    cmd.arg(k).arg(v);
                }
                let replies = nodes
                    .query::<Value>(cmd, HISTORY_TIMEOUT, Replies::settled)
                    .await;
                for e in replies.errors() {
                    tracing::debug!(job = %record.job, slot = %record.slot, error = %e, "history write missed a node");
                }
                replies
                    .into_answers()
                    .into_iter()
                    .flatten()
                    .flatten()
                    .flat_map(parse_entries)
                    .collect()
            }
            History::Local(_) => {
                self.record(record).await;
                self.read(&record.job, look).await.unwrap_or_default()
            }
        }
    }

    /// The latest runs of `job`, one per run (a handed-off slot has two), newest first, merged
    /// across nodes.
    pub async fn read(
        &self,
        job: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, HistoryUnavailable> {
        let records = match self {
            History::Redis { nodes, prefix } => read_nodes(nodes, prefix, job, limit).await?,
            History::Local(store) => {
                let runs = store.runs.lock().unwrap_or_else(|p| p.into_inner());
                runs.iter().filter(|r| r.job == job).cloned().collect()
            }
        };
        let mut merged = merge(records);
        merged.truncate(limit);
        Ok(merged)
    }

    /// Copies `job`'s latest records (up to [`REPAIR_RECORDS`]) onto every node that answered
    /// with none: a node restarted empty, which would otherwise count against every majority
    /// read of the history until new runs filled it.
    pub async fn repair(&self, job: &str) {
        let History::Redis { nodes, prefix } = self else {
            return;
        };
        if !one_node_lacks(nodes, prefix, job).await {
            return;
        }
        let reads = nodes
            .query::<Value>(
                xrevrange(prefix, job, REPAIR_RECORDS),
                HISTORY_TIMEOUT,
                Replies::settled,
            )
            .await;
        let per_node: Vec<Option<Vec<RunRecord>>> = reads
            .into_answers()
            .into_iter()
            .map(|a| a.and_then(Result::ok).map(parse_entries))
            .collect();
        let mut all: Vec<RunRecord> = Vec::new();
        for record in per_node.iter().flatten().flatten() {
            if !all.contains(record) {
                all.push(record.clone());
            }
        }
        all.sort_by_key(|r| (r.started, r.finished.is_some()));
        let mut pipe = redis::pipe();
        for record in &all {
            pipe.add_command(xadd(prefix, record)).ignore();
        }
        let pipe = Arc::new(pipe);
        for (i, held) in per_node.iter().enumerate() {
            if all.is_empty() || !held.as_ref().is_some_and(Vec::is_empty) {
                continue;
            }
            tracing::info!(
                job,
                node = i,
                records = all.len(),
                "run history repaired onto a node that had none"
            );
            let pipe = pipe.clone();
            let _ = nodes
                .ask_one(i, |node| async move {
                    node.query_pipe::<Value>(&pipe, HISTORY_TIMEOUT * 4).await
                })
                .await;
        }
    }
}

/// Whether, of the nodes that answered, one holds no record of `job` while another holds some:
/// the only case in which [`History::repair`] has anything to copy. Every replica repairs every
/// job whenever a node's subscription reopens (any blip of any node), so the common answer
/// ("every node has records") costs each node its newest entry, not [`REPAIR_RECORDS`] of them.
async fn one_node_lacks(nodes: &Nodes, prefix: &str, job: &str) -> bool {
    let reads = nodes
        .query::<Value>(xrevrange(prefix, job, 1), HISTORY_TIMEOUT, Replies::settled)
        .await;
    let holds: Vec<bool> = reads
        .values()
        .map(|v| matches!(v, Value::Array(entries) if !entries.is_empty()))
        .collect();
    holds.contains(&true) && holds.contains(&false)
}

/// Appends a record (`ARGV[4..]`, field-value pairs) to the stream `KEYS[1]`, capped at
/// `ARGV[1]`, and returns those of the stream's newest `ARGV[2]` entries whose fence is
/// `ARGV[3]` (the record's own among them): the answer stays a record or two per run.
const RECORD_AND_READ_SCRIPT: &str = "
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 4))
local found = {}
for _, entry in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[2])) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'fence' and fields[i + 1] == ARGV[3] then table.insert(found, entry) end
  end
end
return found";

/// Records copied onto a node restarted empty ([`History::repair`]).
pub const REPAIR_RECORDS: usize = 400;

fn stream_key(prefix: &str, job: &str) -> String {
    format!("{prefix}:history:{job}")
}

/// The `XADD` of `record` to its job's stream.
fn xadd(prefix: &str, record: &RunRecord) -> redis::Cmd {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(stream_key(prefix, &record.job))
        .arg("MAXLEN")
        .arg("~")
        .arg(HISTORY_CAP)
        .arg("*");
    for (k, v) in record.fields() {
        cmd.arg(k).arg(v);
    }
    cmd
}

/// The newest `count` entries of `job`'s stream.
fn xrevrange(prefix: &str, job: &str, count: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("XREVRANGE");
    cmd.arg(stream_key(prefix, job))
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(count);
    cmd
}

/// Reads from a majority of the nodes (every one that is not suspect, the suspect ones too
/// while fewer than a majority answered) and returns every record found, to be merged. Fewer
/// than a majority is an error: an empty node's answer alone would make run slots look missed.
async fn read_nodes(
    nodes: &Nodes,
    prefix: &str,
    job: &str,
    limit: usize,
) -> Result<Vec<RunRecord>, HistoryUnavailable> {
    // Up to two records per run: read twice the limit so every run has its end.
    let cmd = xrevrange(prefix, job, limit.saturating_mul(2).max(2));
    let reads = read_majority::<Value>(nodes, cmd, HISTORY_TIMEOUT).await?;
    Ok(reads
        .into_answers()
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(parse_entries)
        .collect())
}

/// `cmd` on every node, waited for until every answer is in or `wait` has passed, and kept
/// only when a majority answered: what the fleet keeps beside its runs is read from a majority
/// or not at all (an emptied node alone would hide what it lost).
pub(crate) async fn read_majority<T>(
    nodes: &Nodes,
    cmd: redis::Cmd,
    wait: Duration,
) -> Result<Replies<T>, HistoryUnavailable>
where
    T: redis::FromRedisValue + Send + 'static,
{
    let needed = nodes.quorum();
    let reads = nodes
        .query::<T>(cmd, wait, |r| r.settled() && r.answered() >= needed)
        .await;
    if reads.answered() < needed {
        let errors: Vec<String> = reads.errors().map(ToString::to_string).collect();
        return Err(HistoryUnavailable {
            answered: reads.answered(),
            needed,
            errors: errors.join("; "),
        });
    }
    Ok(reads)
}

/// One record per run (the most complete), newest first. A run is its slot's fence, the
/// replica that ran it and when it started: a handed-off slot has two (the first winner's
/// `handed_off` and the taker's), and a slot run twice under the same fence (two nodes
/// restarted empty, a clock fault) has two as well, which [`duplicates`] names.
pub fn merge(records: Vec<RunRecord>) -> Vec<RunRecord> {
    let mut by_run: BTreeMap<(Fence, i64, String, String), RunRecord> = BTreeMap::new();
    for record in records {
        let (job, fence, started, replica) = record.run_id();
        let run = (fence, started, replica.to_owned(), job.to_owned());
        match by_run.get(&run) {
            Some(existing) if !record.supersedes(existing) => {}
            _ => {
                by_run.insert(run, record);
            }
        }
    }
    by_run.into_values().rev().collect()
}

/// Another run in `runs` than `run` of the same job under the same fence: `run`'s slot ran
/// twice. `runs` may hold several jobs (the merged `history`): another job's run at the same
/// instant shares the fence's value, never the lease.
pub fn other_run<'a>(run: &RunRecord, runs: &'a [RunRecord]) -> Option<&'a RunRecord> {
    runs.iter()
        .find(|o| o.lease() == run.lease() && o.run_id() != run.run_id())
}

/// The runs in `runs` that share their job and fence with another run: a slot the lock let run
/// twice.
/// Each such run is named (so a slot run twice gives two), in the order given.
pub fn duplicates(runs: &[RunRecord]) -> Vec<&RunRecord> {
    runs.iter()
        .filter(|r| other_run(r, runs).is_some())
        .collect()
}

/// Stream entries `[[id, [k, v, …]], …]` into records; malformed entries are skipped.
fn parse_entries(value: Value) -> Vec<RunRecord> {
    stream_fields(value)
        .iter()
        .filter_map(RunRecord::from_fields)
        .collect()
}

/// One stream entry's fields, in the order written. A record has about ten, so a field is
/// found by a scan: cheaper than hashing every one into a map, and a history read parses
/// thousands of entries (the ledger's 2000 per node, each start's look-back, each repair).
#[derive(Debug, Default)]
pub(crate) struct Fields(Vec<(String, String)>);

impl Fields {
    /// The value of the field `name` (the last one of that name, as a map would keep).
    pub(crate) fn get(&self, name: &str) -> Option<&String> {
        self.0.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

impl FromIterator<(String, String)> for Fields {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        Fields(pairs.into_iter().collect())
    }
}

/// Each entry of a stream read (`[[id, [k, v, …]], …]`) as its fields by name; entries that
/// are not that shape are skipped, and so are pairs that are not text. The one reading of the
/// record streams (runs, audit).
pub(crate) fn stream_fields(value: Value) -> Vec<Fields> {
    let Value::Array(entries) = value else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|entry| {
            let Value::Array(mut parts) = entry else {
                return None;
            };
            let Value::Array(kv) = parts.pop()? else {
                return None;
            };
            let mut kv = kv.into_iter();
            let mut fields = Vec::with_capacity(kv.len() / 2);
            while let (Some(k), Some(v)) = (kv.next(), kv.next()) {
                if let (Some(k), Some(v)) = (text(k), text(v)) {
                    fields.push((k, v));
                }
            }
            Some(Fields(fields))
        })
        .collect()
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// Test records for the modules that read runs (the ledger, catch-up, the status page).
#[cfg(test)]
impl RunRecord {
    /// `replica` ran `job`'s `slot` to `outcome` in one attempt, starting and ending at the
    /// slot's instant, scheduled, not handed off.
    pub(crate) fn test(job: &str, slot: Slot, replica: &str, outcome: RunState) -> Self {
        RunRecord {
            job: job.into(),
            slot,
            replica: replica.into(),
            started: slot.instant(),
            finished: Some(slot.instant()),
            outcome,
            error: None,
            attempts: 1,
            trigger: "schedule".into(),
            fence: Fence::new(slot, 0),
            delivery: None,
            previous_winner: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(slot_s: i64, outcome: RunState, finished: Option<i64>) -> RunRecord {
        let slot = Slot::at(DateTime::from_timestamp(slot_s, 0).unwrap());
        RunRecord {
            finished: finished.and_then(|f| DateTime::from_timestamp(f, 0)),
            ..RunRecord::test("j", slot, "r", outcome)
        }
    }

    #[test]
    fn merge_keeps_both_runs_of_a_handed_off_slot_the_taker_first() {
        let mut first = record(10, RunState::HandedOff, Some(10));
        first.delivery = Some(DeliveryState::NotDelivered);
        let mut taker = record(10, RunState::Done, Some(11));
        taker.replica = "r2".into();
        taker.trigger = "handoff".into();
        taker.fence = Fence::new(taker.slot, 1);
        taker.previous_winner = Some("r".into());
        let merged = merge(vec![
            first.clone(),
            taker.clone(),
            record(5, RunState::Done, Some(6)),
        ]);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged[0], taker);
        assert_eq!(merged[1], first);
        assert_eq!(merged[2].slot.instant().timestamp(), 5);
    }

    #[test]
    fn a_record_written_before_fences_reads_as_the_first_run() {
        let r = record(10, RunState::Done, Some(11));
        let fields: Fields = r
            .fields()
            .into_iter()
            .filter(|(k, _)| !["fence", "trigger"].contains(k))
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(RunRecord::from_fields(&fields), Some(r));
    }

    #[test]
    fn merge_keeps_one_record_per_slot_preferring_the_end() {
        let merged = merge(vec![
            record(10, RunState::Running, None),
            record(10, RunState::Done, Some(11)),
            record(10, RunState::Running, None),
            record(20, RunState::Running, None),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].slot.instant().timestamp(), 20);
        assert_eq!(merged[1].outcome, RunState::Done);
    }

    #[test]
    fn fields_round_trip() {
        let mut r = record(10, RunState::Failed, Some(12));
        r.error = Some("boom".into());
        r.delivery = Some(DeliveryState::Uncertain);
        r.trigger = "handoff".into();
        r.fence = Fence::new(r.slot, 1);
        r.previous_winner = Some("r0".into());
        let fields: Fields = r
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(RunRecord::from_fields(&fields), Some(r));
    }

    #[test]
    fn two_jobs_at_one_instant_share_a_fence_value_but_no_run_is_a_duplicate() {
        let a = record(10, RunState::Done, Some(10));
        let b = RunRecord {
            job: "k".into(),
            ..a.clone()
        };
        assert_eq!(a.fence, b.fence);
        let runs = [a.clone(), b.clone()];
        assert!(duplicates(&runs).is_empty());
        assert_eq!(merge(vec![a.clone(), b.clone()]).len(), 2);
        let again = RunRecord {
            replica: "r2".into(),
            ..a.clone()
        };
        let runs = [a.clone(), b, again.clone()];
        assert_eq!(duplicates(&runs), [&a, &again]);
    }
}
