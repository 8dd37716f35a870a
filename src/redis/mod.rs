//! The Redis layer: everything that talks to a Redis server goes through here, and nothing here
//! knows what a slot, a job or a fleet is.
//!
//! # Layout
//! A request reads up this list, from the pool to the wire, and the imports point down it: a
//! file imports only files listed below it (`tests/it/layout.rs` refuses any import circle
//! between them).
//! - [`topology`]: `[redis] mode`: the pool opened as the mode says ([`Nodes::open`]), described
//!   for the start line and `/readyz`, and what a won lock needs of it ([`Nodes::replicated`]).
//! - [`sentinel`]: sentinel mode: the primary found through the sentinels, and followed.
//! - [`independence`]: Redlock's premise checked at start: no replica, no server listed twice.
//! - [`pubsub`]: one subscribed connection per node and channel, for the fleet's notifications.
//! - [`replication`]: `WAIT`: a winner's lock acknowledged by the primary's replicas.
//! - [`pool`]: the nodes one replica talks to ([`Nodes`]): fan-out of every request, the answers
//!   gathered until the caller's rule ([`Replies`]) is met, majorities ([`quorum`]), and the one
//!   health rule (a node that does not answer is suspect, and not waited for, until it answers).
//! - [`layout`]: what the configured URLs are ([`Topology`]) and what the pool keeps of its mode
//!   once open: plain records.
//! - [`scripts`]: the compare-and-set scripts a lock needs on one node, and the token they compare.
//! - [`cluster`]: cluster mode: the one member a Redis Cluster is, reached through its seeds
//!   (redis-rs's cluster client routes each key to its shard and follows failovers), its shards.
//! - [`node`]: one node: one connection, bounded calls, typed errors (`READONLY` among them).
//! - `conn`: the connection a node talks through: one server's, a cluster's, or a dialed one.
//! - `asking`: a cluster slot migration followed command by command (`ASK` with `ASKING`,
//!   `TRYAGAIN`), where redis-rs's cluster client falls short.
//! - [`connector`]: where a node's connections come from: TCP through redis-rs's client, or
//!   streams a dialer opens (the simulation's seam).
//! - [`node_url`]: a node's checked URL and the redis-rs client made from it.
//!
//! # Where the modes differ
//! The default is the Redlock topology: N independent primaries, every request sent to each, a
//! decision made by a majority of answers. Sentinel (one primary found through the sentinels and
//! followed across failovers) and Cluster (keys routed to the shard that owns their hash slot)
//! differ from it in five places, each chosen once, at open, by the pool's `Layout` ([`layout`]):
//! - **the members**: [`Nodes::open`] makes a member per node (redlock), one member that is the
//!   primary of the moment (sentinel), or one member that is the whole cluster (its connection
//!   routes each key to its shard, [`cluster`]). The decision rule is the same everywhere, a
//!   majority of the members ([`Nodes::quorum`]), so one member decides alone in the two others.
//! - **what follows them**: in sentinel mode a follower swaps the member's node at a failover;
//!   the pool's health rule tells it when a request gets no answer or `READONLY`, and the pool
//!   stops it at shutdown. The others have nothing to follow (redis-rs's cluster client follows
//!   a cluster's failovers itself).
//! - **a won lock's replication**: [`Nodes::replicated`] asks `WAIT` of the primary (sentinel)
//!   or of the lock key's shard primary (cluster); nothing in redlock mode.
//! - **the start check**: [`independence`] checks redlock's nodes only.
//! - **how the mode is described** ([`Nodes::describe`]), and in cluster mode what its one node
//!   adds: a subscription on each seed ([`Node::subscription_points`]), its shards for `/readyz`
//!   ([`Node::shards`]), and `ASK` followed through a migration (`asking`).
//!
//! Everything above (`lock`, history, membership, the fleet clock, pub/sub) asks the pool and
//! reads [`Replies`]; none of it names a topology, so a new mode is a new arm in [`layout`] and
//! [`topology`], not a change to callers.

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
pub use pool::{NodeState, Nodes, Replies, quorum};
pub use replication::Replication;
pub use scripts::{Claim, NodeReply, Token};
pub use topology::OpenError;
