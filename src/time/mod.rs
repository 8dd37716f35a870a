//! Time: the slots of a job (`schedule`: cron in an IANA zone, the wall-clock seam), the days
//! they may fall on (`calendar`: workdays and days off), and the clock the fleet schedules on
//! (`fleet_clock`: the Redis nodes' `TIME` kept on the monotonic clock), a schedule said in
//! words (`words`), and a slot's jitter (`jitter`: the delay every replica computes alike).
//! Within the folder, `fleet_clock`, `jitter` and `words` use `schedule`, which uses
//! `calendar`.
//! `timeline` queues each job's next due slot, earliest first.
//!
//! The timer that sleeps towards the timeline's next slot (`crate::scheduler`) is not here: it
//! hands the due jobs to the race, which sits above everything in this folder.

pub mod calendar;
pub mod fleet_clock;
pub mod jitter;
pub mod schedule;
pub mod timeline;
pub mod words;
