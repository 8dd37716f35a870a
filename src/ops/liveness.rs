//! The timeline's watchdog, behind `/healthz`: the timeline says when it means to wake next,
//! and notes each wake; the process is live while it is not overdue. A task that panicked, a
//! starved runtime, or a wall clock that stopped (the timeline sleeping again and again for a
//! slot that never comes) all leave the HTTP server answering, and all fail this check. So does
//! a wall clock stepped back by more than [`WAKE_GRACE`], until the timeline reaches its slot:
//! the deadline is set once per slot, on the monotonic clock, and such a replica is late.
//!
//! The races are watched too, for `/readyz`: a replica whose races find no majority of the
//! nodes, slot after slot, cannot race, even when every node answers its PING (a node out of
//! memory refuses the lock's writes and still answers; so does one whose ACL forbids the
//! scripts).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long past its wake-up deadline the timeline may be before `/healthz` fails. A wake is
/// a timer firing and a few pushes onto a heap; seconds late means the loop is stuck. Kept
/// short so a wedged replica fails within one missed slot of a job running every few seconds.
pub const WAKE_GRACE: Duration = Duration::from_secs(2);
/// Instants in a row whose races all found no majority before `/readyz` fails: one outage of
/// a node timeout is a blip the next slot survives; three in a row is a replica that cannot
/// race.
pub const UNREADY_AFTER: u32 = 3;

/// What the timeline last reported. Monotonic instants: a wall-clock step is not a wedge.
#[derive(Debug, Default)]
pub struct Liveness {
    /// A std mutex: held for a copy, never across an await.
    state: Mutex<State>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// When the timeline means to wake for its next slot; `None` while it runs a wake, or when
    /// no job has a further slot.
    deadline: Option<Instant>,
    last_wake: Option<Instant>,
    /// Instants in a row whose races all found no majority, and when the first of them ended.
    no_majority: Option<(u32, Instant)>,
}

/// How the races of one instant went, as readiness counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raced {
    /// At least one race reached the lock's verdict (won or lost): the replica can race.
    Verdict,
    /// Every race found no majority of the nodes.
    NoMajority,
}

/// Races that found no majority, instant after instant, since `since` ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CannotRace {
    /// Instants in a row (at least [`UNREADY_AFTER`]).
    pub instants: u32,
    /// Since the first of them.
    pub since: Duration,
}

/// The watchdog's verdict at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Health {
    /// Sleeping towards a slot due in `due_in` (zero if due already, within the grace).
    Waiting {
        /// Until the slot is due.
        due_in: Duration,
        /// Since the timeline last woke, if it has.
        last_wake: Option<Duration>,
    },
    /// No timeline deadline: between a wake and the next sleep, or no job has a further slot.
    Idle {
        /// Since the timeline last woke, if it has.
        last_wake: Option<Duration>,
    },
    /// The timeline should have woken `late` ago (more than [`WAKE_GRACE`]) and has not.
    Overdue {
        /// How long overdue.
        late: Duration,
    },
}

impl Health {
    /// Whether `/healthz` answers 200.
    pub fn is_live(&self) -> bool {
        !matches!(self, Health::Overdue { .. })
    }
}

impl Liveness {
    /// The timeline goes to sleep until `deadline`.
    pub fn sleeping_until(&self, deadline: Instant) {
        self.lock().deadline = Some(deadline);
    }

    /// The timeline woke for its slot.
    pub fn woke(&self) {
        let mut state = self.lock();
        state.deadline = None;
        state.last_wake = Some(Instant::now());
    }

    /// The races of one instant ended as `raced`.
    pub fn raced(&self, raced: Raced) {
        let mut state = self.lock();
        state.no_majority = match (raced, state.no_majority) {
            (Raced::Verdict, _) => None,
            (Raced::NoMajority, None) => Some((1, Instant::now())),
            (Raced::NoMajority, Some((n, first))) => Some((n + 1, first)),
        };
    }

    /// `Some` once [`UNREADY_AFTER`] instants in a row raced without a majority, until one
    /// reaches a verdict.
    pub fn cannot_race(&self, now: Instant) -> Option<CannotRace> {
        let (instants, first) = self.lock().no_majority?;
        (instants >= UNREADY_AFTER).then(|| CannotRace {
            instants,
            since: now.saturating_duration_since(first),
        })
    }

    /// The verdict at `now`.
    pub fn check(&self, now: Instant) -> Health {
        let state = *self.lock();
        let last_wake = state.last_wake.map(|w| now.saturating_duration_since(w));
        match state.deadline {
            None => Health::Idle { last_wake },
            Some(deadline) => {
                let late = now.saturating_duration_since(deadline);
                if late > WAKE_GRACE {
                    Health::Overdue { late }
                } else {
                    Health::Waiting {
                        due_in: deadline.saturating_duration_since(now),
                        last_wake,
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn overdue_only_past_the_grace_and_live_again_after_a_wake() {
        let live = Liveness::default();
        assert_eq!(live.check(Instant::now()), Health::Idle { last_wake: None });
        let deadline = Instant::now() + Duration::from_secs(1);
        live.sleeping_until(deadline);
        assert!(
            matches!(live.check(Instant::now()), Health::Waiting { due_in, .. } if due_in == Duration::from_secs(1))
        );
        assert!(live.check(deadline + WAKE_GRACE).is_live());
        let late = deadline + WAKE_GRACE + Duration::from_millis(1);
        assert_eq!(
            live.check(late),
            Health::Overdue {
                late: WAKE_GRACE + Duration::from_millis(1)
            }
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        live.woke();
        assert_eq!(
            live.check(Instant::now()),
            Health::Idle {
                last_wake: Some(Duration::ZERO)
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cannot_race_after_three_instants_without_a_majority_until_a_verdict() {
        let live = Liveness::default();
        live.raced(Raced::NoMajority);
        live.raced(Raced::NoMajority);
        assert_eq!(live.cannot_race(Instant::now()), None, "two are a blip");
        live.raced(Raced::NoMajority);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            live.cannot_race(Instant::now()),
            Some(CannotRace {
                instants: 3,
                since: Duration::from_secs(1)
            })
        );
        live.raced(Raced::Verdict);
        assert_eq!(live.cannot_race(Instant::now()), None);
    }
}
