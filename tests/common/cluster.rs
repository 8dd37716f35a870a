//! A real Redis Cluster ([`ShardedCluster`]): `redis-server --cluster-enabled yes` processes
//! (or valkey-server: same flags) on free ports, joined by hand (`CLUSTER ADDSLOTSRANGE`,
//! `MEET`, `REPLICATE`: no redis-cli needed), each primary with its replicas, stopped on drop.
//! Not to be confused with [`super::RedisCluster`], a set of independent nodes.

use super::*;

/// How long forming the cluster may take (gossip, replicas' first sync, `cluster_state:ok`).
const FORM_DEADLINE: Duration = Duration::from_secs(20);
/// The hash slots of a cluster.
const SLOTS: u16 = 16384;

/// A Redis Cluster of `primaries` shards, each with `replicas` replicas; stopped on drop.
pub struct ShardedCluster {
    /// Primaries first (shard `i` is `nodes[i]`), then the replicas, shard by shard.
    nodes: Vec<RedisServer>,
    /// Each node's cluster bus port (its own `--cluster-port`: port + 10000 may not exist).
    buses: Vec<u16>,
    primaries: usize,
    /// Started with [`cluster_acl_args`]: the harness speaks as [`ADMIN`], the default user is off.
    acl: bool,
}

/// The harness's own user when the cluster runs the book's ACL line (the default user off).
pub const ADMIN: &str = "admin";
const ADMIN_PASSWORD: &str = "admin-s3cret";

/// The book's least-privilege ACL line for a cluster (`[redis] mode = "cluster"`): the key
/// and channel patterns are the prefix in its hash tag (`{slotcron}:*`). Plus the harness's
/// admin user, which replicas also sync with (`masteruser`).
pub fn cluster_acl_args() -> Vec<String> {
    let (user, admin) = (format!(">{ACL_PASSWORD}"), format!(">{ADMIN_PASSWORD}"));
    let line = [ACL_USER, "on", &user, "~{slotcron}:*", "&{slotcron}:*"];
    let rights = ["+@all", "-@dangerous", "-@admin"];
    let mut args = vec!["--user".to_owned()];
    args.extend(line.iter().chain(&rights).map(|w| w.to_string()));
    args.extend(["--user", ADMIN, "on", &admin, "~*", "&*", "+@all"].map(str::to_owned));
    args.extend(["--user", "default", "off"].map(str::to_owned));
    args.extend(["--masteruser", ADMIN, "--masterauth", ADMIN_PASSWORD].map(str::to_owned));
    args
}

impl ShardedCluster {
    /// Starts and forms a cluster of redis-server processes with `cluster-node-timeout`
    /// `node_timeout_ms`, plus `extra` arguments for each (an ACL line).
    pub fn start(
        primaries: usize,
        replicas: usize,
        node_timeout_ms: u64,
        extra: &[String],
    ) -> Self {
        Self::start_bin(
            Path::new(&redis_server_bin()),
            primaries,
            replicas,
            node_timeout_ms,
            extra,
        )
    }

    /// [`Self::start`] with `bin` (redis-server or valkey-server).
    pub fn start_bin(
        bin: &Path,
        primaries: usize,
        replicas: usize,
        node_timeout_ms: u64,
        extra: &[String],
    ) -> Self {
        let (nodes, buses) = (0..primaries * (1 + replicas))
            .map(|_| start_node(bin, node_timeout_ms, extra))
            .unzip();
        let acl = extra.iter().any(|a| a == "--masteruser");
        let cluster = ShardedCluster {
            nodes,
            buses,
            primaries,
            acl,
        };
        cluster.form(replicas);
        cluster
    }

