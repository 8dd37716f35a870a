//! The timeline's queue: each job's next slot due (its nominal instant plus its jitter's
//! delay), earliest first. The timer that sleeps towards it and hands the jobs due to their
//! slot's race is `crate::scheduler`, above the race; the queue itself is only time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::jitter;
use super::schedule::{Schedule, Slot};

/// What the timeline needs of a job: its name (part of its delay), its schedule and its jitter.
pub trait Timed {
    /// The job's name.
    fn name(&self) -> &str;
    /// The job's slots.
    fn schedule(&self) -> &Schedule;
    /// The most a slot of the job is delayed (zero: none).
    fn jitter(&self) -> Duration;
}

/// When a slot is due: its nominal instant plus its jitter's delay (`at`), and the slot. The
/// timeline wakes once per distinct pair: jobs whose delays differ are separate batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    /// The instant the slot is raced: ordered first, so the timeline sleeps towards it.
    pub at: DateTime<Utc>,
    /// The nominal slot: its keys and records.
    pub slot: Slot,
}

/// The jobs' next slots, earliest due first: what the timeline sleeps towards.
pub struct Timeline<J> {
    jobs: Vec<Arc<J>>,
    /// `[scheduler] key_prefix`: part of every slot's delay.
    prefix: String,
    /// (next due slot, index into `jobs`); jobs whose schedule has ended are not in it.
    due: BinaryHeap<Reverse<(Due, usize)>>,
}

impl<J: Timed> Timeline<J> {
    /// Queues each job's first slot due after `now`.
    pub fn new(jobs: Vec<Arc<J>>, now: DateTime<Utc>, prefix: &str, replica: &str) -> Self {
        let mut timeline = Timeline {
            jobs,
            prefix: prefix.to_owned(),
            due: BinaryHeap::new(),
        };
        for i in 0..timeline.jobs.len() {
            timeline.schedule(i, now, replica);
        }
        timeline
    }

    /// Queues job `i`'s first slot due after `after`: a slot whose nominal instant passed may
    /// still be due (its delay has not), so the walk starts one jitter back. A jitter is never
    /// larger than the job's interval (checked at load), so due instants keep the slots' order.
    fn schedule(&mut self, i: usize, after: DateTime<Utc>, replica: &str) {
        let job = &self.jobs[i];
        let back = chrono::Duration::from_std(job.jitter()).unwrap_or_default();
        let due_of = |slot: Slot| {
            let delay = jitter::delay(&self.prefix, job.name(), slot, job.jitter());
            Due {
                at: jitter::delayed(slot, delay),
                slot,
            }
        };
        let mut next = job.schedule().next_after(after - back).map(due_of);
        while let Some(due) = next.filter(|due| due.at <= after) {
            next = job.schedule().next_after(due.slot.instant()).map(due_of);
        }
        match next {
            Some(due) => self.due.push(Reverse((due, i))),
            None => tracing::warn!(job = %job.name(), replica = %replica,
                "the schedule has no further slot"),
        }
    }

    /// The earliest slot queued: the instant the timeline sleeps towards.
    pub fn next(&self) -> Option<Due> {
        self.due.peek().map(|Reverse((due, _))| *due)
    }

    /// Takes the jobs due at `due`; each is queued again at its first slot due after `after`.
    pub fn take_due(&mut self, due: Due, after: DateTime<Utc>, replica: &str) -> Vec<Arc<J>> {
        let mut taken = Vec::new();
        while let Some(&Reverse((next, i))) = self.due.peek() {
            if next != due {
                break;
            }
            self.due.pop();
            taken.push(i);
        }
        for &i in &taken {
            self.schedule(i, after, replica);
        }
        taken.into_iter().map(|i| self.jobs[i].clone()).collect()
    }
}
