//! Self-tests of the shared harness in tests/common (real redis-server, real
//! HTTP, real sockets). Kept quick: a few seconds in total.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn ping_ok(url: &str) -> bool {
    redis_ping(url, Duration::from_secs(1))
}

#[test]
fn free_port_is_bindable() {
    let p = free_port();
    assert!(p > 0);
    std::net::TcpListener::bind(("127.0.0.1", p)).expect("port should be free");
}

#[test]
fn cluster_ping_pause_resume_kill_restart() {
    let cluster = RedisCluster::start(3);
    assert_eq!(cluster.len(), 3);
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    let mut ports = cluster.ports();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 3, "distinct ports");
    for (i, url) in urls.iter().enumerate() {
        assert_eq!(url, &format!("redis://127.0.0.1:{}", cluster[i].port()));
        assert!(ping_ok(url), "node {i} answers PING");
        assert!(cluster[i].is_running());
        assert!(cluster[i].pid() > 0);
    }
    // The nodes are independent.
    redis_cmd(&urls[0], &["SET", "k", "v0"]).unwrap();
    assert_eq!(redis_get(&urls[0], "k").as_deref(), Some("v0"));
    assert_eq!(redis_get(&urls[1], "k"), None);
    assert_eq!(redis_keys(&urls[0], "*"), vec!["k".to_string()]);
    assert_eq!(redis_pttl(&urls[0], "k"), -1);

    // Paused: a PING times out quickly instead of hanging.
    let node = &cluster[1];
    node.pause();
    assert!(node.is_paused());
    let t = Instant::now();
    let r = redis_cmd_timeout(node.url().as_str(), &["PING"], Duration::from_millis(100));
    let elapsed = t.elapsed();
    assert!(r.is_err(), "PING to a paused node must fail, got {r:?}");
    // Its 100 ms timeout against a hang (the node stays paused until resumed): 5 s tells them
    // apart on any machine.
    assert!(elapsed < Duration::from_secs(5), "timed out in {elapsed:?}");
    node.resume();
    assert!(!node.is_paused());
    assert!(ping_ok(&node.url()));

    // Killed: connection refused; restarted: same port, empty.
    let node = &cluster[0];
    let old_pid = node.pid();
    node.kill();
    assert!(!node.is_running());
    assert!(!redis_ping(&node.url(), Duration::from_millis(200)));
    node.restart();
    assert!(node.is_running());
    assert_ne!(node.pid(), old_pid);
    assert_eq!(node.url(), urls[0]);
    assert!(ping_ok(&node.url()));
    assert_eq!(redis_get(&node.url(), "k"), None, "restarted node is empty");
    assert!(node.log().contains("Ready to accept connections"));

    // Restart while paused works too.
    cluster[2].pause();
    cluster[2].restart();
    assert!(ping_ok(&cluster[2].url()));
}

#[test]
fn dropping_a_paused_server_reaps_it() {
    let s = RedisServer::start();
    let pid = s.pid();
    s.pause();
    drop(s);
    // The process is gone (reaped): signal 0 fails.
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_err());
}

#[test]
fn requirepass_server() {
    let s = RedisServer::start_with(&["--requirepass", "s3cret"]);
    assert_eq!(s.password().as_deref(), Some("s3cret"));
    assert!(
        redis_cmd(&s.url(), &["PING"]).is_err(),
        "NOAUTH without password"
    );
    assert!(ping_ok(&s.auth_url()));
}

#[tokio::test]
async fn async_redis_helper() {
    let s = RedisServer::start();
    let v = redis_cmd_async(&s.url(), &["SET", "a", "1"], Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(v, redis::Value::Okay);
    assert_eq!(redis_get(&s.url(), "a").as_deref(), Some("1"));
}

#[test]
fn proxy_latency_drop_refuse_blackhole() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr());
    let url = proxy.redis_url();
    assert!(ping_ok(&url));

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let ping = |con: &mut redis::Connection| -> Duration {
        let t = Instant::now();
        let r: String = redis::cmd("PING").query(con).unwrap();
        assert_eq!(r, "PONG");
        t.elapsed()
    };
    // A latency long beside a local PING (milliseconds, tens on a loaded machine), so that
    // "added once", "added more than once" and "taken off" are told apart under load.
    const LATENCY: Duration = Duration::from_secs(1);
    let base = ping(&mut con);
    proxy.set_latency(LATENCY);
    let slow = ping(&mut con);
    assert!(
        slow >= LATENCY && slow < base + LATENCY * 2,
        "base {base:?}, with {LATENCY:?} latency {slow:?}"
    );
    proxy.set_latency(Duration::ZERO);
    assert!(ping(&mut con) < LATENCY);

    // drop_all closes the existing connection.
    assert_eq!(proxy.connection_count(), 1);
    proxy.drop_all();
    assert_eq!(proxy.connection_count(), 0);
    assert!(redis::cmd("PING").query::<String>(&mut con).is_err());
    assert!(ping_ok(&url), "new connections still work");

    // Refuse: nothing listens on the port; then it listens again.
    proxy.set_refuse(true);
    let e = TcpStream::connect(proxy.addr()).expect_err("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    proxy.set_refuse(false);
    assert!(ping_ok(&url));

    // Blackhole: connects, but nothing comes back.
    proxy.set_blackhole(true);
    assert!(!redis_ping(&url, Duration::from_millis(150)));
    proxy.set_blackhole(false);
    assert!(ping_ok(&url));
    assert!(proxy.total_connections() >= 5);
}