    /// Slots to primaries, every node introduced to the first, replicas to their primaries,
    /// then waits until every node says `cluster_state:ok` and every replica is in sync.
    fn form(&self, replicas: usize) {
        let per = SLOTS / self.primaries as u16;
        for i in 0..self.primaries {
            let first = i as u16 * per;
            let last = if i + 1 == self.primaries {
                SLOTS - 1
            } else {
                first + per - 1
            };
            let (first, last, epoch) = (first.to_string(), last.to_string(), (i + 1).to_string());
            self.admin(i, &["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
            self.admin(i, &["CLUSTER", "SET-CONFIG-EPOCH", &epoch]);
        }
        let (port0, bus0) = (self.nodes[0].port().to_string(), self.buses[0].to_string());
        for i in 1..self.nodes.len() {
            self.admin(i, &["CLUSTER", "MEET", "127.0.0.1", &port0, &bus0]);
        }
        self.wait("every node knows every other", |c, i| {
            c.known(i) == c.nodes.len()
        });
        for r in 0..self.primaries * replicas {
            let primary = self.id(r / replicas);
            self.admin(self.primaries + r, &["CLUSTER", "REPLICATE", &primary]);
        }
        self.wait("cluster_state:ok everywhere", |c, i| {
            c.info(i).contains("cluster_state:ok")
        });
        self.wait("every replica in sync", |c, i| {
            i < c.primaries || c.replication(i).contains("master_link_status:up")
        });
    }

    /// Waits until `ready` holds for every node still running; panics after [`FORM_DEADLINE`].
    fn wait(&self, what: &str, ready: impl Fn(&Self, usize) -> bool) {
        let all = || {
            (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_running())
                .all(|i| ready(self, i))
                .then_some(())
        };
        wait_until(FORM_DEADLINE, all).unwrap_or_else(|| panic!("cluster: not {what}"));
    }

    /// Node `i`'s URL for the harness (the default user, or [`ADMIN`] under the ACL).
    fn admin_url(&self, i: usize) -> String {
        match self.acl {
            true => format!(
                "redis://{ADMIN}:{ADMIN_PASSWORD}@127.0.0.1:{}",
                self.nodes[i].port()
            ),
            false => self.nodes[i].auth_url(),
        }
    }

    /// Runs a command on node `i` as the harness (not the ACL user).
    fn admin(&self, i: usize, args: &[&str]) -> ::redis::Value {
        redis_cmd(&self.admin_url(i), args)
            .unwrap_or_else(|e| panic!("cluster node {i}: {args:?}: {e}"))
    }

    fn text(&self, i: usize, args: &[&str]) -> String {
        redis_query::<String>(&self.admin_url(i), args).unwrap_or_default()
    }

    /// Node `i`'s cluster id.
    pub fn id(&self, i: usize) -> String {
        self.text(i, &["CLUSTER", "MYID"])
    }

    /// Node `i`'s `CLUSTER INFO`.
    pub fn info(&self, i: usize) -> String {
        self.text(i, &["CLUSTER", "INFO"])
    }

    fn replication(&self, i: usize) -> String {
        self.text(i, &["INFO", "replication"])
    }

    /// How many nodes node `i` knows (itself included).
    fn known(&self, i: usize) -> usize {
        self.text(i, &["CLUSTER", "NODES"]).lines().count()
    }

    /// Every node, primaries first.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Primary `i`, as formed (after a failover it may be a replica, or dead).
    pub fn primary(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// The primaries' URLs: the seeds a config lists (with the ACL user's credentials when
    /// the cluster runs the ACL line).
    pub fn seed_urls(&self) -> Vec<String> {
        let url = |node: &RedisServer| match self.acl {
            true => format!(
                "redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{}",
                node.port()
            ),
            false => node.url(),
        };
        self.nodes[..self.primaries].iter().map(url).collect()
    }

    /// The shard (as formed) that owns the hash slot of `key`.
    pub fn shard_of(&self, key: &str) -> usize {
        let slot: i64 =
            redis_query(&self.admin_url(0), &["CLUSTER", "KEYSLOT", key]).expect("CLUSTER KEYSLOT");
        let per = i64::from(SLOTS / self.primaries as u16);
        (slot / per).min(self.primaries as i64 - 1) as usize
    }

    /// The replica (as formed) of shard `i`'s first replica.
    pub fn replica_of(&self, shard: usize) -> &RedisServer {
        let replicas = (self.nodes.len() - self.primaries) / self.primaries;
        &self.nodes[self.primaries + shard * replicas]
    }

    /// Waits until shard `shard`'s first replica says it is a primary; how long that took.
    pub fn wait_for_promotion(&self, shard: usize, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        let replicas = (self.nodes.len() - self.primaries) / self.primaries;
        let replica = self.primaries + shard * replicas;
        let promoted = || {
            let role = self.replication(replica);
            role.contains("role:master").then(|| start.elapsed())
        };
        wait_until(within, promoted)
    }
}

/// One cluster-enabled node on a free port, its bus on another free port.
pub fn start_node(bin: &Path, node_timeout_ms: u64, extra: &[String]) -> (RedisServer, u16) {
    let bus_port = free_port();
    let bus = bus_port.to_string();
    let timeout = node_timeout_ms.to_string();
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &timeout,
        "--cluster-port",
        &bus,
    ];
    args.extend(extra.iter().map(String::as_str));
    (RedisServer::start_bin(bin, &args, &[]), bus_port)
}

impl ShardedCluster {
    /// `redis-cli --cluster reshard`'s first half for hash slot `slot`: `IMPORTING` on shard
    /// `to`'s primary, then `MIGRATING` on shard `from`'s (that order, as redis-cli does, so no
    /// `ASK` points at a node that would refuse it).
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) {
        let slot = slot.to_string();
        self.admin(
            to,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &self.id(from)],
        );
        self.admin(
            from,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &self.id(to)],
        );
    }

    /// Its second half: every key of `slot` moved from shard `from` to `to` (`MIGRATE`, a
    /// batch at a time), then the slot given to `to` on every primary.
    pub fn finish_migration(&self, slot: u16, from: usize, to: usize) {
        let (slot_arg, port) = (slot.to_string(), self.nodes[to].port().to_string());
        loop {
            let args = ["CLUSTER", "GETKEYSINSLOT", &slot_arg, "100"];
            let keys: Vec<String> = redis_query(&self.admin_url(from), &args).unwrap_or_default();
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "REPLACE"];
            migrate.push("KEYS");
            migrate.extend(keys.iter().map(String::as_str));
            self.admin(from, &migrate);
        }
        let owner = self.id(to);
        for i in [to, from].into_iter().chain(0..self.primaries) {
            self.admin(i, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &owner]);
        }
    }

    /// The hash slot of `key`.
    pub fn key_slot(&self, key: &str) -> u16 {
        redis_query(&self.admin_url(0), &["CLUSTER", "KEYSLOT", key]).expect("CLUSTER KEYSLOT")
    }
}

impl ShardedCluster {
    /// Cuts the replication link of shard `shard`'s first replica and keeps it down (a wrong
    /// `masterauth`, its link killed: each reconnection fails at `AUTH`); it still gossips, and
    /// can be promoted.
    pub fn cut_replication(&self, shard: usize) {
        let replicas = (self.nodes.len() - self.primaries) / self.primaries;
        let replica = self.primaries + shard * replicas;
        self.admin(
            replica,
            &["CONFIG", "SET", "masterauth", "not-the-primary-s"],
        );
        self.admin(replica, &["CLIENT", "KILL", "TYPE", "master"]);
        let down = || (!self.replication(replica).contains("master_link_status:up")).then_some(());
        wait_until(FORM_DEADLINE, down).expect("the replica's link stays down");
    }
}
