//! Deadline and recovery alerts across a fleet of three replicas on three Redis nodes: a slot
//! not `done` by its job's `deadline` alerts once, a job `done` again after failures says
//! `recovered` once, and each still goes out once when the replica sending it is SIGKILLed
//! with the alert in flight (another one sends it).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::fleet::FleetToml;
use common::{
    Receiver, RedisCluster, Replica, free_port, http_get, slotcron_cli, wait_until, write_config,
};

/// The late job: a slot every 6 s, due `done` 1 s after it (before: a slot every 10 s, held
/// 7 s past a 2 s deadline; scaled down to wait for fewer seconds of slots).
const LATE_JOB: [&str; 3] = ["*/6 * * * * *", "20s", "deadline = \"1s\""];
/// The job's receiver holds each request this long: 3 s past the 1 s deadline, so a deadline
/// look delayed by a loaded machine still finds the run going; and 2 s short of the 6 s
/// between slots, so no slot is skipped for overlap.
const HELD_PAST_DEADLINE: Duration = Duration::from_secs(4);
/// An alert receiver holds the alert to be cut off this long: the test SIGKILLs its sender
/// meanwhile, so the kill lands while the alert is in flight by construction.
const ALERT_IN_FLIGHT: Duration = Duration::from_secs(60);
/// Bound on each wait for the fleet: generous, for a loaded 2-core machine; never a speed claim.
const PATIENCE: Duration = Duration::from_secs(120);

/// One alert as the alert receiver got it (the `[alert.oncall]` body below, one `key=value`
/// per line).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Alert {
    outcome: String,
    job: String,
    slot: String,
    replica: String,
    reason: String,
    /// The `X-Slotcron-Replica` header of the request.
    sender: String,
}

/// The fleet's file: job `report` with `job`'s schedule, timeout and other lines, delivering to
/// `receiver`, alerting `oncall` (an http action to `alerts` whose body names the kind, job,
/// slot, replica and reason).
fn config(nodes: &[String], receiver: &str, alerts: &str, prefix: &str, job: [&str; 3]) -> String {
    let [schedule, timeout, job_extra] = job;
    let alert = format!(
        "[alert.oncall]\ntype = \"http\"\nurl = \"{alerts}/alert\"\nbody = \"outcome={{{{ outcome }}}}\\n\
         job={{{{ job }}}}\\nslot={{{{ slot_utc }}}}\\nreplica={{{{ replica }}}}\\nreason={{{{ error }}}}\""
    );
    FleetToml {
        job: "report",
        schedule,
        timeout,
        job_extra,
        scheduler: "max_clock_skew = \"1s\"\non_failure = \"oncall\"",
        rest: &alert,
        ..FleetToml::new(nodes, receiver, prefix)
    }
    .render()
}

/// Every alert the receiver got, in arrival order.
fn alerts(receiver: &Receiver) -> Vec<Alert> {
    receiver.received().iter().filter_map(parse_alert).collect()
}

fn parse_alert(request: &wiremock::Request) -> Option<Alert> {
    let body = String::from_utf8_lossy(&request.body);
    let fields: BTreeMap<&str, &str> = body.lines().filter_map(|l| l.split_once('=')).collect();
    let field = |k: &str| fields.get(k).map(|v| (*v).to_owned());
    Some(Alert {
        outcome: field("outcome")?,
        job: field("job")?,
        slot: field("slot")?,
        replica: field("replica")?,
        reason: field("reason")?,
        sender: request
            .headers
            .get("x-slotcron-replica")?
            .to_str()
            .ok()?
            .to_owned(),
    })
}

/// How long after the alert `cut` the next of its kind arrived (for FAULTS.md).
fn taken_over_after(receiver: &Receiver, cut: &Alert) -> Option<Duration> {
    let arrivals: Vec<chrono::DateTime<chrono::Utc>> = receiver
        .received_at()
        .iter()
        .filter(|(r, _)| parse_alert(r).is_some_and(|a| a.outcome == cut.outcome))
        .map(|(_, at)| *at)
        .collect();
    (*arrivals.get(1)? - *arrivals.first()?).to_std().ok()
}

