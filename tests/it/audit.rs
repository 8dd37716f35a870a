//! The audit trail on real processes over three real Redis nodes (issue 35 item 2): each control
//! command of the CLI (`pause`, `resume`, `resume --catch-up`, `trigger`) leaves exactly one
//! entry naming who ran it (`user@host`), the job, the reason and the time on the nodes' clock;
//! a replica's accepted reload leaves one naming the config hash change, a rejected one the
//! errors, a restart on another file the hash change; the library's handle records its actions
//! as the replica; `slotcron audit --json` reads them back; and with two of three nodes
//! SIGKILLed a `pause` is refused, names the majority it lacked, and leaves neither an entry
//! nor a pause behind.

use crate::common;

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::fleet::FleetToml;
use common::{RedisCluster, Replica, redis_query, slotcron_cli, slotcron_cli_status, write_config};
use serde_json::Value;
use slotcron::unstable::record::audit::AuditEntry;

/// How far an entry's stamp may sit outside the nodes' `TIME` read around its command: the
/// fleet clock is the nodes' time measured over a round trip, and on a loaded machine a round
/// trip (and so the measurement's error) takes up to about a second.
const STAMP_MARGIN: chrono::Duration = chrono::Duration::seconds(2);
/// How long a replica may take to start, or to see a changed file, on a loaded machine.
const WITHIN: Duration = Duration::from_secs(20);

/// Job `report` (never due during a test: once a year) logging `content`, the default timeout
/// and skew, 250 ms node timeout.
fn config(nodes: &[String], prefix: &str, content: &str) -> String {
    let timeout = format!("{}s", slotcron::unstable::config::DEFAULT_TIMEOUT.as_secs());
    let action = format!("type = \"log\"\ncontent = \"{content}\"");
    FleetToml {
        job: "report",
        schedule: "0 0 0 1 1 *",
        timeout: &timeout,
        scheduler: "",
        redis: "node_timeout = \"250ms\"",
        action: &action,
        ..FleetToml::new(nodes, "", prefix)
    }
    .render()
}

/// Replaces the file in one rename, so a watching replica never reads it half written.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn start(path: &Path, id: &str, args: &[&str]) -> Replica {
    let mut cmd = Replica::run_command(path, id);
    cmd.args(args);
    let r = Replica::spawn_cmd(id, cmd);
    let started = r.wait_for_json(WITHIN, |l| l["message"] == "slotcron started");
    assert!(started.is_some(), "{id} did not start: {:?}", r.lines());
    r
}

/// Stops `r` gracefully: what it records at a reload and at start is written by then (the
/// shutdown waits for the reload under way and for the replica's tasks).
fn stop(r: Replica) {
    r.terminate();
    assert!(r.wait_timeout(WITHIN).is_some(), "{:?}", r.lines());
}

/// `slotcron audit --json ARGS`: each line parsed, and checked to round-trip through
/// [`AuditEntry`] (every field of the line but the display-only `at_local`).
fn audit(path: &Path, args: &[&str]) -> Vec<AuditEntry> {
    let mut all = vec!["audit", "--json"];
    all.extend_from_slice(args);
    slotcron_cli(path, &all)
        .lines()
        .map(|line| {
            let mut row: Value = serde_json::from_str(line).unwrap();
            let entry: AuditEntry = serde_json::from_value(row.clone()).unwrap();
            row.as_object_mut().unwrap().remove("at_local");
            assert_eq!(serde_json::to_value(&entry).unwrap(), row, "{line}");
            entry
        })
        .collect()
}

/// The node's `TIME`.
fn node_time(url: &str) -> DateTime<Utc> {
    let time: Vec<String> = redis_query(url, &["TIME"]).unwrap();
    let (s, us): (i64, i64) = (time[0].parse().unwrap(), time[1].parse().unwrap());
    DateTime::from_timestamp(s, (us * 1000) as u32).unwrap()
}

/// Who the CLI says runs it: `$USER@hostname`, as the test's own process sees them.
fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".to_owned());
    format!("{user}@{}", gethostname::gethostname().to_string_lossy())
}

