//! The watermark: per job, when the fleet first scheduled it with `catch_up` set (recorded at
//! every start, and at a reload, where none is recorded yet). Catch-up
//! never reaches before it, so a first deploy, whose history is empty, replays nothing: the
//! slots before the fleet existed were owed to nobody.
//!
//! Kept like the history: on every Redis node, under `{key_prefix}:{job}:first_seen` (ms since
//! the epoch, written once with SET NX and never expiring), and read back from every node. A
//! node restarted empty takes the time of the next start; the watermark is the earliest time a
//! majority of nodes agree the job existed at, so a minority of emptied nodes changes nothing
//! and a majority of them makes it a first deploy again (no catch-up: safety over liveness).
//! Standalone mode keeps its history in the process, so its watermark is the process's start.
//!
//! A job's schedule has a watermark of its own, under
//! `{key_prefix}:{job}:first_seen:{definition}` (the definition's XXH3, in hex; kept and read
//! the same way), and the job's watermark is the later of the two. A rollout that moves a job
//! to another schedule (every 2 s to every second) must not have the new version's first start
//! catch up, or report missed, the slots the old schedule never had: the fleet owed those to
//! nobody. A schedule rolled back to keeps its old mark, so its catch-up can reach into the
//! time the other schedule ran (bounded by `catch_up`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::record::history::History;
use crate::redis::{Node, NodeError};
use crate::redis::{Replies, quorum};

/// Bound on one node's answer (at start, not on the race path).
const WATERMARK_TIMEOUT: Duration = Duration::from_millis(500);

/// Sets each watermark (`KEYS`) the node has none of to `ARGV[1]`, and returns them all.
const FIRST_SEEN_SCRIPT: &str = "for _, key in ipairs(KEYS) do redis.call('SET', key, ARGV[1], 'NX') end \
    return redis.call('MGET', unpack(KEYS))";
/// Most keys one script sets: Lua's `unpack` takes a few thousand values at most.
const SCRIPT_KEYS: usize = 500;

/// Fewer than a majority of nodes answered: catch-up cannot tell what the fleet missed.
#[derive(Debug, thiserror::Error)]
#[error("{answered} of {nodes} Redis node(s) answered the watermark read, fewer than a majority")]
pub struct WatermarkUnavailable {
    /// Nodes that answered.
    pub answered: usize,
    /// Nodes in the pool.
    pub nodes: usize,
}

/// The key of `job`'s watermark.
pub fn key(prefix: &str, job: &str) -> String {
    format!("{prefix}:{job}:first_seen")
}

/// The key of the watermark of `job`'s schedule `definition`
/// ([`Schedule::definition`](crate::time::schedule::Schedule::definition)).
pub fn definition_key(prefix: &str, job: &str, definition: &str) -> String {
    let hash = xxhash_rust::xxh3::xxh3_64(definition.as_bytes());
    format!("{}:{hash:016x}", key(prefix, job))
}

/// Records `now` as the time the fleet first scheduled each job of `jobs` (name, schedule
/// definition), and that schedule of it, where no time is recorded yet, and returns the fleet's
/// watermark of each, in order: the later of the two. One `MGET` per node for all of them (a
/// replica's start asks this for every job at once), and, on a node that lacks some, one script
/// that sets those (`SET NX`) and reads them back.
pub async fn first_seen(
    history: &History,
    jobs: &[(&str, &str)],
    now: DateTime<Utc>,
) -> Vec<Result<DateTime<Utc>, WatermarkUnavailable>> {
    let History::Redis { prefix, .. } = history else {
        return jobs.iter().map(|_| Ok(now)).collect();
    };
    let keys = jobs.iter().map(|(job, _)| key(prefix, job));
    let definitions = jobs
        .iter()
        .map(|(job, definition)| definition_key(prefix, job, definition));
    let mut by_job = first_seen_keys(history, keys.chain(definitions).collect(), now).await;
    let by_definition = by_job.split_off(jobs.len());
    by_job
        .into_iter()
        .zip(by_definition)
        .map(|(job, definition)| Ok(job?.max(definition?)))
        .collect()
}

/// [`first_seen`] of each of `keys`: the majority's time, `now` set first where none is.
async fn first_seen_keys(
    history: &History,
    keys: Arc<[String]>,
    now: DateTime<Utc>,
) -> Vec<Result<DateTime<Utc>, WatermarkUnavailable>> {
    let History::Redis { nodes, .. } = history else {
        return keys.iter().map(|_| Ok(now)).collect();
    };
    // Every node that is up, by the pool's rule (a suspect node is not waited for).
    let replies = nodes
        .ask(
            |node| set_and_get(node, keys.clone(), now),
            Replies::settled,
        )
        .await;
    let per_node: Vec<&Vec<Option<i64>>> = replies.values().collect();
    (0..keys.len())
        .map(|j| {
            let values: Vec<i64> = per_node
                .iter()
                .filter_map(|v| v.get(j).copied().flatten())
                .collect();
            let unavailable = WatermarkUnavailable {
                answered: values.len(),
                nodes: nodes.len(),
            };
            majority_watermark(values, nodes.len())
                .and_then(DateTime::from_timestamp_millis)
                .ok_or(unavailable)
        })
        .collect()
}

