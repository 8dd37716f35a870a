//! One fleet per prefix, visibly. Two deployments that share Redis nodes and a `key_prefix`
//! (staging and production both left at the default) and both have a job of one name race for
//! the same slot keys: each runs about half of the other's slots, and both ledgers say `done`.
//!
//! So every replica writes, every [`PERIOD`], which deployment it belongs to
//! ([`crate::config::deployment::Deployment`]: named, or derived from the environment the file
//! names) and where each of its jobs sends (a fingerprint of the unredacted destination,
//! [`crate::action::Action::destination_fingerprint`]) into one hash per prefix on every node
//! (`{key_prefix}:destinations`, a field per replica), and reads the others'. Another live
//! replica of another deployment, or one that sends a job of the same name somewhere else, is
//! normal for the length of a rollout that changes either; past `[scheduler]
//! destination_conflict_after` it is logged as an error naming both replicas and the prefix,
//! until it ends. The deployments are compared whatever the jobs' actions (`log`, `command`, a
//! library function send nowhere a fingerprint can tell apart).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::config::deployment::Deployment;
use crate::redis::{Nodes, Replies};
use crate::time::schedule::SharedClock;

/// How often a replica writes its destinations and compares the others'.
pub const PERIOD: Duration = Duration::from_secs(5);
/// An entry older than this is a replica that left: ignored.
const STALE_AFTER: Duration = Duration::from_secs(30);
/// Bound on one node's answer.
const TIMEOUT: Duration = Duration::from_millis(500);

/// One replica's entry: when it wrote it (ms since the epoch), each job's fingerprint and its
/// deployment (absent from the entries of replicas older than the comparison: not compared).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Published {
    at: i64,
    jobs: BTreeMap<String, String>,
    #[serde(default)]
    deployment: Option<Deployment>,
    /// Every job's name, whatever its action (to name the jobs two deployments share).
    #[serde(default)]
    names: BTreeSet<String>,
}

/// Each job's destination fingerprint in `config` (jobs that send nowhere are left out).
fn fingerprints(config: &Config) -> BTreeMap<String, String> {
    config
        .jobs
        .iter()
        .filter_map(|j| Some((j.name.clone(), j.action.destination_fingerprint()?)))
        .collect()
}

/// What a replica compares: its deployment, its own jobs' fingerprints, and how long a
/// difference may last.
pub struct Own {
    /// `[scheduler] deployment`, named or derived.
    pub deployment: Deployment,
    /// Each job's fingerprint.
    pub jobs: BTreeMap<String, String>,
    /// Every job's name.
    pub names: BTreeSet<String>,
    /// `[scheduler] destination_conflict_after`.
    pub after: Duration,
}

impl Own {
    /// What a replica running `config` compares.
    pub fn of(config: &Config) -> Self {
        Own {
            deployment: config.scheduler.deployment.clone(),
            jobs: fingerprints(config),
            names: config.jobs.iter().map(|j| j.name.clone()).collect(),
            after: config.scheduler.destination_conflict_after,
        }
    }
}

/// Writes and compares until `shutdown`; `own` gives the current configuration's view.
pub async fn keep_comparing(
    nodes: Arc<Nodes>,
    (prefix, replica): (String, String),
    clock: SharedClock,
    own: impl Fn() -> Own,
    shutdown: CancellationToken,
) {
    let key = format!("{prefix}:destinations");
    let mut since: HashMap<Clash, Instant> = HashMap::new();
    let mut reported: HashSet<Clash> = HashSet::new();
    let mut period = tokio::time::interval(PERIOD);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = period.tick() => {}
        }
        let own = own();
        let others = exchange(&nodes, &key, (&replica, clock.now()), &own).await;
        let now = Instant::now();
        let current = conflicts(&own, &others);
        since.retain(|k, _| current.contains_key(k));
        reported.retain(|k| current.contains_key(k));
        for (clash, theirs) in current {
            let first = *since.entry(clash.clone()).or_insert(now);
            if now.duration_since(first) >= own.after && reported.insert(clash.clone()) {
                report(&prefix, &replica, &clash, &own, &theirs);
            }
        }
    }
}