fn raw_post(addr: std::net::SocketAddr, path: &str, key: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Idempotency-Key: {key}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

#[test]
fn receiver_records_and_groups_std_posts() {
    let rx = Receiver::start();
    assert!(rx.url("/hook").ends_with("/hook"));
    assert_eq!(rx.url("hook"), rx.url("/hook"));
    let resp = raw_post(rx.addr(), "/hook", "job-a:1", r#"{"n":1}"#);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains(r#""errmsg":"ok""#), "{resp}");
    raw_post(rx.addr(), "/other/path", "job-a:1", r#"{"n":2}"#);
    raw_post(rx.addr(), "/hook", "job-b:1", "not json");

    rx.push_response(500, serde_json::json!({"errcode": 1}));
    rx.set_response(202, serde_json::json!({"x": true}));
    let r1 = raw_post(rx.addr(), "/hook", "job-c:1", "{}");
    let r2 = raw_post(rx.addr(), "/hook", "job-c:1", "{}");
    assert!(r1.starts_with("HTTP/1.1 500"), "{r1}");
    assert!(r2.starts_with("HTTP/1.1 202"), "{r2}");

    let got = rx.wait_for(5, Duration::from_secs(2));
    assert_eq!(got.len(), 5);
    assert_eq!(got[1].url.path(), "/other/path");
    assert_eq!(idempotency_key(&got[0]).as_deref(), Some("job-a:1"));
    let counts = rx.counts_by_idempotency_key();
    assert_eq!(counts.get("job-a:1"), Some(&2));
    assert_eq!(counts.get("job-b:1"), Some(&1));
    assert_eq!(counts.get("job-c:1"), Some(&2));
    assert_eq!(rx.duplicate_keys().len(), 2);
    let bodies = rx.received_json();
    assert_eq!(bodies[0], serde_json::json!({"n": 1}));
    assert_eq!(bodies[2], serde_json::Value::Null);
    rx.clear();
    assert_eq!(rx.count(), 0);
}

#[tokio::test]
async fn receiver_works_inside_tokio_with_raw_tokio_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rx = Receiver::start_with_body(serde_json::json!({"ok": 1}));
    rx.set_delay(Duration::from_millis(50));
    let mut s = tokio::net::TcpStream::connect(rx.addr()).await.unwrap();
    let body = r#"{"hello":"world"}"#;
    let req = format!(
        "POST /wh HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let t = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut resp = String::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_string(&mut resp))
        .await
        .unwrap()
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains(r#"{"ok":1}"#), "{resp}");
    let got = rx.wait_for_async(1, Duration::from_secs(1)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(rx.counts_by_idempotency_key().get("k1"), Some(&1));
}

#[test]
fn replica_captures_lines_and_signals() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "[x]\na = 1\n");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), "[x]\na = 1\n");

    let script = r#"echo '{"event":"ready","n":1}'; echo plain; echo "err $FOO" >&2; \
        trap 'echo "{\"event\":\"term\"}"; exit 3' TERM; while true; do sleep 0.02; done"#;
    let r = Replica::spawn("/bin/sh", &["-c", script], &[("FOO", "bar")]);
    let ready = r
        .wait_for_json(Duration::from_secs(3), |v| v["event"] == "ready")
        .expect("ready line");
    assert_eq!(ready["n"], 1);
    assert!(
        r.wait_for_line(Duration::from_secs(3), |l| l == "err bar")
            .is_some()
    );
    assert!(r.lines().iter().any(|l| l == "plain"));
    assert!(r.is_running());

    r.pause();
    std::thread::sleep(Duration::from_millis(20));
    assert!(r.wait_timeout(Duration::from_millis(50)).is_none());
    r.resume();

    r.terminate();
    let status = r.wait_timeout(Duration::from_secs(3)).expect("exited");
    assert_eq!(status.code(), Some(3));
    assert!(r.json_lines().iter().any(|v| v["event"] == "term"));
    assert_eq!(r.json_lines().len(), 2);

    let r2 = Replica::spawn("/bin/sh", &["-c", "sleep 30"], &[]);
    let t = Instant::now();
    let st = r2.kill().expect("killed");
    assert!(st.code().is_none());
    // Killed, not waited out: well under the 30 s the process would sleep.
    assert!(t.elapsed() < Duration::from_secs(15));
}