/// The alerts of kind `outcome`, by slot.
fn by_slot(alerts: &[Alert], outcome: &str) -> BTreeMap<String, Vec<Alert>> {
    let mut slots: BTreeMap<String, Vec<Alert>> = BTreeMap::new();
    for a in alerts.iter().filter(|a| a.outcome == outcome) {
        slots.entry(a.slot.clone()).or_default().push(a.clone());
    }
    slots
}

/// The slots (RFC 3339, UTC) the job's receiver got a request for.
fn slots_run(receiver: &Receiver) -> Vec<String> {
    let mut slots: Vec<String> = receiver
        .counts_by_idempotency_key()
        .into_keys()
        .map(|k| k.trim_start_matches("report/").to_owned())
        .collect();
    slots.sort();
    slots
}

/// The fleet's replicas.
const IDS: [&str; 3] = ["r1", "r2", "r3"];

/// Three replicas [`IDS`] of the file at `path`.
fn replicas(path: &Path) -> Vec<Replica> {
    IDS.iter().map(|id| Replica::run(path, id, &[])).collect()
}

/// The ledger's alerts of each slot (`history --since --json`), by slot.
fn ledger_alerts(path: &Path) -> BTreeMap<String, Vec<String>> {
    let out = slotcron_cli(
        path,
        &["history", "--job", "report", "--since", "10m", "--json"],
    );
    let rows = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    rows.filter_map(|row| {
        let alerts = row.get("alerts")?.as_array()?;
        let kinds = alerts.iter().filter_map(|k| k.as_str().map(str::to_owned));
        Some((row["slot"].as_str()?.to_owned(), kinds.collect()))
    })
    .collect()
}

/// Whether some replica's log has the raced alert's line: `outcome`, job, slot, replica and
/// reason as stable fields.
fn logged(replicas: &[Replica], alert: &Alert) -> bool {
    replicas.iter().flat_map(Replica::json_lines).any(|l| {
        l["outcome"] == alert.outcome.as_str()
            && l["job"] == "report"
            && l["slot"] == alert.slot.as_str()
            && l["replica"] == alert.replica.as_str()
            && l["reason"] == alert.reason.as_str()
    })
}

#[test]
fn each_slot_held_past_its_deadline_alerts_once_then_recovers_once() {
    let cluster = RedisCluster::start(3);
    let (receiver, alert_receiver) = (Receiver::start(), Receiver::start());
    receiver.set_delay(HELD_PAST_DEADLINE);
    let dir = tempfile::tempdir().unwrap();
    let job = LATE_JOB;
    let text = config(
        &cluster.urls(),
        &receiver.uri(),
        &alert_receiver.uri(),
        "late",
        job,
    );
    let path = write_config(dir.path(), &text);
    let mut replicas = replicas(&path);
    // A fourth replica serves the status page.
    let port = free_port();
    let mut cmd = Replica::run_command(&path, "r4");
    cmd.args(["--http-listen", &format!("127.0.0.1:{port}")]);
    replicas.push(Replica::spawn_cmd("slotcron", cmd));
    let three = wait_until(PATIENCE, || {
        (by_slot(&alerts(&alert_receiver), "recovered").len() >= 3).then_some(())
    });
    assert!(
        three.is_some(),
        "no three recoveries: {:?}",
        alerts(&alert_receiver)
    );
    let alerts = alerts(&alert_receiver);
    let (late, recovered) = (by_slot(&alerts, "deadline"), by_slot(&alerts, "recovered"));
    // Every slot that ran, up to the last one done, was alerted late once and recovered once.
    let done: Vec<&String> = recovered.keys().collect();
    let ran = slots_run(&receiver);
    let settled: Vec<&String> = ran.iter().filter(|s| *s <= done[done.len() - 1]).collect();
    assert!(settled.len() >= 3, "{ran:?}");
    for slot in &settled {
        let (l, r) = (&late[*slot], &recovered[*slot]);
        assert_eq!((l.len(), r.len()), (1, 1), "{slot}: {l:?} {r:?}");
        assert!(l[0].reason.starts_with("still running on r"), "{l:?}");
        assert!(r[0].reason.contains("after the deadline alert"), "{r:?}");
        assert_eq!(
            (l[0].job.as_str(), l[0].replica == l[0].sender),
            ("report", true)
        );
    }
    assert!(
        late.values()
            .chain(recovered.values())
            .all(|a| a.len() == 1),
        "{alerts:?}"
    );
    eprintln!(
        "{} slots settled: each 1 deadline + 1 recovered alert; {} deadline, {} recovered alerts in all",
        settled.len(),
        late.len(),
        recovered.len()
    );
    let first = &late[settled[0]][0];
    assert!(
        wait_until(PATIENCE, || logged(&replicas, first).then_some(())).is_some(),
        "no log line for {first:?}"
    );
    // The ledger marks each settled slot with both alerts, in order.
    let ledger = ledger_alerts(&path);
    for slot in &settled {
        assert_eq!(
            ledger.get(*slot).map(Vec::as_slice),
            Some(&["deadline".to_owned(), "recovered".to_owned()][..]),
            "{slot}: {ledger:?}"
        );
    }
    // The status page shows the job's deadline and its last alert.
    let page = http_get(port, "/?job=report")
        .expect("the status page answers")
        .body;
    assert!(page.contains("deadline 1s after each slot"), "{page}");
    assert!(
        page.contains("last alert: <span class=\"outcome "),
        "{page}"
    );
}

