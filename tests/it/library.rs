//! slotcron as a library, on real processes over real Redis nodes: the `singleton` example (jobs
//! built in code) and the `tcs_guard` example (a tokio-cron-scheduler job behind the guard), each
//! run as a fleet of processes whose wall clocks are skewed with libfaketime, print every slot
//! exactly once across the fleet; and a job's function's `Ok`, `Err` and panic become the slot's
//! outcome in the fleet's history, while shutdown waits for a running function.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use common::fleet::FleetToml;
use common::tools::libfaketime;
use common::{RedisCluster, Replica, slotcron_cli, wait_until, write_config};
use slotcron::{Fleet, JobSpec, Outcome, Overlap, SlotContext, Trigger};

/// The examples, built once per test run (`cargo build --examples --all-features`: the debug
/// profile; the book's command for users says `--release`).
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            .args(["build", "--examples", "--all-features"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo build --examples");
        assert!(status.success(), "cargo build --examples failed");
    });
    let bin = Path::new(env!("CARGO_BIN_EXE_slotcron"));
    bin.with_file_name("examples").join(name)
}

/// One example process as replica `id` on `nodes`, its wall clock `offset` seconds off (the
/// monotonic clock left true, as a skewed host's is).
fn skewed(lib: &Path, name: &str, nodes: &[String], id: &str, offset: f64) -> Replica {
    let preload = lib.to_string_lossy().into_owned();
    let faketime = format!("{offset:+.1}s");
    let env = [
        ("LD_PRELOAD", preload.as_str()),
        ("FAKETIME", faketime.as_str()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let nodes = nodes.join(",");
    let args = ["--nodes", nodes.as_str(), "--replica-id", id];
    Replica::spawn(example(name), &args, &env)
}

/// A `ran beat` line: its slot, fence and replica.
#[derive(Debug, Clone)]
struct Ran {
    slot: DateTime<Utc>,
    fence: i64,
    replica: String,
}

/// Parses `ran beat <slot> fence=<fence> replica=<ID>`; any other line is not a run.
fn ran(line: &str) -> Option<Ran> {
    let rest = line.strip_prefix("ran beat ")?;
    let mut parts = rest.split(' ');
    let slot = DateTime::parse_from_rfc3339(parts.next()?).ok()?.to_utc();
    let fence = parts.next()?.strip_prefix("fence=")?.parse().ok()?;
    let replica = parts.next()?.strip_prefix("replica=")?.to_owned();
    Some(Ran {
        slot,
        fence,
        replica,
    })
}

/// Runs the fleet of `name` processes, one per offset, started `spacing` apart, for `run`
/// after the last start; stops them with SIGTERM (each must exit 0) and returns every run
/// line with the window every slot of which must be printed: from the last start plus
/// `warm_up` to the stop less a second.
fn run_fleet(
    lib: &Path,
    name: &str,
    offsets: &[f64],
    spacing: Duration,
    run: Duration,
) -> (Vec<Ran>, DateTime<Utc>, DateTime<Utc>) {
    let cluster = RedisCluster::start(3);
    let mut replicas = Vec::new();
    for (i, offset) in offsets.iter().enumerate() {
        let id = format!("{name}-{i}");
        replicas.push(skewed(lib, name, &cluster.urls(), &id, *offset));
        std::thread::sleep(spacing);
    }
    let from = Utc::now() + chrono::Duration::seconds(WARM_UP_S);
    std::thread::sleep(run);
    let to = Utc::now() - chrono::Duration::seconds(1);
    let mut lines = Vec::new();
    for r in &replicas {
        r.terminate();
    }
    for r in &replicas {
        let status = r.wait_timeout(Duration::from_secs(20));
        assert!(
            status.is_some_and(|s| s.success()),
            "{} did not stop cleanly on SIGTERM: {status:?}",
            r.name()
        );
        lines.extend(r.lines().iter().filter_map(|l| ran(l)));
    }
    (lines, from, to)
}

/// How long after the last start every slot must be printed: a process measures the fleet
/// clock before its first race (the earlier ones are already racing by then).
const WARM_UP_S: i64 = 3;

/// Every slot from `from` to `to` printed exactly once, each by the replica and with the
/// fence it names; a slot outside the window at most once.
fn assert_each_slot_once(runs: &[Ran], from: DateTime<Utc>, to: DateTime<Utc>) {
    let mut by_slot: BTreeMap<DateTime<Utc>, Vec<&Ran>> = BTreeMap::new();
    for run in runs {
        assert_eq!(
            run.fence,
            run.slot.timestamp_millis(),
            "a first run's fence is its slot: {run:?}"
        );
        by_slot.entry(run.slot).or_default().push(run);
    }
    let twice: Vec<_> = by_slot.values().filter(|r| r.len() > 1).collect();
    assert!(twice.is_empty(), "slots printed more than once: {twice:?}");
    let mut missing = Vec::new();
    let mut slot = from.with_nanosecond_zero() + chrono::Duration::seconds(1);
    while slot <= to {
        if !by_slot.contains_key(&slot) {
            missing.push(slot.to_rfc3339_opts(SecondsFormat::Secs, true));
        }
        slot += chrono::Duration::seconds(1);
    }
    let window = (to - from).num_seconds();
    assert!(
        missing.is_empty(),
        "slots of the {window} s window printed by no replica: {missing:?}"
    );
    let replicas: std::collections::BTreeSet<_> = runs.iter().map(|r| &r.replica).collect();
    println!(
        "{} slots over {window} s, each once, run by {} replicas",
        by_slot.len(),
        replicas.len()
    );
}

/// `DateTime::with_nanosecond(0)` without the `Option` (0 is always valid).
trait WholeSecond {
    fn with_nanosecond_zero(self) -> Self;
}

impl WholeSecond for DateTime<Utc> {
    fn with_nanosecond_zero(self) -> Self {
        use chrono::Timelike as _;
        self.with_nanosecond(0).unwrap_or(self)
    }
}

#[test]
fn ten_singletons_with_clocks_skewed_two_seconds_print_every_slot_once() {
    // Spread over -2 s .. +2 s: gocron #841's failing case (tickers apart by up to 4 s).
    let offsets = [-2.0, 1.6, -1.2, 0.8, -0.4, 0.0, 0.4, -0.8, 1.2, 2.0];
    let spacing = Duration::from_millis(300);
    let Some(lib) = libfaketime() else {
        return;
    };
    let (runs, from, to) = run_fleet(
        &lib,
        "singleton",
        &offsets,
        spacing,
        Duration::from_secs(30),
    );
    assert_each_slot_once(&runs, from, to);
}

/// `slotcron history --json` of `job` on the fleet at `nodes` under `prefix`: each run's
/// record (job, slot, outcome, error, trigger, fence, ...).
fn history(nodes: &[String], prefix: &str, job: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let text = FleetToml {
        job,
        timeout: "",
        scheduler: "",
        redis: "",
        action: "type = \"log\"\ncontent = \"x\"",
        ..FleetToml::new(nodes, "", prefix)
    }
    .render();
    let config = write_config(dir.path(), &text);
    let out = slotcron_cli(
        &config,
        &["history", "--json", "--job", job, "--limit", "100"],
    );
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The outcomes (and errors) of `records`, each once.
fn outcomes(records: &[serde_json::Value]) -> Vec<(String, String)> {
    let mut seen: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            let error = r["error"].as_str().unwrap_or_default();
            // The slot's second varies; the text around it must be the function's.
            let error = error.split(" at ").next().unwrap_or_default().to_owned();
            (r["outcome"].as_str().unwrap_or_default().to_owned(), error)
        })
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_ok_err_and_panic_are_the_slots_done_and_failed_in_the_history() {
    let cluster = RedisCluster::start(3);
    let seen: Arc<std::sync::Mutex<Vec<SlotContext>>> = Arc::default();
    let record = seen.clone();
    let handle = Fleet::new("lib-1")
        .nodes(cluster.urls())
        .key_prefix("outcomes")
        .job(
            JobSpec::new("fine", "* * * * * *").zone("Asia/Shanghai"),
            move |ctx| {
                record.lock().unwrap().push(ctx);
                async { Ok::<(), std::io::Error>(()) }
            },
        )
        .job(JobSpec::new("broken", "* * * * * *"), |ctx| async move {
            Err(format!("no database at {}", ctx.slot()))
        })
        .job(JobSpec::new("panicky", "* * * * * *"), |ctx| async move {
            assert!(ctx.slot() < ctx.slot(), "out of luck");
            Ok::<(), String>(())
        })
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    handle.shutdown().await.unwrap();
    let urls = cluster.urls();
    let fine = history(&urls, "outcomes", "fine");
    assert!(fine.len() >= 2, "too few runs of fine: {fine:?}");
    assert_eq!(outcomes(&fine), [("done".to_owned(), String::new())]);
    let broken = history(&urls, "outcomes", "broken");
    assert!(broken.len() >= 2, "too few runs of broken: {broken:?}");
    assert_eq!(
        outcomes(&broken),
        [("failed".to_owned(), "no database".to_owned())]
    );
    let panicky = outcomes(&history(&urls, "outcomes", "panicky"));
    assert_eq!(
        panicky,
        [(
            "failed".to_owned(),
            "the job's function panicked: out of luck".to_owned()
        )]
    );
    let seen = seen.lock().unwrap();
    assert!(seen.len() >= 2, "the function ran {} time(s)", seen.len());
    for ctx in seen.iter() {
        assert_eq!((ctx.job(), ctx.replica()), ("fine", "lib-1"));
        assert_eq!((ctx.trigger(), ctx.attempt()), (Trigger::Schedule, 1));
        assert_eq!(ctx.fence(), ctx.slot().timestamp_millis());
        assert_eq!(
            ctx.slot_local().naive_local(),
            ctx.slot().naive_utc() + chrono::Duration::hours(8)
        );
        assert!(
            fine.iter().any(|r| r["fence"] == ctx.fence()),
            "{ctx:?} not in {fine:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_running_function_and_records_it() {
    let cluster = RedisCluster::start(1);
    let (started, mut running) = tokio::sync::mpsc::channel::<()>(8);
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    let handle = Fleet::new("lib-1")
        .nodes(cluster.urls())
        .key_prefix("shutdown")
        .job(JobSpec::new("slow", "* * * * * *"), move |_| {
            let (started, done) = (started.clone(), done.clone());
            async move {
                let _ = started.send(()).await;
                tokio::time::sleep(Duration::from_millis(1500)).await;
                done.store(true, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        })
        .start()
        .await
        .unwrap();
    running.recv().await.unwrap();
    handle.shutdown().await.unwrap();
    assert!(
        finished.load(Ordering::SeqCst),
        "shutdown returned while the function was still running"
    );
    let runs = history(&cluster.urls(), "shutdown", "slow");
    assert_eq!(outcomes(&runs), [("done".to_owned(), String::new())]);
}
#[test]
fn five_tcs_guards_with_clocks_skewed_one_second_print_every_slot_once() {
    let offsets = [-1.0, 0.5, 0.0, -0.5, 1.0];
    let spacing = Duration::from_millis(300);
    let Some(lib) = libfaketime() else {
        return;
    };
    let (runs, from, to) = run_fleet(
        &lib,
        "tcs_guard",
        &offsets,
        spacing,
        Duration::from_secs(20),
    );
    assert_each_slot_once(&runs, from, to);
}

#[tokio::test]
async fn invalid_jobs_are_refused_at_start_as_a_list_naming_the_builders_fields() {
    let fleet = Fleet::new("lib-1")
        .nodes(["http://10.0.0.1:6379"])
        .job(JobSpec::new("no spaces", "* * * * * *"), |_| async {
            Ok::<(), String>(())
        })
        .job(JobSpec::new("late", "0 61 * * *"), |_| async {
            Ok::<(), String>(())
        })
        .job(
            JobSpec::new("zoned", "0 9 * * *").zone("Mars/Olympus_Mons"),
            |_| async { Ok::<(), String>(()) },
        )
        .job(
            JobSpec::new("alerting", "0 9 * * *").on_failure("nobody"),
            |_| async { Ok::<(), String>(()) },
        );
    let Err(error) = fleet.start().await else {
        panic!("invalid jobs started");
    };
    // What `main` returning this error prints is its Debug form: the same readable list.
    let shown = format!("{error:?}");
    assert_eq!(shown, error.to_string());
    eprintln!("{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], "the fleet is invalid (5 problems):", "{shown}");
    for needle in [
        "Fleet::nodes",
        "job \"no spaces\", name: ",
        "job \"late\", cron: ",
        "job \"zoned\", zone: ",
        "job \"alerting\", on_failure: ",
    ] {
        let line = lines.iter().find(|l| l.contains(needle));
        assert!(line.is_some(), "no line names {needle:?}:\n{shown}");
    }
    for toml_word in [
        "schedule", "timezone", "[redis]", "[alert", "field \"", "Config(",
    ] {
        assert!(!shown.contains(toml_word), "{toml_word:?} in:\n{shown}");
    }
}

/// The jobs.toml of the jobs in `a_library_job_is_refused_for_what_the_same_job_in_jobs_toml_is`.
const BAD_JOBS_TOML: &str = r#"
[calendar.holidays-calendar]
builtin = "xx"

[[job]]
name = "no spaces"
schedule = "* * * * * *"
[job.action]
type = "log"
content = "x"

[[job]]
name = "late"
schedule = "0 61 * * *"
[job.action]
type = "log"
content = "x"

[[job]]
name = "zoned"
schedule = "0 9 * * *"
timezone = "Mars/Olympus_Mons"
[job.action]
type = "log"
content = "x"

[[job]]
name = "limits"
schedule = "* * * * *"
timeout = "0s"
jitter = "90s"
catch_up = "0s"
deadline = "10m"
[job.action]
type = "log"
content = "x"

[[job]]
name = "policy"
schedule = "0 9 * * *"
catch_up_policy = "all"
[job.action]
type = "log"
content = "x"

[[job]]
name = "holidays"
schedule = "0 9 * * *"
calendar = "holidays-calendar"
days = "holidays"
[job.action]
type = "log"
content = "x"
"#;

/// An error as (job, field, message), the field named as the builder names it: the checks are
/// the loader's, and only the words for the keys differ (`cron` for `schedule`, `zone` for
/// `timezone`, a job's own calendar as `Calendar (KEY)` of the job).
fn as_built(error: &slotcron::ConfigError) -> (Option<String>, String, String) {
    use slotcron::{Location, Section};
    let message = error.message.clone();
    let Location::Field { section, field } = &error.location else {
        return (None, String::new(), message);
    };
    let builder = match field.as_str() {
        "schedule" => "cron".to_owned(),
        "timezone" => "zone".to_owned(),
        other => other.to_owned(),
    };
    match section {
        Section::Calendar(calendar) => {
            let job = calendar.strip_suffix("-calendar").map(str::to_owned);
            (job, format!("Calendar ({field})"), message)
        }
        _ => (error.job().map(str::to_owned), builder, message),
    }
}

#[tokio::test]
async fn a_library_job_is_refused_for_what_the_same_job_in_jobs_toml_is() {
    use slotcron::{Calendar, CatchUpPolicy};
    let ok = |_| async { Ok::<(), String>(()) };
    let minutes = |m: u64| Duration::from_secs(60 * m);
    let fleet = Fleet::new("lib-1")
        .job(JobSpec::new("no spaces", "* * * * * *"), ok)
        .job(JobSpec::new("late", "0 61 * * *"), ok)
        .job(
            JobSpec::new("zoned", "0 9 * * *").zone("Mars/Olympus_Mons"),
            ok,
        )
        .job(
            JobSpec::new("limits", "* * * * *")
                .timeout(Duration::ZERO)
                .jitter(Duration::from_secs(90))
                .catch_up(Duration::ZERO)
                .deadline(minutes(10)),
            ok,
        )
        .job(
            JobSpec::new("policy", "0 9 * * *").catch_up_policy(CatchUpPolicy::All),
            ok,
        )
        .job(
            JobSpec::new("holidays", "0 9 * * *").holidays(Calendar::builtin("xx")),
            ok,
        );
    let Err(slotcron::Error::Config(built)) = fleet.start().await else {
        panic!("invalid jobs were not refused as a configuration");
    };
    let env = std::collections::HashMap::<String, String>::new();
    let path = Path::new("jobs.toml");
    let file = slotcron::unstable::config::parse(path, BAD_JOBS_TOML, &env).unwrap_err();
    let mut from_file: Vec<_> = file.errors.iter().map(as_built).collect();
    let mut from_code: Vec<_> = built.errors.iter().map(as_built).collect();
    from_file.sort();
    from_code.sort();
    assert_eq!(
        from_code, from_file,
        "in code:\n{built}\nin the file:\n{file}"
    );
    // Each job's mistakes are among them, one per key (the file's own count, not fewer).
    let fields: Vec<(&str, &str)> = from_code
        .iter()
        .map(|(job, field, _)| (job.as_deref().unwrap_or(""), field.as_str()))
        .collect();
    for expected in [
        ("no spaces", "name"),
        ("late", "cron"),
        ("zoned", "zone"),
        ("limits", "timeout"),
        ("limits", "jitter"),
        ("limits", "catch_up"),
        ("limits", "deadline"),
        ("policy", "catch_up_policy"),
        ("holidays", "Calendar (builtin)"),
    ] {
        assert!(fields.contains(&expected), "{expected:?} not in {fields:?}");
    }
}

/// The first `rust` block after `heading` in the Markdown file `path` (relative to the crate).
fn rust_block_after(path: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let section = text
        .split_once(heading)
        .unwrap_or_else(|| panic!("{path} has no {heading:?}"))
        .1;
    let block = section.split_once("```rust\n").expect("a rust block").1;
    block
        .split_once("```")
        .expect("the block's end")
        .0
        .to_owned()
}

/// examples/library.rs below its header (how to run it), which is not what a user pastes.
fn library_example_body() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/library.rs");
    let example = std::fs::read_to_string(path).expect("reading examples/library.rs");
    let body: Vec<&str> = example
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .collect();
    body.join("\n")
}

/// The book's library chapter shows the whole example, as the suite builds and runs it.
#[test]
fn the_books_library_example_is_the_example_the_suite_builds() {
    assert_eq!(
        rust_block_after("book/en/src/library.md", "# The library").trim(),
        library_example_body().trim(),
        "the book's library block differs from examples/library.rs"
    );
}

/// The README's dozen lines are the example's own lines, in its order (`// …` marks a cut), so
/// what a reader of the README sees is what the suite builds.
#[test]
fn the_readmes_library_excerpt_is_lines_of_the_example_in_order() {
    let excerpt = rust_block_after("README.md", "## Use it as a library");
    let example = library_example_body();
    let mut rest = example.lines().map(str::trim);
    for line in excerpt.lines().map(str::trim) {
        if line.is_empty() || line == "// …" {
            continue;
        }
        assert!(
            rest.any(|l| l == line),
            "the README's library excerpt has {line:?}, not a line of examples/library.rs \
             (after the lines before it)"
        );
    }
    let shown = excerpt.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(shown <= 25, "the excerpt is meant short: {shown} lines");
}

/// `lines` without their terminal colours (the example's subscriber colours its output).
fn plain(lines: &[String]) -> Vec<String> {
    lines.iter().map(|l| without_escapes(l)).collect()
}

/// `line` without ANSI escape sequences (`ESC [ ... m`).
fn without_escapes(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => chars.by_ref().take_while(|c| *c != 'm').for_each(drop),
            c => plain.push(c),
        }
    }
    plain
}

#[test]
fn the_readmes_library_example_runs_on_redis_and_logs_its_runs() {
    let cluster = RedisCluster::start(3);
    let nodes = cluster.urls().join(",");
    let env = [("REDIS_NODES", nodes.as_str()), ("HOSTNAME", "readme-1")];
    let app = Replica::spawn(example("library"), &[], &env);
    // The heartbeat runs every 5 s; two runs, under load: a generous bound.
    let runs = 2;
    let bound = Duration::from_secs(60);
    let logged = |l: &String| l.contains("ran the slot") && l.contains("job=heartbeat");
    for run in 1..=runs {
        let seen = wait_until(bound, || {
            let count = plain(&app.lines()).iter().filter(|l| logged(l)).count();
            (count >= run).then_some(count)
        });
        assert!(
            seen.is_some(),
            "run {run} of heartbeat not logged: {:#?}",
            app.lines()
        );
    }
    let lines = plain(&app.lines());
    let done = lines.iter().find(|l| logged(l)).unwrap();
    assert!(
        done.contains("outcome=done") && done.contains("replica=readme-1"),
        "{done}"
    );
    assert!(
        lines.iter().any(|l| l.contains("report for")),
        "the job's own line is not logged: {lines:#?}"
    );
    app.terminate();
    let status = app
        .wait_timeout(Duration::from_secs(30))
        .expect("the example did not stop");
    assert!(
        status.success(),
        "the example exited {status:?}: {:#?}",
        app.lines()
    );
    let records = history(&cluster.urls(), "slotcron", "heartbeat");
    assert!(
        records.len() >= runs,
        "too few runs in the history: {records:?}"
    );
    assert_eq!(outcomes(&records), [("done".to_owned(), String::new())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobspecs_on_failure_alert_and_enabled_false_take_effect() {
    let cluster = RedisCluster::start(1);
    let (told, mut alerts) = tokio::sync::mpsc::unbounded_channel::<(String, String, String)>();
    let ran_disabled = Arc::new(AtomicBool::new(false));
    let disabled = ran_disabled.clone();
    let handle = Fleet::new("lib-1")
        .nodes(cluster.urls())
        .key_prefix("settings")
        .alert("ops", move |ctx| {
            let (outcome, why) = ctx.alert().unwrap_or_default();
            let alert = (ctx.job().to_owned(), outcome.to_owned(), why.to_owned());
            let sent = told.send(alert).map_err(|e| e.to_string());
            async move { sent }
        })
        .job(
            JobSpec::new("broken", "* * * * * *")
                .overlap(Overlap::Allow)
                .on_failure("ops"),
            |_| async { Err("disk full") },
        )
        .job(
            JobSpec::new("off", "* * * * * *").enabled(false),
            move |_| {
                disabled.store(true, Ordering::SeqCst);
                async { Ok::<(), String>(()) }
            },
        )
        .start()
        .await
        .unwrap();
    // Under load a slot may take seconds to fail and alert: a generous bound.
    let alert = tokio::time::timeout(Duration::from_secs(60), alerts.recv()).await;
    handle.shutdown().await.unwrap();
    let (job, outcome, why) = alert.expect("no alert within 60 s").expect("alert channel");
    assert_eq!((job.as_str(), outcome.as_str()), ("broken", "failed"));
    assert!(why.contains("disk full"), "{why}");
    assert!(!ran_disabled.load(Ordering::SeqCst), "the disabled job ran");
    assert!(history(&cluster.urls(), "settings", "off").is_empty());
}

/// A `JobSpec::deadline`: a slot still running at its deadline tells the alert `deadline`,
/// and `recovered` once it ends done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobspecs_deadline_alerts_a_slow_slot_then_its_recovery() {
    let cluster = RedisCluster::start(1);
    let (told, mut alerts) = tokio::sync::mpsc::unbounded_channel::<(String, String)>();
    let handle = Fleet::new("lib-1")
        .nodes(cluster.urls())
        .key_prefix("deadline")
        .alert("ops", move |ctx| {
            let (outcome, why) = ctx.alert().unwrap_or_default();
            let sent = told.send((outcome.to_owned(), why.to_owned()));
            async move { sent.map_err(|e| e.to_string()) }
        })
        .job(
            JobSpec::new("slow", "*/10 * * * * *")
                .deadline(Duration::from_secs(1))
                .on_failure("ops"),
            // Past the deadline by far more than a loaded machine delays its look.
            |_| async {
                const PAST_THE_DEADLINE: Duration = Duration::from_secs(6);
                tokio::time::sleep(PAST_THE_DEADLINE).await;
                Ok::<(), String>(())
            },
        )
        .start()
        .await
        .unwrap();
    // Until the first recovery (or four alerts), each within two slots' time on a loaded
    // machine. A slot due while the fleet was still starting (its clock not yet measured) is
    // not raced and alerted `deadline` as pending, rightly: it never runs, so no recovery
    // answers it; the slot after it is the one that runs slow and recovers.
    let mut got: Vec<(String, String)> = Vec::new();
    while got.len() < 4 && !got.iter().any(|(kind, _)| kind == "recovered") {
        match tokio::time::timeout(Duration::from_secs(60), alerts.recv()).await {
            Ok(Some(alert)) => got.push(alert),
            _ => break,
        }
    }
    handle.shutdown().await.unwrap();
    let recovered = got.iter().position(|(kind, _)| kind == "recovered");
    let running = got
        .iter()
        .position(|(kind, why)| kind == "deadline" && why.starts_with("still running on lib-1"));
    assert!(
        matches!((running, recovered), (Some(d), Some(r)) if d < r),
        "a deadline alert of the running slot, then its recovery: {got:?}"
    );
    let before = &got[..recovered.unwrap()];
    assert!(before.iter().all(|(kind, _)| kind == "deadline"), "{got:?}");
}

/// `GET path` on the local `port`, off the runtime's threads (the helper blocks).
async fn get(port: u16, path: &'static str) -> common::HttpReply {
    let reply = tokio::task::spawn_blocking(move || common::http_get(port, path)).await;
    reply
        .unwrap()
        .unwrap_or_else(|| panic!("nothing answered GET {path}"))
}

/// The value of the sample of `metrics` whose line starts with `series`.
fn sample(metrics: &str, series: &str) -> Option<String> {
    let line = metrics.lines().find(|l| l.starts_with(series))?;
    line.rsplit(' ').next().map(str::to_owned)
}

/// Waits (up to a bound that holds under load) until `/metrics` on `port` shows `series` at
/// `value`.
async fn until_metric(port: u16, series: &str, value: &str) {
    // A second-by-second job reports at each slot; under load slots come late: a wide bound.
    let bound = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = get(port, "/metrics").await.body;
        if sample(&metrics, series).as_deref() == Some(value) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < bound,
            "{series} never {value}:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handle_triggers_pauses_resumes_reads_history_and_serves_metrics_and_the_page() {
    let cluster = RedisCluster::start(3);
    let port = common::free_port();
    // `report` at New Year's midnight: never due while the test runs, so its runs here are
    // the trigger's; `beat` every second, to be paused.
    let ok = |_| async { Ok::<(), String>(()) };
    let handle = Fleet::new("lib-1")
        .nodes(cluster.urls())
        .key_prefix("handle")
        .http(([127, 0, 0, 1], port).into())
        .job(JobSpec::new("report", "0 0 1 1 *"), ok)
        .job(JobSpec::new("beat", "* * * * * *"), ok)
        .start()
        .await
        .unwrap();
    let triggered = handle.trigger("report").await.unwrap();
    assert_eq!(
        (triggered.outcome, triggered.detail.as_deref()),
        (Outcome::Done, None)
    );
    let runs = handle.history("report", 10).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(
        (run.trigger.as_str(), run.replica.as_str()),
        ("trigger", "lib-1")
    );
    assert_eq!(run.slot.instant(), triggered.slot);
    let unknown = handle.trigger("nope").await.unwrap_err().to_string();
    assert!(unknown.contains("no enabled job \"nope\""), "{unknown}");

    handle
        .pause("beat", None, Some("receiver down"))
        .await
        .unwrap();
    until_metric(port, "slotcron_job_paused{slotcron_job=\"beat\"}", "1").await;
    let page = get(port, "/").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("receiver down"),
        "the page does not show the pause"
    );
    let resumed_at = Utc::now();
    assert!(handle.resume("beat").await.unwrap(), "no pause was ended");
    until_metric(port, "slotcron_job_paused{slotcron_job=\"beat\"}", "0").await;
    // The metric turns at the resume; the first slot after it runs up to a second later (more
    // under load): wait for its run in the history rather than read it once.
    let bound = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let beats = handle.history("beat", 5).await.unwrap();
        if beats.iter().any(|r| r.slot.instant() >= resumed_at) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < bound,
            "no beat after resume: {beats:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let metrics = get(port, "/metrics").await.body;
    let done = "slotcron_runs_total{slotcron_job=\"report\",outcome=\"done\"";
    let line = metrics.lines().find(|l| l.starts_with(done));
    assert!(
        line.is_some_and(|l| l.ends_with(" 1")),
        "{done} not 1:\n{metrics}"
    );
    handle.shutdown().await.unwrap();
}

/// `Error` keeps its cause: a fleet whose status address is taken stops with `Stopped`, whose
/// `source()` is the bind's error, and whose text is still the whole chain on one line.
#[tokio::test]
async fn a_fleet_that_stops_on_an_error_keeps_it_as_the_errors_source() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let error = Fleet::new("lib-1")
        .http(addr)
        .run_until(std::future::pending())
        .await
        .unwrap_err();
    assert!(matches!(error, slotcron::Error::Stopped { .. }), "{error}");
    let mut chain = Vec::new();
    let mut cause = std::error::Error::source(&error);
    while let Some(e) = cause {
        chain.push(e.to_string());
        cause = e.source();
    }
    assert!(!chain.is_empty(), "no source");
    assert_eq!(error.to_string(), chain.join(": "));
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
}
