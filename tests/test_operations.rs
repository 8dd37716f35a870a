//! Operations on real processes and real Redis nodes: run history, manual trigger, overlap,
//! catch-up, health and metrics endpoints, hot reload, the status page in a real headless
//! browser, and the deploy files.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, wait_until, write_config, Receiver, RedisCluster, Replica};
use nix::sys::signal::Signal;
use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_slotcron")
}

fn redis_section(cluster: &RedisCluster) -> String {
    let nodes: Vec<String> = cluster.urls().iter().map(|n| format!("{n:?}")).collect();
    format!("[redis]\nnodes = [{}]\n", nodes.join(", "))
}

fn http_job(name: &str, schedule: &str, receiver: &Receiver, extra: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\ntimeout = \"5s\"\n{extra}\n[job.action]\ntype = \"http\"\nurl = \"{}/hook\"\n",
        receiver.uri()
    )
}

fn replica(config: &Path, id: &str) -> Replica {
    Replica::spawn(
        bin(),
        &[
            "run",
            "--log-format",
            "json",
            "--replica-id",
            id,
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    )
}

fn started(r: &Replica) {
    assert!(
        r.wait_for_json(Duration::from_secs(15), |l| l["message"]
            == "slotcron started")
            .is_some(),
        "{:?}",
        r.lines()
    );
}

fn stop(r: Replica) {
    r.terminate();
    assert!(
        r.wait_timeout(Duration::from_secs(15))
            .is_some_and(|s| s.success()),
        "{:?}",
        r.lines()
    );
}

fn slotcron(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A plain HTTP/1.1 GET: (status, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

#[test]
fn history_shows_who_won_newest_first_merged_across_nodes() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[scheduler]\nkey_prefix = \"hist\"\n{}{}",
        redis_section(&cluster),
        http_job("report", "* * * * * *", &receiver, "")
    );
    let path = write_config(dir.path(), &text);
    let (a, b) = (replica(&path, "alpha"), replica(&path, "beta"));
    started(&a);
    started(&b);
    receiver.wait_for(4, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let winners: HashMap<String, String> = [&a, &b]
        .iter()
        .flat_map(|r| r.json_lines())
        .filter(|l| l["outcome"] == "won")
        .map(|l| {
            (
                l["slot"].as_str().unwrap().to_owned(),
                l["replica"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    stop(a);
    stop(b);

    // Node 1 forgets everything: the history is still whole from the other two.
    common::redis_cmd(&cluster[0].url(), &["FLUSHALL"]).unwrap();
    let (code, stdout, stderr) = slotcron(&[
        "history",
        "--config",
        path.to_str().unwrap(),
        "--limit",
        "3",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    let slots: Vec<&str> = rows.iter().map(|r| r["slot"].as_str().unwrap()).collect();
    assert!(
        slots.windows(2).all(|w| w[0] > w[1]),
        "not newest first: {slots:?}"
    );
    for row in &rows {
        assert_eq!(row["outcome"], "done");
        assert_eq!(
            row["replica"].as_str(),
            winners
                .get(row["slot"].as_str().unwrap())
                .map(String::as_str),
            "{row}"
        );
    }
    let (code, table, _) = slotcron(&[
        "history",
        "--config",
        path.to_str().unwrap(),
        "--job",
        "report",
        "--limit",
        "2",
    ]);
    assert_eq!(code, 0);
    assert!(
        table.starts_with("SLOT") && table.lines().count() == 3,
        "{table}"
    );
    let (code, _, stderr) = slotcron(&[
        "history",
        "--config",
        path.to_str().unwrap(),
        "--job",
        "nope",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no job named \"nope\"") && stderr.contains("report"),
        "{stderr}"
    );

    let standalone = write_config(
        dir.path(),
        &http_job("report", "* * * * * *", &receiver, ""),
    );
    let (code, _, stderr) = slotcron(&["history", "--config", standalone.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no [redis] section"), "{stderr}");
}

#[test]
fn two_triggers_at_the_same_moment_run_the_job_once() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    // A schedule that never comes during the test: only the triggers run it.
    let text = format!(
        "[scheduler]\nkey_prefix = \"trig\"\n{}{}",
        redis_section(&cluster),
        http_job("deploy", "0 0 3 1 1 *", &receiver, "")
    );
    let path = write_config(dir.path(), &text);
    let path = path.to_str().unwrap();
    // Start both right after a second boundary so they race for the same slot.
    let now = chrono::Utc::now();
    std::thread::sleep(Duration::from_millis(
        u64::from(1000 - now.timestamp_subsec_millis()) + 50,
    ));
    let spawn = |id: &str| {
        Command::new(bin())
            .args(["trigger", "--config", path, "--replica-id", id, "deploy"])
            .spawn()
            .unwrap()
    };
    let (mut one, mut two) = (spawn("ops-1"), spawn("ops-2"));
    let codes = [one.wait().unwrap().code(), two.wait().unwrap().code()];
    let mut sorted = codes;
    sorted.sort();
    assert_eq!(
        sorted,
        [Some(0), Some(3)],
        "one runs it (0), the other finds it run (3): {codes:?}"
    );
    assert_eq!(receiver.count(), 1);

    let (code, _, stderr) = slotcron(&["trigger", "--config", path, "nope"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("deploy"), "{stderr}");
}

#[test]
fn overlap_skip_never_runs_two_at_once_and_allow_does() {
    for (overlap, expect_overlap) in [("skip", false), ("allow", true)] {
        let cluster = RedisCluster::start(3);
        let receiver = Receiver::start();
        receiver.set_delay(Duration::from_millis(2500));
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[scheduler]\nkey_prefix = \"overlap-{overlap}\"\n{}{}",
            redis_section(&cluster),
            http_job(
                "slow",
                "* * * * * *",
                &receiver,
                &format!("overlap = \"{overlap}\"")
            )
        );
        let path = write_config(dir.path(), &text);
        let replicas: Vec<Replica> = (0..3).map(|i| replica(&path, &format!("r{i}"))).collect();
        for r in &replicas {
            started(r);
        }
        std::thread::sleep(Duration::from_secs(6));
        let skipped = replicas
            .iter()
            .flat_map(|r| r.json_lines())
            .filter(|l| l["reason"] == "overlap")
            .count();
        let won = replicas
            .iter()
            .flat_map(|r| r.json_lines())
            .filter(|l| l["outcome"] == "won")
            .count();
        for r in replicas {
            stop(r);
        }
        // Each run takes 2.5 s: with skip at most one is in flight, so 6 s hold at most 3 runs.
        let runs = receiver.count();
        if expect_overlap {
            assert!(runs >= 5, "overlap = allow: {runs} runs");
            assert_eq!(skipped, 0);
        } else {
            assert!(
                runs <= 3,
                "overlap = skip: {runs} runs in 6 s of 2.5 s runs"
            );
            assert!(
                skipped >= 2 && won >= runs + skipped,
                "skipped {skipped}, won {won}"
            );
        }
    }
}

#[test]
fn catch_up_runs_missed_slots_once_after_a_fleet_outage() {
    for (policy, expect_all) in [("all", true), ("latest", false)] {
        let cluster = RedisCluster::start(3);
        let receiver = Receiver::start();
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[scheduler]\nkey_prefix = \"catchup-{policy}\"\nmax_clock_skew = \"1s\"\n{}{}",
            redis_section(&cluster),
            http_job(
                "nightly",
                "*/2 * * * * *",
                &receiver,
                &format!("catch_up = \"1m\"\ncatch_up_policy = \"{policy}\"")
            )
        );
        let path = write_config(dir.path(), &text);
        let first = replica(&path, "first");
        started(&first);
        receiver.wait_for(1, Duration::from_secs(5));
        stop(first);
        let stopped = chrono::Utc::now();
        std::thread::sleep(Duration::from_secs(7)); // the whole fleet is down for ~3 slots
        let restarted = chrono::Utc::now();
        let second = replica(&path, "second");
        started(&second);
        std::thread::sleep(Duration::from_secs(2));
        let caught: Vec<Value> = second
            .json_lines()
            .into_iter()
            .filter(|l| l["message"] == "catching up a missed slot")
            .collect();
        stop(second);
        let missed: Vec<String> = caught
            .iter()
            .map(|l| l["slot"].as_str().unwrap().to_owned())
            .collect();
        assert!(!missed.is_empty(), "policy {policy}: nothing caught up");
        for slot in &missed {
            let t: chrono::DateTime<chrono::Utc> = slot.parse().unwrap();
            assert!(
                t > stopped - chrono::Duration::seconds(1) && t < restarted,
                "{slot} was not missed"
            );
            assert_eq!(
                receiver
                    .counts_by_idempotency_key()
                    .get(&format!("nightly/{slot}")),
                Some(&1),
                "{slot}"
            );
        }
        if expect_all {
            assert!(missed.len() >= 3, "policy all: {missed:?}");
        } else {
            assert_eq!(missed.len(), 1, "policy latest: {missed:?}");
        }
        assert!(receiver.duplicate_keys().is_empty());
    }
}

#[test]
fn health_readiness_and_metrics_endpoints() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = format!(
        "[scheduler]\nkey_prefix = \"health\"\n{}[http]\nlisten = \"127.0.0.1:{port}\"\n{}",
        redis_section(&cluster),
        http_job("ping", "* * * * * *", &receiver, "")
    );
    let path = write_config(dir.path(), &text);
    let r = replica(&path, "observed");
    started(&r);
    receiver.wait_for(2, Duration::from_secs(10));
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
    let (status, body) = http_get(port, "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
    for needle in [
        "slotcron_slots_total{job=\"ping\",outcome=\"won\"}",
        "slotcron_lock_duration_seconds_bucket",
        "slotcron_action_duration_seconds_count{job=\"ping\"}",
        "slotcron_lateness_seconds_count{job=\"ping\"}",
        "slotcron_clock_offset_milliseconds",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from:\n{metrics}"
        );
    }
    cluster[0].kill();
    cluster[1].kill();
    let (status, body) = http_get(port, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    let down = format!(
        "slotcron_redis_node_up{{node=\"127.0.0.1:{}\"}} 0",
        cluster[0].port()
    );
    assert!(metrics.contains(&down), "{down} missing from:\n{metrics}");
    assert_eq!(
        http_get(port, "/healthz").unwrap().0,
        200,
        "alive even without Redis"
    );
    stop(r);
}

#[test]
fn sighup_reloads_a_valid_file_and_rejects_an_invalid_one() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let one = http_job("first", "* * * * * *", &receiver, "");
    let path = write_config(dir.path(), &one);
    let r = replica(&path, "reloader");
    started(&r);
    std::fs::write(
        &path,
        format!("{one}{}", http_job("second", "* * * * * *", &receiver, "")),
    )
    .unwrap();
    assert!(r.send_signal(Signal::SIGHUP));
    let second = wait_until(Duration::from_secs(5), || {
        receiver
            .counts_by_idempotency_key()
            .keys()
            .any(|k| k.starts_with("second/"))
            .then_some(())
    });
    assert!(second.is_some(), "the added job never ran: {:?}", r.lines());

    std::fs::write(&path, "[[job]]\nname = \"broken\"\nschedule = \"nope\"\n").unwrap();
    assert!(r.send_signal(Signal::SIGHUP));
    let rejected = r.wait_for_json(Duration::from_secs(5), |l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.contains("reload rejected"))
    });
    let rejected = rejected.unwrap_or_else(|| panic!("{:?}", r.lines()));
    assert!(
        rejected["error"]
            .as_str()
            .unwrap()
            .contains("job \"broken\""),
        "{rejected}"
    );
    let before = receiver.count();
    assert!(
        wait_until(Duration::from_secs(4), || (receiver.count() >= before + 2)
            .then_some(()))
        .is_some(),
        "the old schedule stopped"
    );
    stop(r);
}

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

#[test]
fn status_page_lists_jobs_and_winners_in_a_real_browser() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = format!(
        "[scheduler]\nkey_prefix = \"status\"\ntimezone = \"Asia/Shanghai\"\n{}[http]\nlisten = \"127.0.0.1:{port}\"\n{}",
        redis_section(&cluster),
        http_job("heartbeat", "* * * * * *", &receiver, "")
    );
    let path = write_config(dir.path(), &text);
    let r = replica(&path, "page-replica");
    started(&r);
    receiver.wait_for(3, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let (status, html) = http_get(port, "/").unwrap();
    assert_eq!(status, 200);
    for needle in [
        "heartbeat",
        "* * * * * *",
        "Asia/Shanghai",
        "+08:00",
        "page-replica",
        "class=\"outcome done\"",
    ] {
        assert!(
            html.contains(&needle.replace('/', "&#x2f;")) || html.contains(needle),
            "{needle} missing from the page"
        );
    }
    assert!(!html.contains("<script"), "the page needs no JavaScript");

    let Some(chromium) = chromium() else {
        eprintln!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium where it can)");
        stop(r);
        return;
    };
    let profile = tempfile::tempdir().unwrap();
    let shot = dir.path().join("status.png");
    let url = format!("http://127.0.0.1:{port}/");
    let common_args = |extra: &[&str]| {
        let mut cmd = Command::new(&chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
        ])
        .args([
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(&url);
        cmd
    };
    let dom = common_args(&["--dump-dom"]).output().unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("heartbeat") && dom.contains("page-replica") && dom.contains("done"),
        "rendered DOM:\n{dom}"
    );
    let out = common_args(&[
        "--window-size=1200,900",
        &format!("--screenshot={}", shot.display()),
    ])
    .output()
    .unwrap();
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "not a real screenshot: {} bytes",
        png.len()
    );
    // Kept for people to look at.
    let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/status-page.png");
    let _ = std::fs::write(keep, &png);
    stop(r);
}

fn yaml(path: &str) -> serde_yaml_ng::Value {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    let mut value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    // docker-compose's `<<: *anchor` merge keys.
    value.apply_merge().unwrap();
    value
}

fn env_with_webhook() -> HashMap<String, String> {
    HashMap::from([(
        "WECOM_WEBHOOK".to_owned(),
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k".to_owned(),
    )])
}

#[test]
fn deploy_files_agree_with_the_config() {
    // docker-compose: 3 independent Redis nodes, 5 replicas, a receiver; the mounted jobs file
    // names exactly those services.
    let compose = yaml("deploy/docker-compose.yml");
    let services = compose["services"].as_mapping().unwrap();
    let names: Vec<&str> = services.keys().filter_map(|k| k.as_str()).collect();
    let redis: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.starts_with("redis"))
        .collect();
    let replicas: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.starts_with("replica"))
        .collect();
    assert_eq!(redis.len(), 3, "{names:?}");
    assert_eq!(replicas.len(), 5, "{names:?}");
    assert!(names.contains(&"receiver"));
    for r in &replicas {
        let volumes = format!("{:?}", compose["services"][*r]["volumes"]);
        assert!(volumes.contains("jobs.compose.toml"), "{r}: {volumes}");
    }
    let jobs_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/jobs.compose.toml");
    let config =
        slotcron::config::load_with(&jobs_path, &HashMap::<String, String>::new()).unwrap();
    let hosts: Vec<String> = config
        .redis
        .as_ref()
        .unwrap()
        .nodes
        .iter()
        .map(|n| n.expose().host_str().unwrap().to_owned())
        .collect();
    let mut sorted_redis: Vec<String> = redis.iter().map(|s| (*s).to_owned()).collect();
    sorted_redis.sort();
    let mut sorted_hosts = hosts.clone();
    sorted_hosts.sort();
    assert_eq!(sorted_hosts, sorted_redis);
    let target = config.jobs[0].action.target().unwrap();
    assert!(target.contains("//receiver:8080/"), "{target}");

    // Kubernetes: 5 replicas, probes on the [http] port, grace period above the longest timeout,
    // the webhook from the Secret.
    let deployment = yaml("deploy/kubernetes/deployment.yaml");
    assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(5));
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    let port = container["ports"][0]["containerPort"].as_u64().unwrap();

    let configmap = yaml("deploy/kubernetes/configmap.yaml");
    let jobs = configmap["data"]["jobs.toml"].as_str().unwrap();
    let config =
        slotcron::config::parse(Path::new("configmap/jobs.toml"), jobs, &env_with_webhook())
            .unwrap();
    assert_eq!(
        u64::from(config.http.unwrap().listen.port()),
        port,
        "probes and [http] listen disagree"
    );
    let longest = config
        .jobs
        .iter()
        .map(|j| j.timeout.as_secs())
        .max()
        .unwrap();
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > longest);

    let secret = yaml("deploy/kubernetes/secret.yaml");
    assert!(secret["stringData"]["WECOM_WEBHOOK"].is_string());
    assert!(format!("{:?}", container["envFrom"]).contains("slotcron-webhook"));

    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/Dockerfile"))
            .unwrap();
    assert_eq!(
        dockerfile
            .lines()
            .filter(|l| l.starts_with("FROM "))
            .count(),
        2,
        "multi-stage build"
    );
    assert!(dockerfile
        .lines()
        .any(|l| l.starts_with("USER ") && !l.contains("root")));
    assert!(dockerfile.contains("HEALTHCHECK"));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["slotcron", "run"]"#));
}
