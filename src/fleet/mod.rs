//! The fleet as one: who is alive and which replicas race each slot (`membership`), one name per
//! replica (`namesakes`, which the membership's heartbeat carries), one fleet per prefix
//! (`destinations`), slots handed over when a winner could not deliver (`handoff`), and
//! fleet-wide pause and resume (`control`). Each keeps its state on the Redis nodes and hears the
//! others through the Redis layer's pub/sub; none of them imports another but `membership`, its
//! `namesakes`.

pub mod control;
pub mod destinations;
pub mod handoff;
pub mod membership;
pub mod namesakes;
pub mod triggers;
