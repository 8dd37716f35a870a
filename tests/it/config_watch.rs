//! slotcron reloads its configuration when the file changes, as SIGHUP does, including the
//! way a Kubernetes ConfigMap volume changes: a new timestamped directory, a `..data_tmp`
//! symlink to it renamed over `..data`, the old directory removed. The path slotcron was given
//! (`dir/jobs.toml` -> `..data/jobs.toml`) is never written.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use common::Replica;

fn job(name: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\n\
         [job.action]\ntype = \"log\"\ncontent = \"{name}\"\n"
    )
}

/// Publishes `text` as the ConfigMap's new version `version`, exactly as the kubelet's atomic
/// writer does.
fn publish(dir: &Path, version: &str, text: &str) {
    let data = dir.join(version);
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("jobs.toml"), text).unwrap();
    let tmp = dir.join("..data_tmp");
    symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

fn ran(r: &Replica, job: &str) -> usize {
    r.json_lines()
        .iter()
        .filter(|l| l["message"] == "ran the slot" && l["job"] == job)
        .count()
}

fn wait_for_runs(r: &Replica, job: &str) {
    let seen = r.wait_for_json(Duration::from_secs(10), |l| {
        l["message"] == "ran the slot" && l["job"] == job
    });
    assert!(seen.is_some(), "{job} never ran: {:?}", r.lines());
}

#[test]
fn a_configmap_style_symlink_swap_reloads_the_config() {
    let dir = tempfile::tempdir().unwrap();
    publish(dir.path(), "..2026_11_23_10_00_00.1", &job("before"));
    symlink("..data/jobs.toml", dir.path().join("jobs.toml")).unwrap();
    let r = Replica::run(dir.path().join("jobs.toml"), "watcher", &[]);
    wait_for_runs(&r, "before");

    publish(dir.path(), "..2026_11_23_10_05_00.2", &job("after"));
    std::fs::remove_dir_all(dir.path().join("..2026_11_23_10_00_00.1")).unwrap();
    let reloaded = r.wait_for_json(Duration::from_secs(5), |l| l["message"] == "reloaded");
    assert!(reloaded.is_some(), "no reload: {:?}", r.lines());
    wait_for_runs(&r, "after");
    // The old job stops: at most the slot racing during the swap runs after it.
    let before = ran(&r, "before");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(ran(&r, "before") <= before + 1, "{:?}", r.lines());

    // An invalid new version is rejected; the running schedule is kept.
    publish(
        dir.path(),
        "..2026_11_23_10_10_00.3",
        "[[job]]\nname = \"broken\"\nschedule = \"nope\"\n",
    );
    let rejected = r.wait_for_json(Duration::from_secs(5), |l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.contains("reload rejected"))
    });
    assert!(rejected.is_some(), "{:?}", r.lines());
    let after = ran(&r, "after");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        ran(&r, "after") >= after + 2,
        "the schedule stopped: {:?}",
        r.lines()
    );
}

#[test]
fn a_change_elsewhere_in_the_directory_does_not_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, job("steady")).unwrap();
    let r = Replica::run(&path, "steady", &[]);
    wait_for_runs(&r, "steady");
    std::fs::write(dir.path().join("notes.txt"), "unrelated").unwrap();
    // Rewritten with the same bytes: no change of content either.
    std::fs::write(&path, job("steady")).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    // A real change to the file itself (an editor's in-place save) does reload.
    std::fs::write(&path, format!("{}{}", job("steady"), job("added"))).unwrap();
    wait_for_runs(&r, "added");
    let reloads = r
        .json_lines()
        .iter()
        .filter(|l| l["message"] == "reloaded")
        .count();
    assert_eq!(reloads, 1, "{:?}", r.lines());
}

/// A replica logging at `trace` into a file in its configuration's directory (a common sidecar or
/// `kubectl logs`-less setup). Every log write is an inotify event in the watched directory: a
/// watcher that woke (and logged) for each one fed itself, hundreds of MB in seconds. The watcher
/// must wake only for the configuration file (and a ConfigMap's `..data` swap), so the log grows
/// by what the schedule itself writes.
#[test]
fn trace_logs_written_beside_the_config_do_not_feed_the_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, job("quiet")).unwrap();
    let log_path = dir.path().join("slotcron.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(["run", "--config"])
        .arg(&path)
        .args(["--replica-id", "quiet", "--log-format", "json"])
        .env("RUST_LOG", "trace")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    // Long enough for a feedback loop to show (it wrote millions of lines in this time), and
    // for the schedule to run the 2 slots checked.
    const LOGGED_FOR: Duration = Duration::from_secs(4);
    std::thread::sleep(LOGGED_FOR);
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    let runs = text.lines().filter(|l| l.contains("ran the slot")).count();
    let wakes = text
        .lines()
        .filter(|l| l.contains("the configuration's directory changed"))
        .count();
    // Four seconds of a job every second at trace is a few hundred lines; the feedback loop
    // wrote millions.
    let head: String = text.chars().take(4000).collect();
    assert!(runs >= 2, "the schedule did not run: {head}");
    assert_eq!(wakes, 0, "the watcher woke for its own log file");
    assert!(
        text.len() < 2_000_000,
        "{} bytes of log in 4 s, {} lines",
        text.len(),
        text.lines().count()
    );
}

/// The `slotcron_config_reloads_total` samples on the replica's /metrics, by result.
fn reloads_counted(port: u16) -> Option<(String, String)> {
    let body = common::http_get(port, "/metrics")?.body;
    let sample = |result: &str| {
        let series = format!("slotcron_config_reloads_total{{result=\"{result}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(series.as_str()).map(str::to_owned))
    };
    Some((sample("applied")?, sample("rejected")?))
}

#[test]
fn a_rejected_reload_is_logged_as_such_and_counted_and_a_reload_never_says_started() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    let port = common::free_port();
    let http = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n");
    std::fs::write(&path, format!("{http}{}", job("first"))).unwrap();
    let r = Replica::run(&path, "reloader", &[]);
    wait_for_runs(&r, "first");
    assert_eq!(reloads_counted(port), Some(("0".into(), "0".into())));

    // A cron that does not parse: rejected, with the error naming the job and field.
    std::fs::write(
        &path,
        format!("{http}{}", job("first").replace("* * * * * *", "nope")),
    )
    .unwrap();
    let rejected = r.wait_for_json(Duration::from_secs(5), |l| {
        l["message"] == "reload rejected"
    });
    let rejected = rejected.unwrap_or_else(|| panic!("{:?}", r.lines()));
    let error = rejected["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("job \"first\", field \"schedule\""),
        "{rejected}"
    );
    assert_eq!(rejected["level"], "ERROR", "{rejected}");
    let counted = common::wait_until(Duration::from_secs(2), || {
        reloads_counted(port).filter(|c| c.1 == "1")
    });
    assert_eq!(counted, Some(("0".into(), "1".into())));

    std::fs::write(&path, format!("{http}{}", job("second"))).unwrap();
    wait_for_runs(&r, "second");
    assert_eq!(reloads_counted(port), Some(("1".into(), "1".into())));
    let started = r
        .json_lines()
        .iter()
        .filter(|l| l["message"] == "slotcron started")
        .count();
    assert_eq!(started, 1, "a reload is not a start: {:?}", r.lines());
}