#[test]
fn three_failures_then_a_success_send_one_recovery() {
    let cluster = RedisCluster::start(3);
    let (receiver, alert_receiver) = (Receiver::start(), Receiver::start());
    for _ in 0..3 {
        receiver.push_response(400, serde_json::json!({"error": "refused"}));
    }
    let dir = tempfile::tempdir().unwrap();
    let job = ["*/2 * * * * *", "5s", ""];
    let text = config(
        &cluster.urls(),
        &receiver.uri(),
        &alert_receiver.uri(),
        "recover",
        job,
    );
    let replicas = replicas(&write_config(dir.path(), &text));
    // Three failures, then three slots done: the recovery is owed by the first of them.
    let ran = wait_until(PATIENCE, || {
        let ran = slots_run(&receiver);
        (ran.len() >= 6).then_some(ran)
    })
    .expect("six slots run");
    let recovery = wait_until(PATIENCE, || {
        let r = by_slot(&alerts(&alert_receiver), "recovered");
        (!r.is_empty()).then_some(r)
    })
    .expect("a recovery");
    let alerts = alerts(&alert_receiver);
    let failed = by_slot(&alerts, "failed");
    assert_eq!(
        failed.keys().collect::<Vec<_>>(),
        ran[..3].iter().collect::<Vec<_>>()
    );
    let all: Vec<&Alert> = recovery.values().flatten().collect();
    assert_eq!(all.len(), 1, "{alerts:?}");
    assert_eq!(all[0].slot, ran[3]);
    assert!(all[0].reason.contains("after the failed alert"), "{all:?}");
    eprintln!(
        "{} slots run: {} failed alerts, recovered: {all:?}",
        ran.len(),
        failed.len()
    );
    assert!(logged(&replicas, all[0]), "no log line for {all:?}");
}

/// Waits for the first alert of kind `outcome`, whose request the receiver holds, SIGKILLs its
/// sender, and returns it with the sender's index.
fn kill_the_sender(receiver: &Receiver, replicas: &mut [Replica], outcome: &str) -> (Alert, usize) {
    let alert = wait_until(PATIENCE, || {
        alerts(receiver).into_iter().find(|a| a.outcome == outcome)
    })
    .unwrap_or_else(|| panic!("no {outcome} alert"));
    // Only the alert to be cut off is held: the one that replaces it is answered.
    receiver.set_delay(Duration::ZERO);
    let i = IDS
        .iter()
        .position(|id| *id == alert.sender)
        .expect("a sender of the fleet");
    replicas[i].kill();
    (alert, i)
}

