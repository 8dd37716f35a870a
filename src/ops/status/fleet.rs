//! The fleet as the status page sees it: every replica the fleet knows of, with its share of
//! the wins (runs that ended `done`): the replicas behind the runs read, and the live replicas
//! of the membership view (heartbeats, see [`crate::fleet::membership`]), where one that is up
//! but has won nothing shows at 0 %. The runs started from the CLI are counted apart, so a
//! workstation that ran `slotcron trigger` shows as what it is.

use std::collections::BTreeMap;

use serde::Serialize;

use super::words::from_cli;
use crate::record::history::{RunRecord, RunState};

/// One replica's line in the fleet table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Share {
    /// Its replica id, as in the run records.
    pub replica: String,
    /// Runs it ran to `done` among those read: a failed or handed-off run is no win.
    pub wins: usize,
    /// Runs it ran that were started from the CLI (`slotcron trigger`), whatever their end.
    pub from_cli: usize,
    /// Its share of those runs, in whole percent.
    pub percent: u32,
    /// The replica serving the page.
    pub this: bool,
    /// In the serving replica's membership view now (heartbeating).
    pub live: bool,
}

/// The replicas behind `records` and in `live`, most wins first (then by name), with their
/// share of the wins; `me` is marked.
pub fn fleet<'a>(
    records: impl IntoIterator<Item = &'a RunRecord>,
    live: &[String],
    me: &str,
) -> Vec<Share> {
    // Per replica: (wins, runs started from the CLI).
    let mut counts: BTreeMap<&str, (usize, usize)> =
        live.iter().map(|r| (r.as_str(), (0, 0))).collect();
    for record in records {
        let count = counts.entry(record.replica.as_str()).or_default();
        count.0 += usize::from(record.outcome == RunState::Done);
        count.1 += usize::from(from_cli(record));
    }
    let total: usize = counts.values().map(|(wins, _)| wins).sum();
    let mut shares: Vec<Share> = counts
        .into_iter()
        .map(|(replica, (wins, from_cli))| Share {
            replica: replica.to_owned(),
            wins,
            from_cli,
            percent: percent(wins, total),
            this: replica == me,
            live: live.iter().any(|l| l == replica),
        })
        .collect();
    shares.sort_by(|a, b| b.wins.cmp(&a.wins).then_with(|| a.replica.cmp(&b.replica)));
    shares
}

/// `part` of `total` in whole percent, rounded to nearest (0 of nothing is 0 %).
fn percent(part: usize, total: usize) -> u32 {
    if total == 0 {
        return 0;
    }
    ((part as f64 * 100.0 / total as f64).round()) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::RunState;
    use crate::time::schedule::Slot;
    use chrono::DateTime;

    fn won_by(replica: &str, s: i64) -> RunRecord {
        let slot = Slot::at(DateTime::from_timestamp(s, 0).unwrap());
        RunRecord::test("j", slot, replica, RunState::Done)
    }

    #[test]
    fn shares_of_the_wins_most_first_this_replica_marked() {
        let runs = [won_by("b", 1), won_by("a", 2), won_by("b", 3)];
        let shares = fleet(&runs, &[], "a");
        let lines: Vec<(&str, usize, u32, bool)> = shares
            .iter()
            .map(|s| (s.replica.as_str(), s.wins, s.percent, s.this))
            .collect();
        assert_eq!(lines, vec![("b", 2, 67, false), ("a", 1, 33, true)]);
    }

    #[test]
    fn a_live_replica_without_wins_shows_at_zero() {
        let shares = fleet(&[won_by("a", 1)], &["a".into(), "c".into()], "c");
        assert_eq!(shares[0].percent, 100);
        assert_eq!((shares[1].replica.as_str(), shares[1].percent), ("c", 0));
        assert!(shares[1].this);
        assert!(shares.iter().all(|s| s.live), "both are in the live list");
        assert!(!fleet(&[won_by("gone", 1)], &[], "c")[0].live);
    }

    #[test]
    fn only_done_runs_are_wins_and_cli_runs_are_counted_apart() {
        let failed = RunRecord::test("j", won_by("a", 1).slot, "a", RunState::Failed);
        let handed = RunRecord::test("j", won_by("a", 2).slot, "a", RunState::HandedOff);
        let manual = RunRecord {
            trigger: "trigger".into(),
            ..won_by("laptop", 3)
        };
        let shares = fleet(&[failed, handed, won_by("b", 2), manual], &[], "b");
        let lines: Vec<(&str, usize, usize, u32)> = shares
            .iter()
            .map(|s| (s.replica.as_str(), s.wins, s.from_cli, s.percent))
            .collect();
        assert_eq!(
            lines,
            vec![("b", 1, 0, 50), ("laptop", 1, 1, 50), ("a", 0, 0, 0)]
        );
    }

    #[test]
    fn no_runs_no_shares() {
        assert!(fleet(&[], &[], "a").is_empty());
    }
}