#[test]
fn every_control_command_leaves_one_entry_with_its_actor_job_reason_and_fleet_time() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&cluster.urls(), "audit1", "x"));
    let replica = start(&path, "replica-a", &[]);
    let commands: [(&str, &[&str]); 4] = [
        ("pause", &["pause", "report", "--reason", "r-pause"]),
        ("resume", &["resume", "report", "--reason", "r-resume"]),
        ("trigger", &["trigger", "report", "--reason", "r-trigger"]),
        (
            "resume_catch_up",
            &["resume", "report", "--catch-up", "--reason", "r-catch-up"],
        ),
    ];
    let mut windows = Vec::new();
    for (action, args) in commands {
        let before = node_time(&cluster.urls()[0]);
        slotcron_cli(&path, args);
        windows.push((action, before, node_time(&cluster.urls()[0])));
    }
    let entries = audit(&path, &["--job", "report"]);
    let ours: Vec<&AuditEntry> = entries.iter().filter(|e| e.actor == operator()).collect();
    assert_eq!(ours.len(), commands.len(), "{entries:#?}");
    for (action, before, after) in windows {
        let found: Vec<&&AuditEntry> = ours
            .iter()
            .filter(|e| e.action.as_str() == action)
            .collect();
        assert_eq!(found.len(), 1, "{action}: {entries:#?}");
        let e = found[0];
        assert_eq!(e.job.as_deref(), Some("report"));
        let reason = format!("r-{}", action.replace("resume_catch_up", "catch-up"));
        assert_eq!(e.reason.as_deref(), Some(reason.as_str()));
        assert_eq!(e.status.as_str(), "recorded", "{e:?}");
        assert!(
            e.at >= before - STAMP_MARGIN && e.at <= after + STAMP_MARGIN,
            "{action} stamped {} outside the nodes' TIME {before}..{after}",
            e.at
        );
    }
    // Newest first, and `--since` keeps only the entries from then on.
    assert!(
        entries.windows(2).all(|w| w[0].at >= w[1].at),
        "{entries:#?}"
    );
    let since = ours[1].at.to_rfc3339();
    assert_eq!(audit(&path, &["--since", &since]).len(), 2);
    // The table: one line per entry under its header, the reason on the entry's line.
    let table = slotcron_cli(&path, &["audit", "--job", "report"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 1 + commands.len(), "{table}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" pause ") && l.contains("r-pause")),
        "{table}"
    );
    drop(replica);
}

#[test]
fn reloads_accepted_and_rejected_and_a_restart_on_another_file_are_recorded() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let first = config(&cluster.urls(), "audit2", "one");
    let path = write_config(dir.path(), &first);
    let r = start(&path, "replica-r", &[]);

    let second = config(&cluster.urls(), "audit2", "two");
    replace(&path, &second);
    let reloaded = r.wait_for_json(WITHIN, |l| l["message"] == "reloaded");
    assert!(reloaded.is_some(), "{:?}", r.lines());
    replace(&path, &second.replace("0 0 0 1 1 *", "not a cron"));
    let rejected = r.wait_for_json(WITHIN, |l| l["message"] == "reload rejected");
    assert!(rejected.is_some(), "{:?}", r.lines());
    stop(r);
    // Started again on a third file: the change from the second is recorded once.
    let third = config(&cluster.urls(), "audit2", "three");
    replace(&path, &third);
    stop(start(&path, "replica-r", &["--no-watch"]));

    let hash = |text: &str| format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()));
    let entries = audit(&path, &[]);
    let of = |action: &str| -> Vec<&AuditEntry> {
        let found = entries.iter().filter(|e| e.action.as_str() == action);
        found.collect()
    };
    assert!(
        entries.iter().all(|e| e.actor == "replica-r"),
        "{entries:#?}"
    );
    let reload = of("reload");
    assert_eq!(reload.len(), 1, "{entries:#?}");
    let change = format!("config hash {} -> {}", hash(&first), hash(&second));
    assert_eq!(reload[0].detail.as_deref(), Some(change.as_str()));
    let refused = of("reload_rejected");
    assert_eq!(refused.len(), 1, "{entries:#?}");
    let why = refused[0].reason.as_deref().unwrap_or_default();
    assert!(why.contains("not a cron"), "{why}");
    let restarted = of("config_hash");
    assert_eq!(restarted.len(), 1, "{entries:#?}");
    let change = format!("config hash {} -> {}", hash(&second), hash(&third));
    assert_eq!(restarted[0].detail.as_deref(), Some(change.as_str()));
}

