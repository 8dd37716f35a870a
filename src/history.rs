//! Run history: who ran what. The winner of a slot records the run (when it ends, and when it
//! starts if it runs long or its job catches up) in a capped stream per job on every Redis node; reads merge the nodes, so the
//! history survives any minority of nodes being down or restarted empty. Standalone mode keeps
//! the history in the process.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::Value;
use serde::Serialize;

use crate::lock::nodes::{Nodes, Replies};
use crate::schedule::Slot;

/// Records kept per job and node (`XADD … MAXLEN ~`); one or two per run.
pub const HISTORY_CAP: usize = 2000;
/// Bound on a history write or read per node (not on the race path).
const HISTORY_TIMEOUT: Duration = Duration::from_millis(250);

/// The state of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Won and started; no end recorded (still running, or the winner died).
    Running,
    Done,
    Failed,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Done => "done",
            RunState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(RunState::Running),
            "done" => Some(RunState::Done),
            "failed" => Some(RunState::Failed),
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
    pub job: String,
    #[serde(serialize_with = "serialize_slot")]
    pub slot: Slot,
    pub replica: String,
    pub started: DateTime<Utc>,
    pub finished: Option<DateTime<Utc>>,
    pub outcome: RunState,
    pub error: Option<String>,
    pub attempts: u32,
}

fn serialize_slot<S: serde::Serializer>(slot: &Slot, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&slot.rfc3339_utc())
}

impl RunRecord {
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
        ];
        if let Some(f) = self.finished {
            fields.push(("finished_ms", f.timestamp_millis().to_string()));
        }
        if let Some(e) = &self.error {
            fields.push(("error", e.clone()));
        }
        fields
    }

    fn from_fields(fields: &HashMap<String, String>) -> Option<Self> {
        let ms = |k: &str| fields.get(k).and_then(|v| v.parse::<i64>().ok());
        let time = |k: &str| ms(k).and_then(DateTime::from_timestamp_millis);
        Some(RunRecord {
            job: fields.get("job")?.clone(),
            slot: Slot::at(time("slot_ms")?),
            replica: fields.get("replica")?.clone(),
            started: time("started_ms")?,
            finished: time("finished_ms"),
            outcome: RunState::parse(fields.get("outcome")?)?,
            error: fields.get("error").cloned(),
            attempts: fields
                .get("attempts")
                .and_then(|a| a.parse().ok())
                .unwrap_or(0),
        })
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
    Redis { nodes: Arc<Nodes>, prefix: String },
    Local(Arc<Mutex<VecDeque<RunRecord>>>),
}

/// History could not be read from any node.
#[derive(Debug, thiserror::Error)]
#[error("no Redis node answered the history read: {0}")]
pub struct HistoryUnavailable(String);

impl History {
    pub fn local() -> Self {
        History::Local(Arc::new(Mutex::new(VecDeque::new())))
    }

    /// Records `record` on every node (best effort: a node that is down misses it, the others
    /// keep it; a suspect node gets it but is not waited for). Never fails the run.
    pub async fn record(&self, record: &RunRecord) {
        match self {
            History::Redis { nodes, prefix } => {
                let mut cmd = redis::cmd("XADD");
                cmd.arg(stream_key(prefix, &record.job))
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(HISTORY_CAP)
                    .arg("*");
                for (k, v) in record.fields() {
                    cmd.arg(k).arg(v);
                }
                let writes = nodes
                    .query::<Value>(cmd, HISTORY_TIMEOUT, Replies::settled)
                    .await;
                for e in writes.errors() {
                    tracing::debug!(job = %record.job, slot = %record.slot, error = %e, "history write missed a node");
                }
            }
            History::Local(runs) => {
                let mut runs = runs.lock().unwrap_or_else(|p| p.into_inner());
                runs.push_front(record.clone());
                runs.truncate(HISTORY_CAP);
            }
        }
    }

    /// The latest runs of `job`, one per slot, newest slot first, merged across nodes.
    pub async fn read(
        &self,
        job: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, HistoryUnavailable> {
        let records = match self {
            History::Redis { nodes, prefix } => read_nodes(nodes, prefix, job, limit).await?,
            History::Local(runs) => {
                let runs = runs.lock().unwrap_or_else(|p| p.into_inner());
                runs.iter().filter(|r| r.job == job).cloned().collect()
            }
        };
        let mut merged = merge(records);
        merged.truncate(limit);
        Ok(merged)
    }
}

fn stream_key(prefix: &str, job: &str) -> String {
    format!("{prefix}:history:{job}")
}

/// Reads from every node that is not suspect (from the suspect ones too when no other answers)
/// and returns every record found, to be merged.
async fn read_nodes(
    nodes: &Nodes,
    prefix: &str,
    job: &str,
    limit: usize,
) -> Result<Vec<RunRecord>, HistoryUnavailable> {
    let mut cmd = redis::cmd("XREVRANGE");
    // Up to two records per run: read twice the limit so every run has its end.
    cmd.arg(stream_key(prefix, job))
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(limit.saturating_mul(2).max(2));
    let reads = nodes
        .query::<Value>(cmd, HISTORY_TIMEOUT, |r| r.settled() && r.answered() > 0)
        .await;
    if reads.answered() == 0 {
        let errors: Vec<String> = reads.errors().map(ToString::to_string).collect();
        return Err(HistoryUnavailable(errors.join("; ")));
    }
    Ok(reads
        .into_answers()
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(parse_entries)
        .collect())
}

/// One record per slot (the most complete), newest slot first.
pub fn merge(records: Vec<RunRecord>) -> Vec<RunRecord> {
    let mut by_slot: BTreeMap<Slot, RunRecord> = BTreeMap::new();
    for record in records {
        match by_slot.get(&record.slot) {
            Some(existing) if !record.supersedes(existing) => {}
            _ => {
                by_slot.insert(record.slot, record);
            }
        }
    }
    by_slot.into_values().rev().collect()
}

/// Stream entries `[[id, [k, v, …]], …]` into records; malformed entries are skipped.
fn parse_entries(value: Value) -> Vec<RunRecord> {
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
            let fields = kv
                .chunks(2)
                .filter_map(|pair| Some((text(&pair[0])?, text(pair.get(1)?)?)))
                .collect::<HashMap<_, _>>();
            RunRecord::from_fields(&fields)
        })
        .collect()
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(slot_s: i64, outcome: RunState, finished: Option<i64>) -> RunRecord {
        RunRecord {
            job: "j".into(),
            slot: Slot::at(DateTime::from_timestamp(slot_s, 0).unwrap()),
            replica: "r".into(),
            started: DateTime::from_timestamp(slot_s, 0).unwrap(),
            finished: finished.and_then(|f| DateTime::from_timestamp(f, 0)),
            outcome,
            error: None,
            attempts: 1,
        }
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
        let fields: HashMap<String, String> = r
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(RunRecord::from_fields(&fields), Some(r));
    }
}
