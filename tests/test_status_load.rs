//! The status endpoints (`[http] listen`) under clients an attacker or an unlucky operator
//! brings (issue 29, cases 4 and 5): a flood of page loads costs no slot, and clients that
//! send half a request head or never read their answers do not hold a SIGTERMed replica open.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

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

#[test]
fn sigterm_exits_0_promptly_with_half_open_and_unread_http_connections() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\n\
         [job.action]\ntype = \"log\"\ncontent = \"tick\"\n"
    );
    let r = Replica::run(write_config(dir.path(), &config), "held", &[]);
    started(&r);
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
