//! slotcron's metrics read by Prometheus's own tools: `promtool check metrics` on a live
//! replica's `/metrics`, a real `prometheus` server scraping two replicas and queried through
//! its HTTP API, and the shipped alert rules through `promtool check rules` / `test rules`.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::fleet::FleetToml;
use common::tools::tool;
use common::{Receiver, RedisCluster, Replica, free_port, http_get, wait_until, write_config};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Two jobs: `tick` runs every second; `yearly` never runs during a test, so its series show
/// what a job looks like before its first slot.
fn config(cluster: &RedisCluster, receiver: &Receiver, port: u16) -> String {
    let rest = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\n\
         [[job]]\nname = \"yearly\"\nschedule = \"0 0 0 1 1 *\"\n\
         [job.action]\ntype = \"log\"\ncontent = \"happy new year\""
    );
    FleetToml {
        job: "tick",
        timeout: "5s",
        scheduler: "",
        redis: "",
        rest: &rest,
        ..FleetToml::new(&cluster.urls(), &receiver.uri(), "prom")
    }
    .render()
}

/// One replica of [`config`] on three Redis nodes, started, with its `[http]` port.
struct LiveReplica {
    port: u16,
    receiver: Receiver,
    // Field order is drop order: the replica stops before its nodes and its config's dir.
    _replica: Replica,
    _cluster: RedisCluster,
    _dir: tempfile::TempDir,
}

impl LiveReplica {
    fn start(name: &str) -> Self {
        let cluster = RedisCluster::start(3);
        let receiver = Receiver::start();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = write_config(dir.path(), &config(&cluster, &receiver, port));
        let replica = Replica::run(config, name, &[]);
        replica.assert_started();
        LiveReplica {
            port,
            receiver,
            _replica: replica,
            _cluster: cluster,
            _dir: dir,
        }
    }
}

/// Runs `tool args` with `stdin` fed in; (exit code, stdout + stderr).
fn run_with_stdin(tool: &Path, args: &[&str], stdin: &str) -> (i32, String) {
    use std::io::Write;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", tool.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn promtool_check_metrics_on_a_live_replica_prints_nothing() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let live = LiveReplica::start("promlint");
    live.receiver.wait_for(2, Duration::from_secs(10));
    let port = live.port;
    let reply = http_get(port, "/metrics").expect("/metrics answers");
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8"),
        "a client that does not ask for OpenMetrics gets the classic text format"
    );
    let (code, output) = run_with_stdin(&promtool, &["check", "metrics"], &reply.body);
    assert_eq!(
        (code, output.as_str()),
        (0, ""),
        "promtool on:\n{}",
        reply.body
    );
    // The series a dashboard needs are there, the idle job's at zero.
    for needle in [
        "slotcron_races_total{slotcron_job=\"tick\",outcome=\"won\"} ",
        "slotcron_runs_total{slotcron_job=\"yearly\",outcome=\"done\"} 0",
        "slotcron_rate_budget_waits_total{slotcron_job=\"yearly\"} 0",
        "slotcron_last_success_timestamp_seconds{slotcron_job=\"yearly\"} 0",
        "slotcron_clock_offset_seconds ",
        "slotcron_build_info{version=",
        "process_resident_memory_bytes ",
        "process_start_time_seconds ",
    ] {
        assert!(
            reply.body.contains(needle),
            "{needle} missing from:\n{}",
            reply.body
        );
    }
}

#[test]
fn promtool_checks_and_unit_tests_the_shipped_alert_rules() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let rules = repo().join("deploy/prometheus");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&rules)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {args:?}:\n{text}");
        assert!(text.contains("SUCCESS"), "promtool {args:?}:\n{text}");
    }
}

/// A `prometheus` server scraping `targets` every second, on a free port, storing in `dir`.
fn start_prometheus(bin: &Path, dir: &Path, targets: &[u16]) -> (Replica, u16) {
    let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: ['{}']\n\
         scrape_configs:\n  - job_name: slotcron\n    static_configs:\n      - targets: [{}]\n",
        repo().join("deploy/prometheus/alerts.yml").display(),
        targets.join(", ")
    );
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    (Replica::spawn_cmd("prometheus", cmd), port)
}

