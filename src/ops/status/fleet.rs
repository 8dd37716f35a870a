//! The fleet as the status page sees it: every replica the fleet knows of, with its share of
//! the wins: the replicas behind the runs read, and the live replicas of the membership view
//! (heartbeats, see [`crate::fleet::membership`]), where one that is up but has won nothing shows at
//! 0 %.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::record::history::RunRecord;

/// One replica's line in the fleet table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Share {
    /// Its replica id, as in the run records.
    pub replica: String,
    /// Runs it won among those read (a handed-off slot counts for both winners).
    pub wins: usize,
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
    let mut wins: BTreeMap<&str, usize> = live.iter().map(|r| (r.as_str(), 0)).collect();
    for record in records {
        *wins.entry(record.replica.as_str()).or_default() += 1;
    }
    let total: usize = wins.values().sum();
    let mut shares: Vec<Share> = wins
        .into_iter()
        .map(|(replica, wins)| Share {
            replica: replica.to_owned(),
            wins,
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
    fn no_runs_no_shares() {
        assert!(fleet(&[], &[], "a").is_empty());
    }
}
