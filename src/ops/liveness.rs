//! The timeline's watchdog, behind `/healthz`: the timeline says when it means to wake next,
//! and notes each wake; the process is live while it is not overdue. A task that panicked, a
//! starved runtime, or a wall clock that stopped (the timeline sleeping again and again for a
//! slot that never comes) all leave the HTTP server answering, and all fail this check. So does
//! a wall clock stepped back by more than [`WAKE_GRACE`], until the timeline reaches its slot:
//! the deadline is set once per slot, on the monotonic clock, and such a replica is late.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long past its wake-up deadline the timeline may be before `/healthz` fails. A wake is
/// a timer firing and a few pushes onto a heap; seconds late means the loop is stuck. Kept
/// short so a wedged replica fails within one missed slot of a job running every few seconds.
pub const WAKE_GRACE: Duration = Duration::from_secs(2);

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
}
