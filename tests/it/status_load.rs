//! The status endpoints (`[http] listen`) under clients an attacker or an unlucky operator
//! brings (issue 29, cases 4 and 5): a flood of page loads costs no slot, and clients that
//! send half a request head or never read their answers do not hold a SIGTERMed replica open.

use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::fleet::{FleetToml, hook_jobs};
use common::*;

/// The promise of case 5: a SIGTERMed replica exits 0 within this long, whatever its HTTP
/// clients do. (Its own share: the HTTP server's 2 s grace; the rest is margin for a loaded
/// machine.)
const SHUTDOWN_PROMISE: Duration = Duration::from_secs(10);

fn started(r: &Replica) {
    assert!(
        r.wait_for_json(Duration::from_secs(20), |l| l["message"]
            == "slotcron started")
            .is_some(),
        "{:?}",
        r.lines()
    );
}

/// A connection to the replica's HTTP port.
fn connect(port: u16) -> TcpStream {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connecting");
    // Bounded, so a writer thread blocked by a server that stopped reading ends on its own.
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// A client that sent half a request head and then nothing.
fn half_open(port: u16) -> TcpStream {
    let mut s = connect(port);
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: slotcron\r\nX-Half: ")
        .unwrap();
    s
}

/// A client that pipelines requests for the status page and never reads an answer: the
/// server's answers fill the socket's buffers and its writes block.
fn never_reads(port: u16) -> TcpStream {
    let s = connect(port);
    let mut writer = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let request = b"GET / HTTP/1.1\r\nHost: slotcron\r\n\r\n";
        // Until the server stops reading too (the write times out) or closes.
        while writer.write_all(request).is_ok() {}
    });
    s
}

/// Whether the server has written at least a buffer-full to `s` that nobody read: the client
/// side's receive queue holds bytes (peeked, not read).
fn server_wrote_to(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1];
    let peeked = s.peek(&mut buf).is_ok_and(|n| n > 0);
    s.set_nonblocking(false).unwrap();
    peeked
}

/// A standalone replica with a log job every second and its endpoints on `port`.
fn standalone(dir: &std::path::Path, port: u16, name: &str) -> Replica {
    let config = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\n\
         [job.action]\ntype = \"log\"\ncontent = \"tick\"\n"
    );
    let r = Replica::run(write_config(dir, &config), name, &[]);
    started(&r);
    r
}

#[test]
fn a_half_sent_request_head_is_dropped_by_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _r = standalone(dir.path(), port, "half");
    let mut s = half_open(port);
    // The server's bound is 5 s; 30 s leaves a loaded machine its margin.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let sent = Instant::now();
    let mut answer = Vec::new();
    let end = s.read_to_end(&mut answer);
    assert!(
        end.is_ok(),
        "the connection was still open {:?} after half a request head: {end:?}",
        sent.elapsed()
    );
    eprintln!("closed {:?} after half a request head", sent.elapsed());
}

#[test]
fn sigterm_exits_0_promptly_with_half_open_and_unread_http_connections() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let r = standalone(dir.path(), port, "held");
    let half: Vec<TcpStream> = (0..5).map(|_| half_open(port)).collect();
    let unread: Vec<TcpStream> = (0..3).map(|_| never_reads(port)).collect();
    // The pipelining clients are answered (then blocked) before the signal.
    let answered = wait_until(Duration::from_secs(20), || {
        unread.iter().all(server_wrote_to).then_some(())
    });
    assert!(
        answered.is_some(),
        "the server never answered the pipelining clients"
    );
    let sent = Instant::now();
    r.terminate();
    let exit = r.wait_timeout(SHUTDOWN_PROMISE);
    let took = sent.elapsed();
    assert!(
        exit.is_some(),
        "still running {took:?} after SIGTERM with 5 half-open and 3 unread connections: {:?}",
        r.lines().iter().rev().take(5).collect::<Vec<_>>()
    );
    assert!(exit.unwrap().success(), "exit {exit:?}");
    eprintln!("exited 0 {took:?} after SIGTERM");
    drop(half);
    assert!(
        r.json_lines().iter().any(|l| l["message"] == "stopped"),
        "no graceful stop logged: {:?}",
        r.lines()
    );
}

