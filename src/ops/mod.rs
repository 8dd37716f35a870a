//! What operators see and ask: the replica's HTTP endpoints and status page, the ledger of every
//! slot's fate, the timeline's watchdog, `slotcron health`, and the log format. Nothing below
//! imports these: they read the fleet, the records and the schedule, and serve them.

pub mod ledger;
pub mod liveness;
#[cfg(feature = "cli")]
pub mod probe;
#[cfg(feature = "server")]
pub mod status;
pub mod telemetry;