#[test]
fn a_deadline_alert_whose_sender_is_sigkilled_in_flight_is_sent_once_by_another() {
    let cluster = RedisCluster::start(3);
    let (receiver, alert_receiver) = (Receiver::start(), Receiver::start());
    receiver.set_delay(HELD_PAST_DEADLINE);
    alert_receiver.set_delay(ALERT_IN_FLIGHT);
    let dir = tempfile::tempdir().unwrap();
    let job = LATE_JOB;
    let text = config(
        &cluster.urls(),
        &receiver.uri(),
        &alert_receiver.uri(),
        "kill-late",
        job,
    );
    let mut replicas = replicas(&write_config(dir.path(), &text));
    let (cut, _) = kill_the_sender(&alert_receiver, &mut replicas, "deadline");
    // Another replica takes the alert over once the dead sender's lease lapses; the fleet
    // goes on alerting the later slots.
    let later = wait_until(PATIENCE, || {
        let late = by_slot(&alerts(&alert_receiver), "deadline");
        (late.len() >= 3).then_some(late)
    })
    .expect("deadline alerts of later slots");
    eprintln!(
        "deadline alerts by slot: {later:#?}\ntaken over {:?} after the cut one arrived",
        taken_over_after(&alert_receiver, &cut)
    );
    let of_cut = &later[&cut.slot];
    assert_eq!(of_cut.len(), 2, "{of_cut:?}");
    assert_eq!(of_cut[0], cut);
    assert_ne!(of_cut[1].sender, cut.sender, "{of_cut:?}");
    assert!(
        later.values().all(|a| a.len() == 1 || a[0] == cut),
        "{later:?}"
    );
}

#[test]
fn a_recovery_whose_sender_is_sigkilled_in_flight_is_sent_once_by_another() {
    let cluster = RedisCluster::start(3);
    let (receiver, alert_receiver) = (Receiver::start(), Receiver::start());
    receiver.set_response(400, serde_json::json!({"error": "refused"}));
    let dir = tempfile::tempdir().unwrap();
    let job = ["*/2 * * * * *", "5s", ""];
    let text = config(
        &cluster.urls(),
        &receiver.uri(),
        &alert_receiver.uri(),
        "kill-rec",
        job,
    );
    let mut replicas = replicas(&write_config(dir.path(), &text));
    let failures = wait_until(PATIENCE, || {
        (by_slot(&alerts(&alert_receiver), "failed").len() >= 3).then_some(())
    });
    assert!(failures.is_some(), "three failed alerts");
    // The job succeeds only once the alerts are held: its recovery is held, so its sender
    // dies with it in flight.
    alert_receiver.set_delay(ALERT_IN_FLIGHT);
    receiver.set_response(200, Receiver::default_body());
    let (cut, _) = kill_the_sender(&alert_receiver, &mut replicas, "recovered");
    let seen = receiver.count();
    let again = wait_until(PATIENCE, || {
        let r = by_slot(&alerts(&alert_receiver), "recovered");
        (r.values().flatten().count() >= 2).then_some(())
    });
    assert!(
        again.is_some(),
        "the recovery was not taken over: {:?}",
        alerts(&alert_receiver)
    );
    // Three more slots done after the kill: still no third recovery.
    wait_until(PATIENCE, || (receiver.count() >= seen + 3).then_some(()))
        .expect("the fleet goes on");
    let recovered: Vec<Alert> = alerts(&alert_receiver)
        .into_iter()
        .filter(|a| a.outcome == "recovered")
        .collect();
    eprintln!(
        "recoveries: {recovered:#?}\ntaken over {:?} after the cut one arrived",
        taken_over_after(&alert_receiver, &cut)
    );
    assert_eq!(recovered.len(), 2, "{recovered:?}");
    assert_eq!(recovered[0], cut);
    assert_ne!(recovered[1].sender, cut.sender, "{recovered:?}");
}
