//! `jitter`: a slot's delay is a pure function of (key prefix, job, slot), in `[0, jitter)`,
//! the same on every replica whatever its clock; the slot keeps its nominal identity, is never
//! sent before nominal + delay, and a burst of jobs on one second is spread across the jitter
//! with every slot sent once, a replica SIGKILLed mid-window included.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use common::fleet::FleetToml;
use common::tools::libfaketime;
use common::{Receiver, RedisCluster, Replica, slotcron_cli_status, write_config};
use slotcron::unstable::time::jitter::{delay, delayed};
use slotcron::unstable::time::schedule::Slot;

fn slot(s: &str) -> Slot {
    Slot::at(s.parse().unwrap())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The function is pinned: these values were computed once (and checked against an
/// independent SHA-256 in Python, notes/jitter.en.md). A version that changes the function
/// moves every fleet's sends and mixes two spreads during a rolling update: it must fail here.
#[test]
fn the_delay_function_is_pinned_to_fixed_values() {
    let pinned = [
        (
            "slotcron",
            "daily-report",
            "2026-01-01T01:00:00Z",
            90_000,
            34_051,
        ),
        (
            "slotcron",
            "daily-report",
            "2026-01-02T01:00:00Z",
            90_000,
            68_767,
        ),
        (
            "slotcron",
            "standup",
            "2026-01-01T01:00:00Z",
            90_000,
            49_858,
        ),
        (
            "prod",
            "daily-report",
            "2026-01-01T01:00:00Z",
            90_000,
            1_656,
        ),
        ("slotcron", "beat", "2026-03-08T07:00:00Z", 1, 0),
        ("slotcron", "beat", "2026-03-08T07:00:00Z", 1_000, 101),
        (
            "slotcron",
            "beat",
            "2026-03-08T07:00:00Z",
            3_600_000,
            2_489_101,
        ),
    ];
    for (prefix, job, at, jitter, expected) in pinned {
        let got = delay(prefix, job, slot(at), ms(jitter));
        assert_eq!(got, ms(expected), "{prefix} {job} {at} jitter {jitter} ms");
    }
}

/// 10^6 (job, slot) pairs over jitters from 1 ms to an hour: every delay in `[0, jitter)`, in
/// whole milliseconds, and the same when computed again. The spread is not degenerate: the
/// delays of each jitter reach both its first and its last hundredth.
#[test]
fn a_million_job_slot_pairs_have_their_delay_in_zero_to_jitter() {
    let jitters = [1, 2, 7, 999, 60_000, 90_000, 3_600_000].map(ms);
    let first = slot("2026-01-01T00:00:00Z").instant();
    let mut pairs = 0u32;
    let mut reach: BTreeMap<u128, (Duration, Duration)> = BTreeMap::new();
    for j in 0..1_000 {
        let (job, jitter) = (format!("job-{j}"), jitters[j % jitters.len()]);
        for s in 0..1_000 {
            let slot = Slot::at(first + chrono::Duration::minutes(s * 7 + j as i64));
            let d = delay("slotcron", &job, slot, jitter);
            assert!(d < jitter, "{job} {slot}: {d:?} not below {jitter:?}");
            assert_eq!(d.subsec_nanos() % 1_000_000, 0, "{d:?} is not whole ms");
            if s % 97 == 0 {
                assert_eq!(delay("slotcron", &job, slot, jitter), d, "not pure");
            }
            let seen = reach
                .entry(jitter.as_millis())
                .or_insert((jitter, Duration::ZERO));
            *seen = (seen.0.min(d), seen.1.max(d));
            pairs += 1;
        }
    }
    assert_eq!(pairs, 1_000_000);
    for (jitter_ms, (lo, hi)) in reach.into_iter().filter(|(j, _)| *j >= 100) {
        let hundredth = ms(jitter_ms as u64 / 100);
        assert!(lo < hundredth, "jitter {jitter_ms} ms: lowest delay {lo:?}");
        assert!(
            hi >= ms(jitter_ms as u64) - hundredth,
            "jitter {jitter_ms} ms: highest {hi:?}"
        );
    }
}

/// One `log` job of `schedule` with `extra` keys, `[scheduler]` lines in `scheduler`.
fn job_file(scheduler: &str, schedule: &str, extra: &str) -> String {
    format!(
        "[scheduler]\n{scheduler}\n[[job]]\nname = \"spread\"\nschedule = \"{schedule}\"\n\
         {extra}\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n"
    )
}

/// A jitter larger than the job's interval, or past what the start window allows, is refused
/// by `check` (exit 2) naming the file, the job, the key and both numbers; `[scheduler]`'s is
/// judged on each job that takes it; one that fits is accepted.
#[test]
fn a_jitter_past_the_interval_or_the_windows_reach_is_refused_naming_both_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            job_file("", "0 */5 * * * *", "jitter = \"6m\""),
            &["jitter 6m", "interval 5m"][..],
        ),
        (
            job_file("jitter = \"2s\"", "* * * * * *", ""),
            &["[scheduler] jitter 2s", "interval 1s"][..],
        ),
        (
            job_file(
                "max_clock_skew = \"30s\"",
                "0 9 * * *",
                "jitter = \"59m40s\"",
            ),
            &["jitter 59m 40s", "start window 30s", "past 1h"][..],
        ),
        (
            job_file("", "0 9 * * *", "jitter = \"2h\""),
            &["jitter", "0s to 1h"][..],
        ),
    ];
    for (text, said) in cases {
        let path = write_config(dir.path(), &text);
        let (code, out) = slotcron_cli_status(&path, &["check"]);
        assert_eq!(code, Some(2), "{text}\n{out}");
        let named = format!("{}", path.display());
        for part in [named.as_str(), "job \"spread\"", "field \"jitter\""]
            .iter()
            .chain(said)
        {
            assert!(out.contains(part), "{part:?} not in:\n{out}");
        }
    }
    let fits = job_file("jitter = \"90s\"", "0 9 * * *", "");
    let path = write_config(dir.path(), &fits);
    let (code, out) = slotcron_cli_status(&path, &["check", "--next", "2"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("jitter 1m 30s"), "{out}");
}

