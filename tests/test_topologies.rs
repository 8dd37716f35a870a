//! Redis topologies: Redlock refuses, at start, a node set that is not independent primaries
//! (a replica among the nodes; one server under two names), naming the URLs.

mod common;

use std::time::Duration;

use common::{redis_cmd, write_config, Receiver, RedisCluster, Replica};

/// `run` must give up this fast on a node set it refuses.
const REFUSED_WITHIN: Duration = Duration::from_secs(15);

/// Runs one replica over `nodes` and returns its output once it exited; panics if it did not
/// exit non-zero within [`REFUSED_WITHIN`].
fn refused(nodes: &[String]) -> String {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let text = common::fleet::FleetToml::new(nodes, &receiver.uri(), "slotcron").render();
    let path = write_config(dir.path(), &text);
    let replica = Replica::run(&path, "r1", &[]);
    let status = replica.wait_timeout(REFUSED_WITHIN);
    let output = replica.lines().join("\n");
    assert!(
        status.is_some_and(|s| !s.success()),
        "run did not exit non-zero within {REFUSED_WITHIN:?} ({status:?}):\n{output}"
    );
    output
}

#[test]
fn redlock_refuses_a_primary_and_its_two_replicas_naming_them() {
    let servers = RedisCluster::start(3);
    let primary = servers[0].port().to_string();
    for replica in &servers.nodes()[1..] {
        redis_cmd(&replica.url(), &["REPLICAOF", "127.0.0.1", &primary]).unwrap();
    }
    let output = refused(&servers.urls());
    for replica in &servers.nodes()[1..] {
        assert!(
            output.contains(&format!("{} is a replica", replica.url())),
            "the error does not name replica {}:\n{output}",
            replica.url()
        );
    }
    assert!(!output.contains(&format!("{} is a replica", servers[0].url())));
}

#[test]
fn redlock_refuses_one_server_under_two_names_naming_both() {
    let servers = RedisCluster::start(2);
    let localhost = format!("redis://localhost:{}", servers[0].port());
    let nodes = [servers[0].url(), localhost.clone(), servers[1].url()];
    let output = refused(&nodes);
    let expected = format!("{} and {localhost} are the same server", servers[0].url());
    assert!(output.contains(&expected), "no {expected:?} in:\n{output}");
    let third = format!("and {} are the same server", servers[1].url());
    assert!(
        !output.contains(&third),
        "the third node is independent:\n{output}"
    );
}
