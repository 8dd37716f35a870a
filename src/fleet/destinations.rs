//! One fleet per prefix, visibly. Two deployments that share Redis nodes and a `key_prefix`
//! (staging and production both left at the default) and both have a job of one name race for
//! the same slot keys: each runs about half of the other's slots, and both ledgers say `done`.
//!
//! So every replica writes, every [`PERIOD`], where each of its jobs sends (a fingerprint of
//! the unredacted destination, [`crate::action::Action::destination_fingerprint`]) into one hash
//! per prefix on every node (`{key_prefix}:destinations`, a field per replica), and reads the
//! others'. A job of the same name that another live replica sends somewhere else is normal for
//! the length of a rollout that changes the webhook; past `[scheduler]
//! destination_conflict_after` it is logged as an error naming both replicas, the job and the
//! prefix, until it ends.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::redis::{Nodes, Replies};

/// How often a replica writes its destinations and compares the others'.
pub const PERIOD: Duration = Duration::from_secs(5);
/// An entry older than this is a replica that left: ignored.
const STALE_AFTER: Duration = Duration::from_secs(30);
/// Bound on one node's answer.
const TIMEOUT: Duration = Duration::from_millis(500);

/// One replica's entry: when it wrote it (ms since the epoch) and each job's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Published {
    at: i64,
    jobs: BTreeMap<String, String>,
}

/// Each job's destination fingerprint in `config` (jobs that send nowhere are left out).
pub fn fingerprints(config: &Config) -> BTreeMap<String, String> {
    config
        .jobs
        .iter()
        .filter_map(|j| Some((j.name.clone(), j.action.destination_fingerprint()?)))
        .collect()
}

/// What a replica compares: its own jobs' fingerprints, and how long a difference may last.
pub struct Own {
    /// Each job's fingerprint.
    pub jobs: BTreeMap<String, String>,
    /// `[scheduler] destination_conflict_after`.
    pub after: Duration,
}

/// Writes and compares until `shutdown`; `own` gives the current configuration's view.
pub async fn keep_comparing(
    nodes: Arc<Nodes>,
    prefix: String,
    replica: String,
    own: impl Fn() -> Own,
    shutdown: CancellationToken,
) {
    let key = format!("{prefix}:destinations");
    let mut since: HashMap<(String, String), Instant> = HashMap::new();
    let mut reported: HashSet<(String, String)> = HashSet::new();
    let mut period = tokio::time::interval(PERIOD);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = period.tick() => {}
        }
        let own = own();
        let others = exchange(&nodes, &key, &replica, &own.jobs).await;
        let now = Instant::now();
        let current = conflicts(&own.jobs, &others);
        since.retain(|k, _| current.contains_key(k));
        reported.retain(|k| current.contains_key(k));
        for (conflict, theirs) in current {
            let first = *since.entry(conflict.clone()).or_insert(now);
            if now.duration_since(first) >= own.after && reported.insert(conflict.clone()) {
                report(&prefix, &replica, &conflict, &own.jobs, &theirs);
            }
        }
    }
}

/// Writes this replica's entry on every node and returns the other live replicas' entries.
async fn exchange(
    nodes: &Nodes,
    key: &str,
    replica: &str,
    jobs: &BTreeMap<String, String>,
) -> HashMap<String, Published> {
    let now_ms = Utc::now().timestamp_millis();
    let entry = Published {
        at: now_ms,
        jobs: jobs.clone(),
    };
    let mut pipe = redis::pipe();
    pipe.hset(
        key,
        replica,
        serde_json::to_string(&entry).unwrap_or_default(),
    )
    .ignore()
    .hgetall(key);
    let pipe = Arc::new(pipe);
    let replies = nodes
        .ask(
            |node| {
                let pipe = pipe.clone();
                async move {
                    node.query_pipe::<(HashMap<String, String>,)>(&pipe, TIMEOUT)
                        .await
                }
            },
            Replies::settled,
        )
        .await;
    let stale_before = now_ms - STALE_AFTER.as_millis() as i64;
    let (others, stale) = live_entries(replies.values(), replica, stale_before);
    forget(nodes, key, &stale).await;
    others
}

/// The other replicas' newest entries written since `stale_before`, and the names of those
/// whose entries are all older (they left).
fn live_entries<'a>(
    nodes: impl Iterator<Item = &'a (HashMap<String, String>,)>,
    replica: &str,
    stale_before: i64,
) -> (HashMap<String, Published>, HashSet<String>) {
    let mut others: HashMap<String, Published> = HashMap::new();
    let mut stale: HashSet<String> = HashSet::new();
    for (fields,) in nodes {
        for (name, text) in fields.iter().filter(|(name, _)| *name != replica) {
            let Ok(entry) = serde_json::from_str::<Published>(text) else {
                continue;
            };
            let newer = others.get(name).is_none_or(|e| e.at < entry.at);
            if entry.at < stale_before {
                stale.insert(name.clone());
            } else if newer {
                others.insert(name.clone(), entry);
            }
        }
    }
    stale.retain(|name| !others.contains_key(name));
    (others, stale)
}

/// Deletes the entries of replicas that left (pod names change at every deploy: the hash
/// would grow without end).
async fn forget(nodes: &Nodes, key: &str, left: &HashSet<String>) {
    if left.is_empty() {
        return;
    }
    let mut cmd = redis::cmd("HDEL");
    cmd.arg(key);
    for name in left {
        cmd.arg(name);
    }
    nodes
        .query::<redis::Value>(cmd, TIMEOUT, Replies::settled)
        .await;
}

/// The (job, other replica) pairs whose fingerprints differ, with the other's fingerprint.
fn conflicts(
    own: &BTreeMap<String, String>,
    others: &HashMap<String, Published>,
) -> HashMap<(String, String), String> {
    let mut found = HashMap::new();
    for (replica, entry) in others {
        for (job, theirs) in &entry.jobs {
            if own.get(job).is_some_and(|mine| mine != theirs) {
                found.insert((job.clone(), replica.clone()), theirs.clone());
            }
        }
    }
    found
}

fn report(
    prefix: &str,
    replica: &str,
    (job, other): &(String, String),
    own: &BTreeMap<String, String>,
    theirs: &str,
) {
    tracing::error!(
        job = %job,
        replica = %replica,
        other_replica = %other,
        key_prefix = %prefix,
        destination = own.get(job).map_or("", String::as_str),
        other_destination = theirs,
        "replicas {replica} and {other} share key_prefix {prefix:?} but send job {job:?} to \
        different destinations: they race for each other's slots, so each runs about half of \
        them; give each deployment its own key_prefix"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(j, f)| ((*j).to_owned(), (*f).to_owned()))
            .collect()
    }

    #[test]
    fn only_a_job_of_the_same_name_sent_elsewhere_conflicts() {
        let own = jobs(&[("standup", "aa"), ("report", "bb")]);
        let others = HashMap::from([
            (
                "staging".to_owned(),
                Published {
                    at: 0,
                    jobs: jobs(&[("standup", "cc"), ("report", "bb")]),
                },
            ),
            (
                "other".to_owned(),
                Published {
                    at: 0,
                    jobs: jobs(&[("cleanup", "dd")]),
                },
            ),
        ]);
        let found = conflicts(&own, &others);
        assert_eq!(
            found,
            HashMap::from([(
                ("standup".to_owned(), "staging".to_owned()),
                "cc".to_owned()
            )])
        );
    }
}