/// An instant query through Prometheus's HTTP API: the result vector.
fn query(port: u16, promql: &str) -> Vec<Value> {
    let q: String = url::form_urlencoded::byte_serialize(promql.as_bytes()).collect();
    let Some(reply) = http_get(port, &format!("/api/v1/query?query={q}")) else {
        return Vec::new();
    };
    let body: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
    body["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn a_real_prometheus_scrapes_two_replicas_and_queries_by_slotcron_job() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port()];
    let replicas: Vec<Replica> = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| {
            let sub = dir.path().join(format!("r{i}"));
            std::fs::create_dir_all(&sub).unwrap();
            let path = write_config(&sub, &config(&cluster, &receiver, port));
            Replica::run(path, &format!("prom-{i}"), &[])
        })
        .collect();
    replicas.iter().for_each(Replica::assert_started);
    let (server, prom_port) = start_prometheus(&prometheus, dir.path(), &ports);

    // Both replicas race every slot of `tick`: each has its own series, labelled
    // slotcron_job (not `exported_job`), beside Prometheus's own `job` and `instance`.
    let races = wait_until(Duration::from_secs(60), || {
        let r = query(
            prom_port,
            r#"slotcron_races_total{slotcron_job="tick",outcome="won"}"#,
        );
        (r.len() == 2).then_some(r)
    })
    .unwrap_or_else(|| {
        panic!(
            "no won series of both replicas; prometheus: {:?}",
            server.lines()
        )
    });
    for series in &races {
        assert_eq!(series["metric"]["job"], "slotcron", "{series}");
        assert!(series["metric"].get("exported_job").is_none(), "{series}");
    }
    // Runs are counted apart from races, and the fleet delivers: done > 0, none failed.
    let done = wait_until(Duration::from_secs(30), || {
        let r = query(
            prom_port,
            r#"sum(slotcron_runs_total{slotcron_job="tick",outcome="done"})"#,
        );
        r.first().map(value).filter(|v| *v >= 2.0)
    });
    assert!(done.is_some(), "no done runs of tick");
    let failed = query(
        prom_port,
        r#"sum(slotcron_runs_total{slotcron_job="tick",outcome="failed"})"#,
    );
    assert_eq!(failed.first().map(value), Some(0.0));
    // The job that has had no slot is there at zero on both replicas, with its interval.
    let idle = query(
        prom_port,
        r#"slotcron_last_success_timestamp_seconds{slotcron_job="yearly"}"#,
    );
    assert_eq!(idle.len(), 2, "{idle:?}");
    assert!(idle.iter().all(|s| value(s) == 0.0), "{idle:?}");
    let interval = query(
        prom_port,
        r#"max(slotcron_schedule_interval_seconds{slotcron_job="tick"})"#,
    );
    assert_eq!(interval.first().map(value), Some(1.0), "{interval:?}");
    let latest = query(
        prom_port,
        r#"time() - max(slotcron_last_success_timestamp_seconds{slotcron_job="tick"})"#,
    );
    assert!(
        latest.first().map(value).is_some_and(|age| age < 10.0),
        "{latest:?}"
    );
    for (promql, n) in [
        ("slotcron_build_info", 2),
        ("process_start_time_seconds", 2),
        ("up == 1", 2),
    ] {
        let r = query(prom_port, promql);
        assert_eq!(r.len(), n, "{promql}: {r:?}");
    }
    // The shipped rules load and evaluate on real data: all healthy, nothing firing.
    let rules = http_get(prom_port, "/api/v1/rules").expect("rules API");
    let rules: Value = serde_json::from_str(&rules.body).unwrap();
    let group = &rules["data"]["groups"][0];
    assert_eq!(group["name"], "slotcron", "{rules}");
    let firing = query(prom_port, r#"ALERTS{alertstate="firing"}"#);
    assert!(firing.is_empty(), "{firing:?}");
    drop(replicas);
}

// ---------------------------------------------------------------------------
// The Grafana dashboard (deploy/monitoring/slotcron-dashboard.json)
// ---------------------------------------------------------------------------

/// Every panel query of the dashboard, Grafana's interval variables given a value.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = repo().join("deploy/monitoring/slotcron-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let promql = expr
                .replace("$__rate_interval", "5m")
                .replace("$__interval", "1m");
            assert!(!promql.contains('$'), "an unknown variable in {expr}");
            queries.push((panel["title"].as_str().unwrap().to_owned(), promql));
        }
    }
    queries
}

/// PromQL words that are not metric names.
const PROMQL_WORDS: &[&str] = &[
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "group", "bool", "and", "or", "unless", "offset",
];

/// PromQL words followed by a list of label names, `by (slotcron_job, le)`.
const LABEL_LIST_WORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: identifiers that are neither a function
/// (followed by `(`), a keyword, nor inside a label matcher, a range or a label list.
fn metric_names(promql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = promql.chars().collect();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' || c == '[' || (c == '(' && skip_list) {
            let close = match c {
                '{' => '}',
                '[' => ']',
                _ => ')',
            };
            i += chars[i..].iter().position(|&d| d == close).unwrap() + 1;
            skip_list = false;
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_') {
            if !c.is_whitespace() {
                skip_list = false;
            }
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let next = chars[i..].iter().find(|c| !c.is_whitespace());
        skip_list = LABEL_LIST_WORDS.contains(&word.as_str());
        if next != Some(&'(') && !skip_list && !PROMQL_WORDS.contains(&word.as_str()) {
            names.insert(word);
        }
    }
    names
}

/// promtool parses each query, as a recording rule's expression.
fn promtool_parses(promtool: &Path, queries: &[(String, String)]) {
    let rules: Vec<String> = queries
        .iter()
        .enumerate()
        .map(|(n, (_, q))| {
            format!(
                "      - record: dashboard:query{n}\n        expr: {}\n",
                serde_json::to_string(q).unwrap()
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard.rules.yml");
    std::fs::write(
        &file,
        format!(
            "groups:\n  - name: dashboard\n    rules:\n{}",
            rules.concat()
        ),
    )
    .unwrap();
    let (code, text) = run_with_stdin(promtool, &["check", "rules", file.to_str().unwrap()], "");
    assert_eq!(
        code, 0,
        "promtool check rules on the dashboard's queries:\n{text}"
    );
}

#[test]
fn grafana_dashboard_queries_pass_promtool_and_name_only_metrics_a_live_replica_serves() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let queries = dashboard_queries();
    assert!(queries.len() >= 10, "{queries:?}");
    promtool_parses(&promtool, &queries);

    // The names they select, against what a live replica with three Redis nodes serves.
    let live = LiveReplica::start("dashboard");
    let body = http_get(live.port, "/metrics")
        .expect("/metrics answers")
        .body;
    let served: BTreeSet<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for (title, promql) in &queries {
        let names = metric_names(promql);
        assert!(!names.is_empty(), "{title}: no metric in {promql}");
        for name in names {
            assert!(
                served.contains(name.as_str()),
                "{title}: {name} is not on /metrics ({promql})"
            );
        }
    }
}
