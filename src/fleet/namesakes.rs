//! One name per replica. Replicas started without `--replica-id` take the hostname, so three on
//! one host are all `vm`: they count as one member, rank as one, and each logs `lost the slot to
//! vm`, its own name. The membership's heartbeat ([`super::membership`]) makes that visible:
//! each run of a replica draws a random token, and every heartbeat reads
//! `{key_prefix}:replica:{id}` and then writes `{token}@{fleet-clock ms}` there (kept
//! [`super::membership::MEMBER_TTL`]). A value under another token that was written since this
//! run's first look is another live replica under the same id: each side finds the other's
//! write at its next beat after it, so both say so within a heartbeat period of each other's
//! first beat. What the first look finds is left alone: it may be this replica's own earlier
//! run (SIGKILLed and started again at once), whose value never changes again.

use std::collections::HashSet;
use std::sync::Mutex;

use rand::Rng;

/// This run's token and what it has seen under its id.
pub struct Namesakes {
    me: String,
    /// `{key_prefix}:replica:{id}`.
    key: String,
    /// Drawn at start, so two runs under one id write different values.
    token: String,
    /// What the nodes held and what was warned about. A std mutex: held for a comparison,
    /// never across an await.
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// The other runs' values the first look found (`None`: no look yet): written before this
    /// run started, perhaps by its own earlier run, so they prove nothing.
    before: Option<HashSet<String>>,
    /// The other runs' tokens already warned about: each is said once.
    warned: HashSet<String>,
}

impl Namesakes {
    /// Replica `me`'s token under `prefix`.
    pub fn new(prefix: &str, me: &str) -> Self {
        let token: u64 = crate::seed::rng().random();
        Namesakes {
            me: me.to_owned(),
            key: format!("{prefix}:replica:{me}"),
            token: format!("{token:016x}"),
            seen: Mutex::default(),
        }
    }

    /// The key the heartbeat reads and writes.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value this replica's heartbeat writes at `now_ms` (the fleet clock's time): a new
    /// value at every beat, so a live writer is told from a value left behind.
    pub fn value(&self, now_ms: i64) -> String {
        format!("{}@{now_ms}", self.token)
    }

    /// Judges what the nodes held under the id before this beat's write, and warns once about
    /// each other live run found.
    pub fn look<'a>(&self, found: impl Iterator<Item = &'a String>) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for other in seen.newly_live(&self.token, found) {
            tracing::warn!(replica = %self.me, token = %self.token, other = %other,
                "another live replica heartbeats under this replica's id: give each replica its \
                own --replica-id (SLOTCRON_REPLICA_ID); until then the fleet counts them as \
                one, and `lost the slot to` this id can name either");
        }
    }
}

impl Seen {
    /// The tokens of other runs whose values are new since the first look and not warned
    /// about yet; the first look only records what it finds.
    fn newly_live<'a>(
        &mut self,
        mine: &str,
        found: impl Iterator<Item = &'a String>,
    ) -> Vec<String> {
        let others = found.filter(|value| token_of(value) != mine);
        let Some(before) = &self.before else {
            self.before = Some(others.cloned().collect());
            return Vec::new();
        };
        let live: Vec<String> = others
            .filter(|value| !before.contains(*value))
            .map(|value| token_of(value).to_owned())
            .collect();
        live.into_iter()
            .filter(|token| self.warned.insert(token.clone()))
            .collect()
    }
}

/// The token part of a stored value (`{token}@{ms}`).
fn token_of(value: &str) -> &str {
    value.split_once('@').map_or(value, |(token, _)| token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_value_left_before_the_first_look_is_not_a_namesake() {
        let mut seen = Seen::default();
        let old = values(&["old@1"]);
        assert!(seen.newly_live("me", old.iter()).is_empty());
        assert!(
            seen.newly_live("me", old.iter()).is_empty(),
            "it never changes"
        );
        assert!(seen.newly_live("me", values(&["me@5"]).iter()).is_empty());
    }

    #[test]
    fn another_run_writing_after_the_first_look_is_said_once() {
        let mut seen = Seen::default();
        assert!(seen.newly_live("me", values(&["me@1"]).iter()).is_empty());
        let first = values(&["twin@2", "twin@2"]);
        assert_eq!(seen.newly_live("me", first.iter()), vec!["twin"]);
        assert!(seen.newly_live("me", values(&["twin@3"]).iter()).is_empty());
        assert_eq!(
            seen.newly_live("me", values(&["third@4"]).iter()),
            vec!["third"]
        );
    }

    #[test]
    fn a_live_namesake_found_at_the_first_look_is_said_at_its_next_write() {
        let mut seen = Seen::default();
        assert!(seen.newly_live("me", values(&["twin@1"]).iter()).is_empty());
        assert_eq!(
            seen.newly_live("me", values(&["twin@2"]).iter()),
            vec!["twin"]
        );
    }
}
