//! The core promise, on real processes: 5 slotcron replicas against 3 real Redis nodes run a job
//! every second; every slot reaches the receiver exactly once, and the logs name who won and
//! who else raced it (the slot's candidates, each with its rank).

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::fleet::{FleetToml, wecom_action};
use common::{ProcessFleet, Receiver, RedisCluster, write_config};
use serde_json::Value;

const REPLICAS: usize = 5;

/// Job `every-second` (5 s timeout) posting `job slot replica` to a WeCom robot at `receiver`;
/// 2 s allowed skew and 250 ms node timeout, generous for a loaded 2-core CI machine (the race
/// itself takes well under 1 ms).
fn config(nodes: &[String], receiver: &str, prefix: &str) -> String {
    let action = wecom_action(
        receiver,
        "testkey123456",
        "{{ job }} {{ slot }} {{ replica }}",
    );
    FleetToml {
        job: "every-second",
        timeout: "5s",
        scheduler: "max_clock_skew = \"2s\"",
        redis: "node_timeout = \"250ms\"",
        action: &action,
        ..FleetToml::new(nodes, receiver, prefix)
    }
    .render()
}

/// Every JSON line of every replica with an `outcome`, by slot.
fn outcomes(fleet: &ProcessFleet) -> BTreeMap<String, Vec<Value>> {
    let by_replica = fleet.outcomes().into_iter();
    let without_index = |lines: Vec<(usize, Value)>| lines.into_iter().map(|(_, l)| l).collect();
    by_replica
        .map(|(slot, lines)| (slot, without_index(lines)))
        .collect()
}

fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<String> {
    let mut slots = Vec::new();
    let mut t = DateTime::from_timestamp(from.timestamp() + 1, 0).unwrap();
    while t < to {
        slots.push(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        t += chrono::Duration::seconds(1);
    }
    slots
}

/// Runs the fleet for `seconds` and checks every slot in the window ran exactly once, with one
/// `won` line that names the replica that posted, `lost` lines naming it, and its `done` line.
fn exactly_once(cluster: &RedisCluster, urls: &[String], prefix: &str, seconds: u64) {
    let _ = cluster;
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(urls, &receiver.uri(), prefix));
    let fleet = ProcessFleet::start(&path, REPLICAS);
    let from = Utc::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let to = Utc::now();
    for status in fleet.stop() {
        assert!(
            status.success(),
            "a replica did not exit 0 on SIGTERM: {status:?}"
        );
    }

    // The last second's slot is left out: stopped right after it started, its second candidate
    // may not have raced yet (no `lost` line), which says nothing about the promise.
    let window = seconds_between(from, to - chrono::Duration::seconds(1));
    assert!(window.len() as u64 >= seconds - 2, "{window:?}");
    let received = receiver.by_idempotency_key();
    let outcomes = outcomes(&fleet);
    // Lost lines naming a holder that then gave the key back, not the sender (under load).
    let mut named_a_holder_that_gave_back = 0;
    for slot in &window {
        let key = format!("every-second/{slot}");
        let requests = received.get(&key).map_or(0, Vec::len);
        assert_eq!(
            requests, 1,
            "slot {slot} reached the receiver {requests} times"
        );
        let request = &received[&key][0];
        let sender = request
            .headers
            .get("x-slotcron-replica")
            .unwrap()
            .to_str()
            .unwrap();
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["msgtype"], "text");
        assert!(
            body["text"]["content"].as_str().unwrap().contains(sender),
            "{body}"
        );

        let lines = &outcomes[slot];
        let won: Vec<&Value> = lines.iter().filter(|l| l["outcome"] == "won").collect();
        assert_eq!(
            won.len(),
            1,
            "slot {slot}: {} won lines: {lines:?}",
            won.len()
        );
        assert_eq!(
            won[0]["replica"], sender,
            "the won line must name the replica that posted"
        );
        assert!(
            lines
                .iter()
                .any(|l| l["outcome"] == "done" && l["replica"] == sender),
            "slot {slot}: no done line"
        );
        let lost: Vec<&Value> = lines.iter().filter(|l| l["outcome"] == "lost").collect();
        // A lost line names the replica that held the key on a majority when it raced. On a
        // loaded machine that holder can be one whose own count fell short (a SET that timed
        // out but landed): it gave the key back and logged `unavailable`, or `lost` to the
        // replica that then won. Any other name would be a second winner.
        let gave_back = |name: &Value| {
            let raced = |l: &&Value| l["replica"] == *name;
            let lines = lines.iter().filter(raced);
            lines
                .into_iter()
                .any(|l| l["outcome"] == "unavailable" || l["outcome"] == "lost")
        };
        named_a_holder_that_gave_back += lost.iter().filter(|l| l["winner"] != sender).count();
        assert!(
            lost.iter()
                .all(|l| l["winner"] == sender || gave_back(&l["winner"])),
            "slot {slot}: a lost line names another winner: {lines:?}"
        );
        // Only the slot's candidates race it (`candidates = 2` by default): both of them,
        // each with its rank; while views still differ at start, more may race.
        assert!(
            !lost.is_empty() && lost.len() < REPLICAS,
            "slot {slot}: the second candidate logs lost: {lines:?}"
        );
        assert!(
            won[0]["rank"].is_u64() && lost.iter().all(|l| l["rank"].is_u64()),
            "slot {slot}: a race line without its rank: {lines:?}"
        );
    }
    assert!(
        receiver.duplicate_keys().is_empty(),
        "{:?}",
        receiver.duplicate_keys()
    );
    eprintln!(
        "measured: {} slots over {} s, each reached the receiver once; {named_a_holder_that_gave_back} \
         lost line(s) named a holder that gave the key back",
        window.len(),
        seconds
    );
}

/// The core cases (every slot once; one node of three down) on three nodes of `bin`, every
/// node under the book's least-privilege ACL line (the default user off), the replicas
/// connecting as that user. The key prefix is `slotcron`, which the line's `~slotcron:*` and
/// `&slotcron:*` are written for. The same cases without the ACL line were tests of their own
/// (five_replicas_three_nodes_every_slot_exactly_once_for_12s,
/// five_replicas_with_one_of_three_nodes_down_miss_no_slot): they checked the same
/// [`exactly_once`] on the same redis-server, so the ACL cases are the one place; every other
/// fleet test connects without ACL.
fn core_cases_under_the_acl_line(bin: &std::path::Path, one_node_down: bool) {
    let args = common::acl_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = RedisCluster::start_bin(3, bin, &args, &[]);
    let urls = cluster.acl_urls();
    if one_node_down {
        cluster[2].kill();
    }
    exactly_once(&cluster, &urls, "slotcron", 8);
}

#[test]
fn redis_7_under_the_acl_line_every_slot_exactly_once() {
    core_cases_under_the_acl_line(&redis_server(), false);
}

#[test]
fn redis_7_under_the_acl_line_one_of_three_nodes_down_misses_no_slot() {
    core_cases_under_the_acl_line(&redis_server(), true);
}

#[test]
fn valkey_9_under_the_acl_line_every_slot_exactly_once() {
    if let Some(valkey) = common::tools::valkey_server() {
        core_cases_under_the_acl_line(&valkey, false);
    }
}

#[test]
fn valkey_9_under_the_acl_line_one_of_three_nodes_down_misses_no_slot() {
    if let Some(valkey) = common::tools::valkey_server() {
        core_cases_under_the_acl_line(&valkey, true);
    }
}

fn redis_server() -> std::path::PathBuf {
    common::redis_server_bin().into()
}