/// The fleet of case 4: jobs `j00`.. each every second, posting to `receiver`, raced over
/// `nodes`; the replica's endpoints on `port`.
fn flood_config(nodes: &[String], receiver: &str, prefix: &str, port: u16, jobs: usize) -> String {
    let jobs = hook_jobs((0..jobs).map(|i| format!("j{i:02}")), "", receiver);
    FleetToml {
        job: "",
        scheduler: "",
        redis: "",
        rest: &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n{jobs}"),
        ..FleetToml::new(nodes, receiver, prefix)
    }
    .render()
}

/// A keep-alive client sending `HEAD /` as fast as it is answered, until `stop`.
fn page_loader(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut loads = 0;
        let mut s = connect(port);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            if s.write_all(b"HEAD / HTTP/1.1\r\nHost: slotcron\r\n\r\n")
                .is_err()
            {
                s = connect(port);
                continue;
            }
            // One answer head (a HEAD has no body), usually one read.
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            loads += 1;
        }
        loads
    })
}

/// Per job and slot (whole UTC seconds) in `[from, to)`: whether the receiver got it; the
/// misses, and the lateness (arrival − slot) of what arrived, in ms.
fn slots_between(receiver: &Receiver, jobs: usize, from: i64, to: i64) -> (Vec<String>, Vec<i64>) {
    let mut arrived: HashMap<(String, i64), i64> = HashMap::new();
    for (req, at) in receiver.received_at() {
        let header = |name: &str| {
            req.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (Some(job), Some(slot)) = (header("x-slotcron-job"), header("x-slotcron-slot")) else {
            continue;
        };
        let slot = chrono::DateTime::parse_from_rfc3339(&slot)
            .unwrap()
            .timestamp();
        let late = at.timestamp_millis() - slot * 1000;
        arrived.entry((job, slot)).or_insert(late);
    }
    let mut missed = Vec::new();
    let mut lateness = Vec::new();
    for s in from..to {
        for i in 0..jobs {
            match arrived.get(&(format!("j{i:02}"), s)) {
                Some(late) => lateness.push(*late),
                None => missed.push(format!("j{i:02}@{s}")),
            }
        }
    }
    lateness.sort_unstable();
    (missed, lateness)
}

/// CPU-seconds `pid` has used (user + system), from /proc: for the report, not asserted.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime, fields 14 and 15 of the line (11 and 12 after the name), in 1/100 s.
    (ticks(11) + ticks(12)) / 100.0
}

fn p99(sorted: &[i64]) -> i64 {
    sorted.get(sorted.len() * 99 / 100).copied().unwrap_or(0)
}