/// The fleet's watermark of `job` as recorded, without recording one (`None`: never scheduled,
/// standalone, or fewer than a majority of nodes answered).
pub async fn recorded(history: &History, job: &str) -> Option<DateTime<Utc>> {
    let History::Redis { nodes, prefix } = history else {
        return None;
    };
    let mut cmd = redis::cmd("GET");
    cmd.arg(key(prefix, job));
    let replies = nodes
        .query::<Option<String>>(cmd, WATERMARK_TIMEOUT, Replies::settled)
        .await;
    let values: Vec<i64> = replies
        .values()
        .map(|v| {
            v.as_deref()
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(i64::MAX)
        })
        .collect();
    majority_watermark(values, nodes.len())
        .filter(|&ms| ms != i64::MAX)
        .and_then(DateTime::from_timestamp_millis)
}

/// Sets the watermark of `job` to the fleet's (the majority's) on every node that answered
/// without one or with a later one: a node restarted empty takes the time a replica next
/// starts, and two such nodes would make the fleet forget when it first scheduled the job.
pub async fn repair(history: &History, job: &str) {
    let History::Redis { nodes, prefix } = history else {
        return;
    };
    let key = key(prefix, job);
    let mut cmd = redis::cmd("GET");
    cmd.arg(&key);
    let replies = nodes
        .query::<Option<String>>(cmd, WATERMARK_TIMEOUT, Replies::settled)
        .await;
    let held: Vec<Option<i64>> = replies
        .answers()
        .iter()
        .map(|a| match a {
            Some(Ok(v)) => Some(
                v.as_deref()
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or(i64::MAX),
            ),
            _ => None,
        })
        .collect();
    let Some(fleet) = majority_watermark(held.iter().flatten().copied().collect(), nodes.len())
        .filter(|&ms| ms != i64::MAX)
    else {
        return;
    };
    for (i, value) in held.iter().enumerate() {
        if value.is_some_and(|v| v > fleet) {
            tracing::info!(
                job,
                node = i,
                "watermark repaired onto a node that lacked it"
            );
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(fleet);
            let _ = nodes
                .ask_one(i, |node| async move {
                    node.query::<redis::Value>(&set, WATERMARK_TIMEOUT).await
                })
                .await;
        }
    }
}

/// One node's watermark of each of `keys`, setting the missing ones to `now` first.
async fn set_and_get(
    node: Arc<Node>,
    keys: Arc<[String]>,
    now: DateTime<Utc>,
) -> Result<Vec<Option<i64>>, NodeError> {
    let mut mget = redis::cmd("MGET");
    mget.arg(&*keys);
    let mut held: Vec<Option<String>> = node.query(&mget, WATERMARK_TIMEOUT).await?;
    let missing: Vec<usize> = (0..keys.len()).filter(|&i| held[i].is_none()).collect();
    for chunk in missing.chunks(SCRIPT_KEYS) {
        let mut script = redis::cmd("EVAL");
        script.arg(FIRST_SEEN_SCRIPT).arg(chunk.len());
        for &i in chunk {
            script.arg(&keys[i]);
        }
        script.arg(now.timestamp_millis());
        let set: Vec<Option<String>> = node.query(&script, WATERMARK_TIMEOUT).await?;
        for (&i, value) in chunk.iter().zip(set) {
            held[i] = value;
        }
    }
    Ok(held
        .into_iter()
        .map(|v| v.and_then(|ms| ms.parse().ok()))
        .collect())
}

/// The earliest time a majority of the `nodes` hold a watermark at or before: the
/// majority-th smallest of the values. `None` when fewer than a majority answered.
fn majority_watermark(mut values: Vec<i64>, nodes: usize) -> Option<i64> {
    let majority = quorum(nodes);
    if values.len() < majority {
        return None;
    }
    values.sort_unstable();
    values.get(majority - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minority_of_emptied_nodes_keeps_the_old_watermark() {
        assert_eq!(majority_watermark(vec![100, 100, 900], 3), Some(100));
        assert_eq!(majority_watermark(vec![900, 100, 100], 3), Some(100));
    }

    #[test]
    fn a_majority_of_emptied_nodes_makes_it_a_first_deploy() {
        assert_eq!(majority_watermark(vec![100, 900, 900], 3), Some(900));
    }

    #[test]
    fn fewer_than_a_majority_of_answers_cannot_tell() {
        assert_eq!(majority_watermark(vec![100], 3), None);
        assert_eq!(majority_watermark(vec![100, 100], 3), Some(100));
        assert_eq!(majority_watermark(vec![100, 100], 5), None);
        assert_eq!(majority_watermark(vec![5], 1), Some(5));
    }
}
