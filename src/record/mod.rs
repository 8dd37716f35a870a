//! What the fleet keeps about its jobs on the Redis nodes (or in the process, standalone): the
//! run records (`history`: who ran which slot, and how it went) and, kept beside them in the
//! same store, each job's watermark (`watermark`: when the fleet first scheduled it, so catch-up
//! never reaches before it), and the audit trail (`audit`: every pause, resume, trigger and reload,
//! who did it, when on the fleet clock and why).
//!
//! The watermark sits here rather than with the time: it is read and written through the
//! history's store ([`history::History`]), so it is one step above it.

pub mod audit;
pub mod history;
pub mod watermark;
