//! A robot that misbehaves at the TCP level, which wiremock cannot: it reads each request whole
//! and then resets the connection, closes it without answering, or cuts its answer short. Every
//! request it read is recorded with its arrival time, so tests can count what reached it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// What the robot does once it has read a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Resets the connection (RST) after the first request of each slot (`X-Slotcron-Slot`);
    /// answers any later request of the slot with WeCom's success.
    ResetFirstOfEachSlot,
    /// Resets the connection after every request.
    ResetAlways,
    /// Closes the connection (FIN) without a byte of answer.
    CloseWithoutAnswer,
    /// Answers 200 with a `Content-Length` longer than the body it sends, then closes.
    TruncatedAnswer,
}

/// One request the robot read in full.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub at: DateTime<Utc>,
    /// Header names lower-cased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl RawRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// The misbehaving robot, on a free loopback port until dropped.
pub struct RawReceiver {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<RawRequest>>>,
    stop: Arc<AtomicBool>,
}

const WECOM_OK: &str = r#"{"errcode":0,"errmsg":"ok"}"#;

impl RawReceiver {
    pub fn start(mode: Misbehaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the raw receiver");
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (log, flag) = (requests.clone(), stop.clone());
        std::thread::spawn(move || accept_loop(listener, mode, log, flag));
        RawReceiver {
            addr,
            requests,
            stop,
        }
    }

    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<RawRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Requests read, by `X-Slotcron-Slot`.
    pub fn by_slot(&self) -> HashMap<String, Vec<RawRequest>> {
        let mut by_slot: HashMap<String, Vec<RawRequest>> = HashMap::new();
        for r in self.requests() {
            let slot = r.header("x-slotcron-slot").unwrap_or("").to_owned();
            by_slot.entry(slot).or_default().push(r);
        }
        by_slot
    }
}

impl Drop for RawReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn accept_loop(
    listener: TcpListener,
    mode: Misbehaviour,
    log: Arc<Mutex<Vec<RawRequest>>>,
    stop: Arc<AtomicBool>,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let log = log.clone();
        std::thread::spawn(move || serve(stream, mode, &log));
    }
}

/// Serves one connection: each request is read whole, recorded, then misbehaved upon.
fn serve(stream: TcpStream, mode: Misbehaviour, log: &Mutex<Vec<RawRequest>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().expect("cloning the stream"));
    let mut stream = stream;
    while let Some(request) = read_request(&mut reader) {
        let first_of_slot = {
            let mut log = log.lock().unwrap();
            let slot = request.header("x-slotcron-slot").map(str::to_owned);
            let first = !log
                .iter()
                .any(|r| r.header("x-slotcron-slot").map(str::to_owned) == slot);
            log.push(request);
            first
        };
        match mode {
            Misbehaviour::ResetFirstOfEachSlot if !first_of_slot => {
                answer(&mut stream, 200, WECOM_OK, WECOM_OK.len())
            }
            Misbehaviour::ResetFirstOfEachSlot | Misbehaviour::ResetAlways => return reset(stream),
            Misbehaviour::CloseWithoutAnswer => return,
            Misbehaviour::TruncatedAnswer => {
                answer(&mut stream, 200, r#"{"errcode":0"#, 100);
                return;
            }
        }
    }
}

fn answer(stream: &mut TcpStream, status: u16, body: &str, content_length: usize) {
    let head = format!(
        "HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n"
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
}

/// Closes with RST rather than FIN: SO_LINGER on, zero seconds.
fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a plain setsockopt on a socket this function owns, with a correctly sized value.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

/// One HTTP/1.1 request (head and `Content-Length` body); `None` at the end of the stream.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<RawRequest> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    if line.trim().is_empty() {
        return None;
    }
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(RawRequest {
        at: Utc::now(),
        headers,
        body,
    })
}
