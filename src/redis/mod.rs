//! The Redis layer: everything that talks to a Redis server goes through here, and nothing here
//! knows what a slot, a job or a fleet is.
//! - [`pool`]: the nodes one replica talks to ([`Nodes`]): fan-out of every request, the answers
//!   gathered until the caller's rule ([`Replies`]) is met, majorities ([`quorum`]), and the one
//!   health rule (a node that does not answer is suspect, and not waited for, until it answers).
//! - [`node`]: one node: its checked URL, one multiplexed connection, bounded calls, typed errors.
//! - [`scripts`]: the compare-and-set scripts a lock needs on one node, and the token they compare.
//! - [`pubsub`]: one subscribed connection per node and channel, for the fleet's notifications.
//! - [`independence`]: Redlock's premise checked at start: no replica, no server listed twice.
//! - [`cluster`]: cluster mode: the one member a Redis Cluster is, reached through its seeds
//!   (redis-rs's cluster client routes each key to its shard and follows failovers).
//! - `asking`: a cluster slot migration followed command by command (`ASK` with `ASKING`,
//!   `TRYAGAIN`), where redis-rs's cluster client falls short.
//! - [`sentinel`]: sentinel mode: the primary found through the sentinels, and followed.
//! - [`replication`]: `WAIT`: a winner's lock acknowledged by the primary's replicas.
//! - [`connector`]: where a node's connections come from: TCP through redis-rs's client, or
//!   streams a dialer opens (the simulation's seam).
//! - [`topology`]: `[redis] mode`: what the members are, found and followed ([`Nodes::open`]).
//!
//! # The topology seam
//! The default pool is the Redlock topology: N independent primaries, every request sent to
//! each, a decision made by a majority of answers. The other topologies (Sentinel: one primary found
//! through the sentinels and followed across failovers; Cluster: keys routed to the shard that
//! owns their hash slot) differ in exactly two places, and only there:
//! - **which members there are and where a request goes**: [`Nodes::open`] (members from the
//!   configured URLs) and [`Nodes::ask_some`] (the members a request is sent to), and
//! - **what makes a decision**: [`Nodes::quorum`] (a majority of N here; one for a single
//!   logical primary).
//!
//! [`Nodes::open`] ([`topology`]) picks the layout from `[redis] mode`, one arm each: redlock as
//! above ([`Nodes::connect`]); sentinel as one member, the primary of the moment, quorum 1
//! ([`sentinel`] swaps its node at a failover); cluster as one member, the whole cluster (its
//! connection routes each key to its shard, [`cluster`]), quorum 1. It adds what a mode needs of
//! a won lock ([`Nodes::replicated`]: `WAIT`, on the primary, or the lock key's shard primary).
//!
//! Everything above (`lock`, history, membership, the fleet clock, pub/sub) asks the pool and
//! reads [`Replies`]; none of it names a topology, so a mode is a change to those two places
//! (an enum of how members are found and routed, chosen by the configuration), not to callers.

mod asking;
pub mod cluster;
mod conn;
pub mod connector;
pub mod independence;
pub mod layout;
pub mod node;
pub mod node_url;
pub mod pool;
pub mod pubsub;
pub mod replication;
pub mod scripts;
pub mod sentinel;
pub mod topology;

pub use cluster::Shard;
pub use connector::{Connector, Dial};
pub use layout::{PrimaryAuth, Topology};
pub use node::{Node, NodeError, NodeErrorKind};
pub use node_url::{BadNodeUrl, NodeSetupError, NodeUrl};
pub use pool::{quorum, NodeState, Nodes, Replies};
pub use replication::Replication;
pub use scripts::{Claim, NodeReply, Token};
pub use topology::OpenError;
