//! The alert log: every alert the fleet sent about a job (`failed`, `missed`, `duplicate`,
//! `deadline`, `recovered`), kept like the history: a capped list per job on every Redis node
//! (`{key_prefix}:alerts:{job}`, one JSON line per alert, newest first), read back from a
//! majority and merged. Its head is the job's last alert, which decides whether a `done` run
//! is a recovery; the ledger and the status page show it. Standalone mode keeps it in the
//! process, beside the history's runs.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::history::{History, HistoryUnavailable, read_majority};
use crate::outcome::Outcome;
use crate::redis::{Nodes, Replies};
use crate::time::schedule::Slot;

/// Alerts kept per job and node: weeks of a job failing every few minutes.
pub const ALERT_LOG_CAP: usize = 500;
/// Bound on one node's write or read (not on the race path).
const ALERT_LOG_TIMEOUT: Duration = Duration::from_millis(500);

/// Pushes `ARGV[1]` onto the list `KEYS[1]` and keeps its newest `ARGV[2]`.
const PUSH_SCRIPT: &str = "redis.call('LPUSH', KEYS[1], ARGV[1]) \
    redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1) return 1";

/// What an alert told: the alert action's `outcome` template value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A won run failed.
    Failed,
    /// No replica ran the slot.
    Missed,
    /// The slot ran twice under one fence.
    Duplicate,
    /// The slot was not `done` by the job's `deadline`.
    Deadline,
    /// The job ended `done` again after a `failed`, `missed` or `deadline` alert.
    Recovered,
}

impl AlertKind {
    /// The kind of an alert about a slot that ended `outcome`; `None` for an outcome no alert
    /// tells.
    pub fn of(outcome: Outcome) -> Option<Self> {
        match outcome {
            Outcome::Failed => Some(AlertKind::Failed),
            Outcome::Missed => Some(AlertKind::Missed),
            Outcome::Duplicate => Some(AlertKind::Duplicate),
            Outcome::Deadline => Some(AlertKind::Deadline),
            Outcome::Recovered => Some(AlertKind::Recovered),
            Outcome::Won
            | Outcome::Lost
            | Outcome::Unavailable
            | Outcome::OutOfWindow
            | Outcome::Paused
            | Outcome::Standby
            | Outcome::Done
            | Outcome::HandedOff
            | Outcome::Overlapped => None,
        }
    }

    /// The `outcome` value of the alert's templates and log line.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Failed => "failed",
            AlertKind::Missed => "missed",
            AlertKind::Duplicate => "duplicate",
            AlertKind::Deadline => "deadline",
            AlertKind::Recovered => "recovered",
        }
    }

    /// Whether a `done` run after this alert is a recovery (a duplicate run is not a failure
    /// of the job: it did run).
    pub fn wants_recovery(self) -> bool {
        matches!(
            self,
            AlertKind::Failed | AlertKind::Missed | AlertKind::Deadline
        )
    }
}

/// One alert as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertRecord {
    /// The job alerted about.
    pub job: String,
    /// What the alert told.
    pub kind: AlertKind,
    /// The slot it was about (for `recovered`: the slot that ended `done`).
    #[serde(with = "slot_ms")]
    pub slot: Slot,
    /// The replica that sent it.
    pub replica: String,
    /// When it was decided, on the fleet clock.
    pub at: DateTime<Utc>,
    /// The reason, as the alert's message carried it.
    pub reason: String,
}

/// A slot stored as its epoch milliseconds, as its keys name it.
mod slot_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::time::schedule::Slot;

    pub fn serialize<S: Serializer>(slot: &Slot, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(slot.epoch_ms())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Slot, D::Error> {
        let ms = i64::deserialize(d)?;
        chrono::DateTime::from_timestamp_millis(ms)
            .map(Slot::at)
            .ok_or_else(|| serde::de::Error::custom("slot out of range"))
    }
}

fn list_key(prefix: &str, job: &str) -> String {
    format!("{prefix}:alerts:{job}")
}