#[test]
fn a_flood_of_status_page_loads_costs_no_slot() {
    let _heavy = common::heavy();
    // The scenario: two replicas, 40 jobs every second, twenty keep-alive clients
    // sending HEAD / for 20 s (ten on each replica), after a quiet stretch to compare with.
    const JOBS: usize = 40;
    const CLIENTS: usize = 20;
    const FLOOD: Duration = Duration::from_secs(20);
    const QUIET: Duration = Duration::from_secs(10);
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let nodes: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let receiver = Receiver::start();
    let ports = [free_port(), free_port()];
    let replicas: Vec<Replica> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let text = flood_config(&nodes, &receiver.uri(), "flood", *port, JOBS);
            let sub = dir.path().join(format!("r{i}"));
            std::fs::create_dir_all(&sub).unwrap();
            Replica::run(write_config(&sub, &text), &format!("r{i}"), &[])
        })
        .collect();
    replicas.iter().for_each(started);
    // Whole seconds on this machine's clock (the replicas' too: one host); the first and the
    // last second of each stretch are left out (a stretch starts and ends mid-second).
    let quiet_from = chrono::Utc::now().timestamp() + 2;
    let cpu_at_start: Vec<f64> = replicas.iter().map(|r| cpu_seconds(r.pid())).collect();
    std::thread::sleep(QUIET);
    let quiet_to = chrono::Utc::now().timestamp() - 1;
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before: Vec<f64> = replicas.iter().map(|r| cpu_seconds(r.pid())).collect();
    let quiet_cpu: Vec<String> = (cpu_before.iter().zip(&cpu_at_start))
        .map(|(now, start)| format!("{:.1}", now - start))
        .collect();
    let flood_from = chrono::Utc::now().timestamp() + 1;
    let loaders: Vec<_> = (0..CLIENTS)
        .map(|i| page_loader(ports[i % 2], stop.clone()))
        .collect();
    std::thread::sleep(FLOOD);
    let flood_to = chrono::Utc::now().timestamp() - 1;
    stop.store(true, Ordering::Relaxed);
    let cpu: Vec<String> = (replicas.iter().zip(&cpu_before))
        .map(|(r, before)| format!("{:.1}", cpu_seconds(r.pid()) - before))
        .collect();
    let loads: usize = loaders.into_iter().map(|l| l.join().unwrap()).sum();
    // Slots of the flood's last second arrive within their race and the action: a second,
    // and 2 s of margin.
    const LAST_SLOTS_ARRIVE: Duration = Duration::from_secs(3);
    std::thread::sleep(LAST_SLOTS_ARRIVE);
    let (quiet_missed, quiet_late) = slots_between(&receiver, JOBS, quiet_from, quiet_to);
    let (missed, late) = slots_between(&receiver, JOBS, flood_from, flood_to);
    eprintln!(
        "quiet: {} slots, {} missed, p99 lateness {} ms, replicas' CPU-seconds {quiet_cpu:?} in {QUIET:?}; flood ({loads} page loads): {} slots, {} missed, p99 lateness {} ms, replicas' CPU-seconds {cpu:?}",
        quiet_late.len() + quiet_missed.len(),
        quiet_missed.len(),
        p99(&quiet_late),
        late.len() + missed.len(),
        missed.len(),
        p99(&late)
    );
    assert!(loads > CLIENTS, "the clients loaded the page {loads} times");
    assert!(
        missed.is_empty(),
        "{} of {} slots missed under the flood, the first: {:?}",
        missed.len(),
        late.len() + missed.len(),
        &missed[..missed.len().min(8)]
    );
    for r in &replicas {
        r.terminate();
    }
}

/// `/readyz` on `port`: its status and text.
fn readyz(port: u16) -> (u16, String) {
    let reply = http_get(port, "/readyz").expect("/readyz answers");
    (reply.status, reply.body)
}

#[test]
fn a_replica_whose_races_find_no_majority_fails_readyz_though_its_nodes_answer_ping() {
    // The nodes run out of memory: they refuse the lock's writes (an error reply, so they are
    // healthy in the replica's view) and still answer PING and TIME.
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let nodes: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let receiver = Receiver::start();
    let port = free_port();
    let text = flood_config(&nodes, &receiver.uri(), "full", port, 1);
    let r = Replica::run(write_config(dir.path(), &text), "full", &[]);
    started(&r);
    // Slots run, and the replica is ready (the first slot within its second, plus margin).
    receiver.wait_for(1, Duration::from_secs(20));
    assert_eq!(readyz(port).0, 200, "{}", readyz(port).1);
    let set_maxmemory = |bytes: &str| {
        for node in &nodes {
            redis_cmd(node, &["CONFIG", "SET", "maxmemory", bytes]).unwrap();
        }
    };
    set_maxmemory("1");
    // Three slots in a row (one a second) without a majority; margin for a loaded machine.
    let failed = wait_until(Duration::from_secs(30), || {
        let (code, body) = readyz(port);
        (code == 503).then_some(body)
    });
    let body = failed.unwrap_or_else(|| {
        panic!(
            "/readyz stayed 200 while no race found a majority: {:?}",
            readyz(port)
        )
    });
    assert!(body.contains("found no majority"), "{body}");
    for node in &nodes {
        assert!(
            redis_cmd(node, &["PING"]).is_ok(),
            "{node} stopped answering PING"
        );
    }
    set_maxmemory("0");
    let ready = wait_until(Duration::from_secs(30), || {
        (readyz(port).0 == 200).then_some(())
    });
    assert!(ready.is_some(), "not ready again: {:?}", readyz(port));
    r.terminate();
}