#[test]
fn with_two_of_three_nodes_down_a_pause_is_refused_and_leaves_no_entry_and_no_pause() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&cluster.urls(), "audit3", "x"));
    cluster[1].kill();
    cluster[2].kill();

    let (code, out) = slotcron_cli_status(&path, &["pause", "report", "--reason", "lost"]);
    assert_eq!(code, Some(4), "{out}");
    assert!(
        out.contains("1 of 3 Redis node(s)") && out.contains("a majority (2) needed"),
        "{out}"
    );
    assert!(out.contains("not paused"), "{out}");

    cluster[1].restart();
    cluster[2].restart();
    assert_eq!(audit(&path, &[]), Vec::new());
    for url in cluster.urls() {
        let pause: Option<String> = redis_query(&url, &["GET", "audit3:report:paused"]).unwrap();
        assert_eq!(pause, None, "{url}");
    }
    let out = slotcron_cli(&path, &["resume", "report"]);
    assert!(out.contains("was not paused"), "{out}");
}

#[test]
fn a_pause_the_fleet_refuses_after_its_entry_is_marked_not_taken_with_why() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&cluster.urls(), "audit5", "x"));
    slotcron_cli(&path, &["pause", "report", "--reason", "first"]);
    // Another operator's pause holds and this one has no --force: refused after its entry.
    let (code, out) = slotcron_cli_status(&path, &["pause", "report", "--reason", "second"]);
    assert_eq!(code, Some(2), "{out}");

    let entries = audit(&path, &[]);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert_eq!(entries[0].reason.as_deref(), Some("second"));
    assert_eq!(entries[0].status.as_str(), "not_taken");
    let detail = entries[0].detail.as_deref().unwrap_or_default();
    assert!(detail.contains("not taken: already paused by"), "{detail}");
    assert_eq!(entries[1].reason.as_deref(), Some("first"));
    assert_eq!(entries[1].status.as_str(), "recorded");
}

#[test]
fn the_status_page_shows_the_latest_entries() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let text = config(&cluster.urls(), "audit6", "x");
    let text = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n{text}");
    let path = write_config(dir.path(), &text);
    let replica = start(&path, "replica-p", &[]);
    slotcron_cli(&path, &["pause", "report", "--reason", "<db migration>"]);

    // The page reads through a snapshot up to 2 s old: wait for one taken after the pause.
    let section = common::wait_until(WITHIN, || {
        let page = common::http_get(port, "/")?;
        let start = page.body.find("id=\"audit\"")?;
        let section = &page.body[start..];
        let section = section[..section.find("</table>")?].to_owned();
        section.contains("&lt;db migration&gt;").then_some(section)
    });
    let section = section.unwrap_or_else(|| panic!("no entry on the page: {:?}", replica.lines()));
    let row = section
        .split("<tr>")
        .find(|row| row.contains("&lt;db migration&gt;"))
        .unwrap();
    for cell in ["<td>pause</td>", "<td>report</td>", "<td>recorded</td>"] {
        assert!(row.contains(cell), "{cell} not in {row}");
    }
    assert!(row.contains(&format!("<td>{}</td>", operator())), "{row}");
}

#[test]
fn entries_survive_a_rolling_empty_restart_of_every_node() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&cluster.urls(), "audit7", "x"));
    let replica = start(&path, "replica-k", &[]);
    slotcron_cli(&path, &["pause", "report", "--reason", "kept"]);
    for (i, node) in cluster.nodes().iter().enumerate() {
        node.restart();
        // The replica's subscription to the node reopens, and it repairs the node.
        let repaired = replica.wait_for_json(WITHIN, |l| {
            l["message"] == "audit trail repaired onto a node that lacked entries" && l["node"] == i
        });
        assert!(
            repaired.is_some(),
            "node {i} not repaired: {:?}",
            replica.lines()
        );
    }
    let entries = audit(&path, &[]);
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert_eq!(entries[0].reason.as_deref(), Some("kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_handle_records_its_actions_as_the_replica() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&cluster.urls(), "audit4", "x"));
    let handle = slotcron::Fleet::new("lib-replica")
        .nodes(cluster.urls())
        .key_prefix("audit4")
        .job(slotcron::JobSpec::new("report", "0 0 0 1 1 *"), |_| async {
            Ok::<(), String>(())
        })
        .start()
        .await
        .unwrap();
    handle.pause("report", None, Some("by code")).await.unwrap();
    assert!(handle.resume("report").await.unwrap());
    handle.trigger("report").await.unwrap();
    handle.shutdown().await.unwrap();

    let path = path.clone();
    let entries = tokio::task::spawn_blocking(move || audit(&path, &["--job", "report"]))
        .await
        .unwrap();
    let actions: Vec<&str> = entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["trigger", "resume", "pause"], "{entries:#?}");
    assert!(
        entries.iter().all(|e| e.actor == "lib-replica"),
        "{entries:#?}"
    );
    assert_eq!(entries[2].reason.as_deref(), Some("by code"));
}