/// Records `alert` on every node (a node that is down misses it; reads merge the others).
/// Never fails the alert: the log is for people and for the next recovery check.
pub async fn record(history: &History, alert: &AlertRecord) {
    let Ok(line) = serde_json::to_string(alert) else {
        return;
    };
    match history {
        History::Redis { nodes, prefix } => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(PUSH_SCRIPT)
                .arg(1)
                .arg(list_key(prefix, &alert.job))
                .arg(line)
                .arg(ALERT_LOG_CAP);
            let writes = nodes
                .query::<i64>(cmd, ALERT_LOG_TIMEOUT, Replies::settled)
                .await;
            for e in writes.errors() {
                tracing::debug!(job = %alert.job, slot = %alert.slot, error = %e, "alert log write missed a node");
            }
        }
        History::Local(store) => {
            let mut lines = store.alert_lines.lock().unwrap_or_else(|p| p.into_inner());
            lines.push_front(line);
            lines.truncate(ALERT_LOG_CAP);
        }
    }
}

/// The newest `limit` alerts of `job`, newest first, merged from a majority of the nodes
/// (fewer is an error: an emptied node alone would hide the last failure).
pub async fn read(
    history: &History,
    job: &str,
    limit: usize,
) -> Result<Vec<AlertRecord>, HistoryUnavailable> {
    let lines = match history {
        History::Redis { nodes, prefix } => {
            read_nodes(nodes, &list_key(prefix, job), limit).await?
        }
        History::Local(store) => {
            let lines = store.alert_lines.lock().unwrap_or_else(|p| p.into_inner());
            lines.iter().cloned().collect()
        }
    };
    let mut alerts: Vec<AlertRecord> = lines
        .iter()
        .filter_map(|line| serde_json::from_str::<AlertRecord>(line).ok())
        .filter(|a| a.job == job)
        .collect();
    alerts.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| a.replica.cmp(&b.replica)));
    alerts.dedup();
    alerts.truncate(limit);
    Ok(alerts)
}

/// The job's last alert (`None`: it never alerted, as far as a majority of nodes keep).
pub async fn last(history: &History, job: &str) -> Result<Option<AlertRecord>, HistoryUnavailable> {
    Ok(read(history, job, 1).await?.into_iter().next())
}

/// Every line of the newest `limit` of the list `key` on a majority of the nodes.
async fn read_nodes(
    nodes: &Arc<Nodes>,
    key: &str,
    limit: usize,
) -> Result<Vec<String>, HistoryUnavailable> {
    let mut cmd = redis::cmd("LRANGE");
    cmd.arg(key).arg(0).arg(limit.max(1) - 1);
    let reads = read_majority::<Vec<String>>(nodes, cmd, ALERT_LOG_TIMEOUT).await?;
    Ok(reads.values().flatten().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(kind: AlertKind, at: i64, replica: &str) -> AlertRecord {
        AlertRecord {
            job: "j".into(),
            kind,
            slot: Slot::at(DateTime::from_timestamp(at, 0).unwrap()),
            replica: replica.into(),
            at: DateTime::from_timestamp(at, 0).unwrap(),
            reason: "r".into(),
        }
    }

    #[tokio::test]
    async fn the_last_alert_is_the_newest_whatever_order_it_was_kept_in() {
        let history = History::local();
        record(&history, &alert(AlertKind::Failed, 20, "a")).await;
        record(&history, &alert(AlertKind::Recovered, 30, "b")).await;
        record(&history, &alert(AlertKind::Deadline, 10, "c")).await;
        let last = last(&history, "j").await.unwrap().unwrap();
        assert_eq!(
            (last.kind, last.replica.as_str()),
            (AlertKind::Recovered, "b")
        );
        let kinds: Vec<AlertKind> = read(&history, "j", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.kind)
            .collect();
        assert_eq!(
            kinds,
            [AlertKind::Recovered, AlertKind::Failed, AlertKind::Deadline]
        );
    }

    #[test]
    fn a_record_reads_back_from_its_line() {
        let a = alert(AlertKind::Deadline, 1_700_000_000, "a");
        let line = serde_json::to_string(&a).unwrap();
        assert!(line.contains(r#""kind":"deadline""#), "{line}");
        assert_eq!(serde_json::from_str::<AlertRecord>(&line).unwrap(), a);
    }
}