/// Writes this replica's entry on every node and returns the other live replicas' entries.
async fn exchange(
    nodes: &Nodes,
    key: &str,
    (replica, now): (&str, DateTime<Utc>),
    own: &Own,
) -> HashMap<String, Published> {
    let now_ms = now.timestamp_millis();
    let entry = Published {
        at: now_ms,
        jobs: own.jobs.clone(),
        deployment: Some(own.deployment.clone()),
        names: own.names.clone(),
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

/// A difference between this replica and another on the prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Clash {
    /// The other replica belongs to another deployment.
    Deployment {
        /// The other replica.
        other: String,
    },
    /// The other replica sends `job` somewhere else.
    Destination {
        /// The job of the same name.
        job: String,
        /// The other replica.
        other: String,
    },
}

/// The differences from the other live replicas, each with the other's entry.
fn conflicts(own: &Own, others: &HashMap<String, Published>) -> HashMap<Clash, Published> {
    let mut found = HashMap::new();
    for (replica, entry) in others {
        if entry
            .deployment
            .as_ref()
            .is_some_and(|d| *d != own.deployment)
        {
            let clash = Clash::Deployment {
                other: replica.clone(),
            };
            found.insert(clash, entry.clone());
        }
        for (job, theirs) in &entry.jobs {
            if own.jobs.get(job).is_some_and(|mine| mine != theirs) {
                let clash = Clash::Destination {
                    job: job.clone(),
                    other: replica.clone(),
                };
                found.insert(clash, entry.clone());
            }
        }
    }
    found
}

fn report(prefix: &str, replica: &str, clash: &Clash, own: &Own, theirs: &Published) {
    match clash {
        Clash::Deployment { other } => report_deployment(prefix, replica, other, own, theirs),
        Clash::Destination { job, other } => {
            let mine = own.jobs.get(job).map_or("", String::as_str);
            let theirs = theirs.jobs.get(job).map_or("", String::as_str);
            report_destination(prefix, replica, other, job, (mine, theirs));
        }
    }
}

fn report_deployment(prefix: &str, replica: &str, other: &str, own: &Own, theirs: &Published) {
    let Some(deployment) = &theirs.deployment else {
        return;
    };
    let shared: Vec<&String> = own.names.intersection(&theirs.names).collect();
    let difference = own.deployment.difference(deployment);
    tracing::error!(
        replica = %replica,
        other_replica = %other,
        key_prefix = %prefix,
        deployment = %own.deployment,
        other_deployment = %deployment,
        difference = %difference,
        jobs = ?shared,
        "replicas {replica} and {other} share key_prefix {prefix:?} but belong to different \
        deployments ({difference}): jobs of one name race for each other's slots, so each runs \
        about half of them; give each deployment its own key_prefix (or the same [scheduler] \
        deployment if they are one)"
    );
}

fn report_destination(
    prefix: &str,
    replica: &str,
    other: &str,
    job: &str,
    (mine, theirs): (&str, &str),
) {
    tracing::error!(
        job = %job,
        replica = %replica,
        other_replica = %other,
        key_prefix = %prefix,
        destination = mine,
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

    fn named(name: &str) -> Deployment {
        Deployment::Named(name.to_owned())
    }

    fn own(pairs: &[(&str, &str)], deployment: Deployment) -> Own {
        Own {
            deployment,
            jobs: jobs(pairs),
            names: pairs.iter().map(|(j, _)| (*j).to_owned()).collect(),
            after: Duration::ZERO,
        }
    }

    fn entry(own: Own, published: bool) -> Published {
        Published {
            at: 0,
            jobs: own.jobs,
            deployment: published.then_some(own.deployment),
            names: own.names,
        }
    }

    fn clashes(found: HashMap<Clash, Published>) -> HashSet<Clash> {
        found.into_keys().collect()
    }

    #[test]
    fn only_a_job_of_the_same_name_sent_elsewhere_conflicts() {
        let prod = || named("prod");
        let mine = own(&[("standup", "aa"), ("report", "bb")], prod());
        let others = HashMap::from([
            (
                "staging".to_owned(),
                entry(own(&[("standup", "cc"), ("report", "bb")], prod()), true),
            ),
            (
                "other".to_owned(),
                entry(own(&[("cleanup", "dd")], prod()), true),
            ),
        ]);
        let expected = Clash::Destination {
            job: "standup".into(),
            other: "staging".into(),
        };
        assert_eq!(
            clashes(conflicts(&mine, &others)),
            HashSet::from([expected])
        );
    }

    #[test]
    fn another_deployment_conflicts_whatever_its_jobs_send() {
        // `log` and function jobs have no destination fingerprint: only their names.
        let mine = Own {
            names: BTreeSet::from(["backup".to_owned()]),
            ..own(&[], named("production"))
        };
        let staging = Published {
            names: mine.names.clone(),
            ..entry(own(&[], named("staging")), true)
        };
        let before_the_check = entry(own(&[], named("staging")), false);
        let others = HashMap::from([
            ("staging-1".to_owned(), staging),
            ("old-1".to_owned(), before_the_check),
        ]);
        let expected = Clash::Deployment {
            other: "staging-1".into(),
        };
        assert_eq!(
            clashes(conflicts(&mine, &others)),
            HashSet::from([expected])
        );
    }
}