/// `check --next` shows each slot's nominal instant and the delayed one it is sent at, with
/// the delay every replica computes.
#[test]
fn check_next_shows_the_nominal_and_the_delayed_instant() {
    let dir = tempfile::tempdir().unwrap();
    let text = job_file("key_prefix = \"shown\"", "0 9 * * *", "jitter = \"90s\"");
    let path = write_config(dir.path(), &text);
    let (code, out) = slotcron_cli_status(&path, &["check", "--next", "3"]);
    assert_eq!(code, Some(0), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" sent at ")).collect();
    assert_eq!(lines.len(), 3, "{out}");
    for line in lines {
        let mut words = line.split_whitespace();
        let nominal: DateTime<Utc> = words.next().unwrap().parse().unwrap();
        let sent: DateTime<Utc> = words.nth(2).unwrap().parse().unwrap();
        let d = delay(
            "shown",
            "spread",
            Slot::at(nominal),
            Duration::from_secs(90),
        );
        assert_eq!(sent, delayed(Slot::at(nominal), d), "{line}");
        assert!(
            line.ends_with(&format!("(jitter_ms {})", d.as_millis())),
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Fleets
// ---------------------------------------------------------------------------------------------

fn wait_started(replicas: &[Replica]) {
    for r in replicas {
        let up = r.wait_for_line(Duration::from_secs(30), |l| l.contains("slotcron started"));
        assert!(up.is_some(), "a replica did not start: {:?}", r.lines());
    }
}

fn stop(replicas: &[Replica]) {
    for r in replicas.iter().filter(|r| r.is_running()) {
        r.terminate();
        assert!(
            r.wait_timeout(Duration::from_secs(30)).is_some(),
            "{} did not stop",
            r.name()
        );
    }
}

/// Each request's job, nominal slot and arrival (on this process's clock, which is the Redis
/// nodes' too: neither runs under libfaketime).
fn sends(receiver: &Receiver) -> Vec<(String, Slot, DateTime<Utc>)> {
    let header = |r: &wiremock::Request, name: &str| r.headers[name].to_str().unwrap().to_owned();
    let sends = receiver.received_at().into_iter();
    sends
        .map(|(r, at)| {
            (
                header(&r, "x-slotcron-job"),
                slot(&header(&r, "x-slotcron-slot")),
                at,
            )
        })
        .collect()
}

/// No send before its slot's nominal instant plus its delay on `prefix` with `jitter`.
fn assert_never_early(sent: &[(String, Slot, DateTime<Utc>)], prefix: &str, jitter: Duration) {
    for (job, slot, at) in sent {
        let due = delayed(*slot, delay(prefix, job, *slot, jitter));
        assert!(*at >= due, "{job} {slot} sent at {at}, before {due}");
    }
}

/// The `jitter_ms` of each slot a replica logged as `won` or `lost`.
fn logged_jitter(replica: &Replica) -> BTreeMap<String, u64> {
    let raced = |l: &serde_json::Value| l["outcome"] == "won" || l["outcome"] == "lost";
    let lines = replica.json_lines().into_iter().filter(raced);
    lines
        .filter_map(|l| Some((l["slot"].as_str()?.to_owned(), l["jitter_ms"].as_u64()?)))
        .collect()
}

/// A replica process of `config` under libfaketime, its wall clock `offset` from the true one.
fn skewed(lib: &Path, config: &Path, name: &str, offset: &str) -> Replica {
    let preload = lib.to_string_lossy().into_owned();
    let env = [
        ("LD_PRELOAD", preload.as_str()),
        ("FAKETIME", offset),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    Replica::run(config, name, &env)
}

/// Five replica processes whose wall clocks disagree by up to 10 s (libfaketime, as
/// `it::fleet_clock` does) all race every slot (`candidates = "all"`) and log the same
/// `jitter_ms` for it, the pure function's; every slot is sent once, none before its
/// nominal instant plus its delay by the receiver's clock (the Redis nodes' time).
#[test]
fn five_replicas_on_skewed_clocks_log_the_same_jitter_ms_and_never_send_early() {
    let Some(lib) = libfaketime() else {
        return;
    };
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (prefix, jitter) = ("jitter5", Duration::from_secs(3));
    let urls = cluster.urls();
    let text = FleetToml {
        job: "spread",
        schedule: "*/3 * * * * *",
        timeout: "2s",
        scheduler: "candidates = \"all\"",
        // Headroom for a loaded 2-core machine, as fleet_clock's.
        redis: "node_timeout = \"500ms\"",
        job_extra: "jitter = \"3s\"",
        ..FleetToml::new(&urls, &receiver.uri(), prefix)
    }
    .render();
    let config = write_config(dir.path(), &text);
    let mut replicas = vec![Replica::run(&config, "true", &[])];
    for (name, offset) in [
        ("ahead-2s", "+2s"),
        ("behind-2s", "-2s"),
        ("ahead-5s", "+5s"),
    ] {
        replicas.push(skewed(&lib, &config, name, offset));
    }
    replicas.push(skewed(&lib, &config, "behind-5s", "-5s"));
    wait_started(&replicas);
    let started = Utc::now();
    // Eight slots after every replica started: 24 s of slots, waited for (not slept).
    let enough = common::wait_until(Duration::from_secs(120), || {
        let after: BTreeSet<Slot> = sends(&receiver)
            .into_iter()
            .filter(|(_, s, _)| s.instant() > started)
            .map(|s| s.1)
            .collect();
        (after.len() >= 8).then_some(())
    });
    stop(&replicas);
    assert!(
        enough.is_some(),
        "fewer than 8 slots sent: {:?}",
        sends(&receiver)
    );
    let sent = sends(&receiver);
    assert_never_early(&sent, prefix, jitter);
    assert!(
        receiver.duplicate_keys().is_empty(),
        "twice: {:?}",
        receiver.duplicate_keys()
    );
    let logged: Vec<BTreeMap<String, u64>> = replicas.iter().map(logged_jitter).collect();
    for (replica, slots) in replicas.iter().zip(&logged) {
        for (at, jitter_ms) in slots {
            let expected = delay(prefix, "spread", slot(at), jitter).as_millis() as u64;
            assert_eq!(
                *jitter_ms,
                expected,
                "{} logged {at} with jitter_ms",
                replica.name()
            );
        }
    }
    let judged: Vec<&Slot> = sent
        .iter()
        .map(|(_, s, _)| s)
        .filter(|s| s.instant() > started)
        .collect();
    for s in judged {
        let key = s.to_string();
        let seen: BTreeSet<u64> = logged.iter().filter_map(|l| l.get(&key).copied()).collect();
        let by = logged.iter().filter(|l| l.contains_key(&key)).count();
        eprintln!("{key}: jitter_ms {seen:?} logged by {by} of 5 replicas");
        assert_eq!(by, 5, "{key} was not raced by every replica");
        assert_eq!(
            seen.len(),
            1,
            "{key}: replicas logged different jitter_ms {seen:?}"
        );
    }
    assert_history_shows_both(&config, prefix, jitter);
}

/// `history` keeps the nominal slot and shows the delayed instant beside it: `--json` rows
/// carry `jitter_ms` and `delayed` (the pure function's), the table a `DELAYED` column.
fn assert_history_shows_both(config: &Path, prefix: &str, jitter: Duration) {
    let json = common::slotcron_cli(config, &["history", "--json", "--job", "spread"]);
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(rows.len() >= 8, "{json}");
    for row in rows {
        let nominal = slot(row["slot"].as_str().unwrap());
        let d = delay(prefix, "spread", nominal, jitter);
        assert_eq!(
            row["jitter_ms"].as_u64(),
            Some(d.as_millis() as u64),
            "{row}"
        );
        let shown: DateTime<Utc> = row["delayed"].as_str().unwrap().parse().unwrap();
        assert_eq!(shown, delayed(nominal, d), "{row}");
    }
    let table = common::slotcron_cli(config, &["history", "--job", "spread"]);
    let head = table.lines().next().unwrap_or_default();
    assert!(head.contains("SLOT") && head.contains("DELAYED"), "{table}");
}

/// `jobs` jobs named `burst-N`, each at `at` (daily, in UTC) with `jitter = "60s"`.
fn burst_file(
    urls: &[String],
    receiver: &str,
    prefix: &str,
    jobs: usize,
    at: DateTime<Utc>,
) -> String {
    let cron = format!("{} {} {} * * *", at.second(), at.minute(), at.hour());
    let job = |i: usize| {
        format!(
            "[[job]]\nname = \"burst-{i}\"\nschedule = \"{cron}\"\ntimeout = \"5s\"\n\
             jitter = \"60s\"\n[job.action]\ntype = \"http\"\nurl = \"{receiver}/hook\"\n"
        )
    };
    let rest: String = (1..jobs).map(job).collect();
    FleetToml {
        job: "burst-0",
        schedule: &cron,
        timeout: "5s",
        scheduler: "max_clock_skew = \"2s\"",
        redis: "node_timeout = \"500ms\"",
        job_extra: "jitter = \"60s\"",
        rest: &rest,
        ..FleetToml::new(urls, receiver, prefix)
    }
    .render()
}

/// The sends of each second after `at`: how many arrived in it.
fn per_second(
    arrivals: impl Iterator<Item = DateTime<Utc>>,
    at: DateTime<Utc>,
) -> BTreeMap<i64, usize> {
    let mut seconds = BTreeMap::new();
    for arrived in arrivals {
        *seconds.entry((arrived - at).num_seconds()).or_insert(0) += 1;
    }
    seconds
}

/// 500 jobs due at the same second with `jitter = "60s"` on 3 replica processes (default
/// candidates) over 3 Redis nodes; one node SIGKILLed 20 s into the window and one replica
/// 30 s into it: every slot is sent once (0 duplicated, 0 missed), none before its delay, and the sends follow the delays: the busiest second holds
/// what the function puts in it (give or take the seconds a send straddles), never more than
/// 5 % of the sends (500 delays drawn uniformly over 60 s put about 3 % in the busiest second,
/// above 3 % in half the draws: notes/jitter.en.md).
#[test]
fn five_hundred_jobs_on_one_second_spread_over_60s_each_sent_once_with_a_node_and_a_replica_killed()
{
    const JOBS: usize = 500;
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (prefix, jitter) = ("burst500", Duration::from_secs(60));
    // 20 s ahead: time for three replicas to start on a loaded machine before the slot.
    let at = Slot::at(Utc::now() + chrono::Duration::seconds(20)).instant();
    let config = write_config(
        dir.path(),
        &burst_file(&cluster.urls(), &receiver.uri(), prefix, JOBS, at),
    );
    let replicas: Vec<Replica> = ["b-1", "b-2", "b-3"]
        .iter()
        .map(|n| Replica::run(&config, n, &[]))
        .collect();
    wait_started(&replicas);
    assert!(
        Utc::now() < at,
        "the replicas started after the slot; nothing judged"
    );
    // Mid-window: the sends of the first third or half have left, the others are to come.
    let until = |t: DateTime<Utc>| {
        common::wait_until(Duration::from_secs(90), || (Utc::now() >= t).then_some(()))
    };
    let _ = until(at + chrono::Duration::seconds(20));
    cluster.iter().next().unwrap().kill();
    let _ = until(at + chrono::Duration::seconds(30));
    replicas[0].kill();
    // Every slot's delay runs out by at + 60 s; wait for the sends, not a fixed time.
    receiver.wait_for(JOBS, Duration::from_secs(120));
    stop(&replicas[1..]);
    let sent: Vec<_> = sends(&receiver)
        .into_iter()
        .filter(|(_, s, _)| s.instant() == at)
        .collect();
    assert_never_early(&sent, prefix, jitter);
    let duplicated = receiver.duplicate_keys();
    let jobs: BTreeSet<&str> = sent.iter().map(|(job, _, _)| job.as_str()).collect();
    let missed: Vec<String> = (0..JOBS)
        .map(|i| format!("burst-{i}"))
        .filter(|j| !jobs.contains(j.as_str()))
        .collect();
    let killed_lines = replicas[0].json_lines();
    let killed_won = killed_lines
        .iter()
        .filter(|l| l["outcome"] == "won")
        .count();
    let predicted = per_second(
        (0..JOBS).map(|i| {
            delayed(
                Slot::at(at),
                delay(prefix, &format!("burst-{i}"), Slot::at(at), jitter),
            )
        }),
        at,
    );
    let measured = per_second(sent.iter().map(|(_, _, t)| *t), at);
    let busiest = |m: &BTreeMap<i64, usize>| m.values().copied().max().unwrap_or(0);
    eprintln!(
        "{} sent of {JOBS}; duplicated {duplicated:?}; missed {missed:?}; the killed replica won \
         {killed_won}; busiest second: {} sends measured, {} by the function; per second {measured:?}",
        sent.len(),
        busiest(&measured),
        busiest(&predicted)
    );
    assert!(duplicated.is_empty(), "duplicated: {duplicated:?}");
    assert!(missed.is_empty(), "missed: {missed:?}");
    assert!(
        killed_won > 0,
        "the killed replica won nothing before it died: no kill mid-window"
    );
    assert!(
        measured.len() >= 55,
        "the sends are not spread over the minute: {measured:?}"
    );
    assert!(
        busiest(&measured) <= busiest(&predicted) + 3,
        "{measured:?} vs {predicted:?}"
    );
    assert!(
        busiest(&measured) * 100 <= JOBS * 5,
        "busiest second over 5 %: {measured:?}"
    );
}

/// The library's `JobSpec::jitter` reaches the same checks and the same timeline as
/// jobs.toml's: one past the job's interval is refused naming the job and the builder's
/// field and both numbers; one that fits runs each slot at or after its nominal instant plus
/// its delay, with the nominal instant in the slot's context.
#[tokio::test]
async fn the_librarys_jobspec_jitter_is_checked_and_delays_the_run() {
    use slotcron::{Fleet, JobSpec, SlotContext};
    let refused = Fleet::new("lib-j")
        .job(
            JobSpec::new("beat", "* * * * * *").jitter(Duration::from_secs(2)),
            |_| async { Ok::<(), String>(()) },
        )
        .start()
        .await;
    let Err(error) = refused else {
        panic!("a jitter past the interval started");
    };
    let shown = error.to_string();
    for part in ["job \"beat\", jitter: ", "jitter 2s", "interval 1s"] {
        assert!(shown.contains(part), "{part:?} not in {shown}");
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let jitter = Duration::from_secs(2);
    let spec = JobSpec::new("pulse", "*/2 * * * * *").jitter(jitter);
    let handle = Fleet::new("lib-j")
        .key_prefix("libjitter")
        .job(spec, move |ctx: SlotContext| {
            let tx = tx.clone();
            async move { tx.send((ctx.slot(), Utc::now())).map_err(|e| e.to_string()) }
        })
        .start()
        .await
        .unwrap();
    for _ in 0..3 {
        // Three slots: 6 s of schedule; the wait is generous for a loaded machine.
        let ran = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        let (nominal, at) = ran.expect("no run within 30 s").expect("the fleet stopped");
        let due = delayed(
            Slot::at(nominal),
            delay("libjitter", "pulse", Slot::at(nominal), jitter),
        );
        assert!(at >= due, "slot {nominal} ran at {at}, before {due}");
        assert_eq!(
            Slot::at(nominal).instant(),
            nominal,
            "the context's slot is not nominal"
        );
    }
    handle.shutdown().await.unwrap();
}
