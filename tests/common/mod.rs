//! Shared test harness for slotcron's integration tests.
//!
//! Every `tests/test_*.rs` file does `mod common;`. Nothing here refers to the
//! slotcron crate itself: the harness only starts real processes (redis-server,
//! the slotcron binary), a real HTTP receiver (wiremock) and a TCP fault proxy.
//!
//! Everything is synchronous on purpose (each piece that needs async I/O runs
//! on its own thread with its own runtime), so the helpers can be used from
//! plain `#[test]` functions as well as from `#[tokio::test]` ones.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub mod raw_http;
pub mod tools;

use nix::sys::signal::{kill as send_signal, Signal};
use nix::unistd::Pid;

/// Path of the redis-server binary (override with `REDIS_SERVER_BIN`).
pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_string())
}

/// A currently free TCP port on 127.0.0.1 (bound, read, released).
///
/// Another process may take it before the caller binds it: callers that
/// start servers should retry on "address in use".
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// Writes `toml_text` to `dir/slotcron.toml` and returns the path.
pub fn write_config(dir: impl AsRef<Path>, toml_text: &str) -> PathBuf {
    write_file(dir, "slotcron.toml", toml_text)
}

/// Writes `contents` to `dir/name` and returns the path.
pub fn write_file(dir: impl AsRef<Path>, name: &str, contents: &str) -> PathBuf {
    let path = dir.as_ref().join(name);
    std::fs::write(&path, contents).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// Polls `f` every 10 ms until it returns `Some`, or `timeout` elapses.
pub fn wait_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Async twin of [`wait_until`] (sleeps with tokio, so it doesn't block a runtime).
pub async fn wait_until_async<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn signal_pid(pid: u32, sig: Signal) -> bool {
    send_signal(Pid::from_raw(pid as i32), sig).is_ok()
}

/// Waits (polling) for a child to exit; `None` if it is still running at the deadline.
fn wait_child_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------
// redis-server
// ---------------------------------------------------------------------------

/// How long [`RedisServer`] waits for a fresh redis-server to answer PING.
pub const REDIS_START_DEADLINE: Duration = Duration::from_secs(5);

struct RedisProc {
    child: Option<Child>,
    pid: u32,
    paused: bool,
}

/// One real `redis-server` process on 127.0.0.1, in its own temp dir, with no
/// persistence. All methods take `&self`, so a server can be shared (e.g. in
/// an `Arc`) with a thread or task that pauses or kills it.
pub struct RedisServer {
    port: u16,
    extra_args: Vec<String>,
    /// Extra environment of the process (libfaketime for a server on a faked date).
    env: Vec<(String, String)>,
    proc_: Mutex<RedisProc>,
    // Last field: removed after the process has been killed.
    dir: tempfile::TempDir,
}

enum StartError {
    AddrInUse,
    Other(String),
}

impl RedisServer {
    /// Starts a redis-server on a free port. Panics if it can't.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a redis-server on a free port, with extra arguments appended,
    /// e.g. `&["--requirepass", "s3cret"]`.
    pub fn start_with(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// Starts a redis-server with extra arguments and environment variables (e.g. libfaketime,
    /// so its `TIME` reads a faked date).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let dir = tempfile::Builder::new()
            .prefix("slotcron-redis-")
            .tempdir()
            .expect("create temp dir for redis");
        let extra_args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut last_err = String::new();
        for _ in 0..8 {
            let port = free_port();
            match spawn_redis(port, dir.path(), &extra_args, &env) {
                Ok(child) => {
                    let pid = child.id();
                    return RedisServer {
                        port,
                        extra_args,
                        env,
                        proc_: Mutex::new(RedisProc {
                            child: Some(child),
                            pid,
                            paused: false,
                        }),
                        dir,
                    };
                }
                Err(StartError::AddrInUse) => {
                    last_err = format!("port {port} taken");
                    continue;
                }
                Err(StartError::Other(e)) => panic!("redis-server failed to start: {e}"),
            }
        }
        panic!("redis-server failed to start after retries: {last_err}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (no password, even with `--requirepass`: see [`Self::auth_url`]).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Like [`Self::url`] but with the `--requirepass` password, if one was given.
    pub fn auth_url(&self) -> String {
        match self.password() {
            Some(p) => format!("redis://:{}@127.0.0.1:{}", p, self.port),
            None => self.url(),
        }
    }

    /// The value given after `--requirepass`, if any.
    pub fn password(&self) -> Option<String> {
        self.extra_args
            .iter()
            .position(|a| a == "--requirepass")
            .and_then(|i| self.extra_args.get(i + 1).cloned())
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Pid of the current (or last) redis-server process.
    pub fn pid(&self) -> u32 {
        lock(&self.proc_).pid
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The server's stdout/stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Whether the process is alive (a paused process counts as running).
    pub fn is_running(&self) -> bool {
        let mut p = lock(&self.proc_);
        match p.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn is_paused(&self) -> bool {
        lock(&self.proc_).paused && self.is_running()
    }

    /// SIGKILL and reap. No-op if not running.
    pub fn kill(&self) {
        let mut p = lock(&self.proc_);
        Self::kill_locked(&mut p);
    }

    fn kill_locked(p: &mut RedisProc) {
        if let Some(mut child) = p.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        p.paused = false;
    }

    /// Kills the server if it's running, then starts a fresh, empty one on the
    /// same port (retrying for a couple of seconds if the port is busy).
    pub fn restart(&self) {
        let mut p = lock(&self.proc_);
        Self::kill_locked(&mut p);
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match spawn_redis(self.port, self.dir.path(), &self.extra_args, &self.env) {
                Ok(child) => {
                    p.pid = child.id();
                    p.child = Some(child);
                    p.paused = false;
                    return;
                }
                Err(StartError::AddrInUse) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(StartError::AddrInUse) => {
                    panic!("redis restart: port {} stays in use", self.port)
                }
                Err(StartError::Other(e)) => panic!("redis restart failed: {e}"),
            }
        }
    }

    /// SIGSTOP: the server keeps its socket (connects still succeed through the
    /// kernel backlog) but answers nothing, like a hung node.
    pub fn pause(&self) {
        let mut p = lock(&self.proc_);
        if p.child.is_some() && signal_pid(p.pid, Signal::SIGSTOP) {
            p.paused = true;
        }
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        let mut p = lock(&self.proc_);
        if p.child.is_some() {
            signal_pid(p.pid, Signal::SIGCONT);
        }
        p.paused = false;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let mut p = lock(&self.proc_);
        if p.paused && p.child.is_some() {
            signal_pid(p.pid, Signal::SIGCONT);
        }
        Self::kill_locked(&mut p);
        drop(p);
        if std::thread::panicking() {
            let log = self.log();
            if !log.trim().is_empty() {
                eprintln!(
                    "--- redis-server :{} log (tail) ---\n{}\n---",
                    self.port,
                    tail(&log, 15)
                );
            }
        }
    }
}

fn spawn_redis(
    port: u16,
    dir: &Path,
    extra: &[String],
    env: &[(String, String)],
) -> Result<Child, StartError> {
    let log_path = dir.join("redis.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| StartError::Other(format!("open {}: {e}", log_path.display())))?;
    let log_len_before = log.metadata().map(|m| m.len()).unwrap_or(0);
    let log2 = log
        .try_clone()
        .map_err(|e| StartError::Other(e.to_string()))?;
    let mut cmd = Command::new(redis_server_bin());
    cmd.arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--save")
        .arg("")
        .arg("--appendonly")
        .arg("no")
        .arg("--daemonize")
        .arg("no")
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2));
    let mut child = cmd.spawn().map_err(|e| {
        StartError::Other(format!(
            "spawn {}: {e} (is redis-server installed? see scripts/test.sh)",
            redis_server_bin()
        ))
    })?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + REDIS_START_DEADLINE;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read(&log_path).unwrap_or_default();
            let text = String::from_utf8_lossy(&text[(log_len_before as usize).min(text.len())..])
                .into_owned();
            if text.contains("Address already in use") {
                return Err(StartError::AddrInUse);
            }
            return Err(StartError::Other(format!(
                "redis-server exited with {status}; log:\n{}",
                tail(&text, 20)
            )));
        }
        if raw_ping(addr, Duration::from_millis(200)) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(StartError::Other(format!(
                "redis-server on port {port} did not answer PING within {:?}; log:\n{}",
                REDIS_START_DEADLINE,
                tail(&text, 20)
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends an inline `PING` on a fresh connection; true on any RESP reply
/// (`+PONG`, or an error such as `-NOAUTH` when a password is set).
fn raw_ping(addr: SocketAddr, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) if n > 0 => buf[0] == b'+' || buf[0] == b'-',
        _ => false,
    }
}

/// N independent redis-server nodes (not Redis Cluster), as Redlock wants.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(n: usize) -> Self {
        Self::start_with(n, &[])
    }

    pub fn start_with(n: usize, args: &[&str]) -> Self {
        Self::start_with_env(n, args, &[])
    }

    /// `n` nodes with extra arguments and environment (see [`RedisServer::start_with_env`]).
    pub fn start_with_env(n: usize, args: &[&str], env: &[(&str, &str)]) -> Self {
        RedisCluster {
            nodes: (0..n)
                .map(|_| RedisServer::start_with_env(args, env))
                .collect(),
        }
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, RedisServer> {
        self.nodes.iter()
    }
}

impl std::ops::Index<usize> for RedisCluster {
    type Output = RedisServer;
    fn index(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }
}

impl<'a> IntoIterator for &'a RedisCluster {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;
    fn into_iter(self) -> Self::IntoIter {
        self.nodes.iter()
    }
}

// ---------------------------------------------------------------------------
// Redis client helpers (sync API of the redis crate; it needs no extra feature)
// ---------------------------------------------------------------------------

/// Default timeout of [`redis_cmd`] and friends (the whole call).
pub const REDIS_CMD_TIMEOUT: Duration = Duration::from_secs(2);

fn build_cmd(args: &[&str]) -> redis::Cmd {
    assert!(!args.is_empty(), "redis command needs a name");
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd
}

/// Runs one command on a fresh connection with a 2 s timeout.
/// e.g. `redis_cmd(&url, &["SET", "k", "v", "PX", "1000"])`.
pub fn redis_cmd(url: &str, args: &[&str]) -> redis::RedisResult<redis::Value> {
    redis_query(url, args)
}

/// Like [`redis_cmd`], with `timeout` bounding the whole call (connect + command).
pub fn redis_cmd_timeout(
    url: &str,
    args: &[&str],
    timeout: Duration,
) -> redis::RedisResult<redis::Value> {
    redis_query_timeout(url, args, timeout)
}

/// Like [`redis_cmd`], converting the reply (e.g. to `Option<String>`, `i64`, `Vec<String>`).
pub fn redis_query<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> redis::RedisResult<T> {
    redis_query_timeout(url, args, REDIS_CMD_TIMEOUT)
}

pub fn redis_query_timeout<T: redis::FromRedisValue>(
    url: &str,
    args: &[&str],
    timeout: Duration,
) -> redis::RedisResult<T> {
    use redis::IntoConnectionInfo;
    let start = Instant::now();
    // No CLIENT SETINFO round trip on connect: the whole call stays within `timeout`.
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let mut con = client.get_connection_with_timeout(timeout)?;
    let remaining = timeout
        .checked_sub(start.elapsed())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "redis command timed out",
            ))
        })?;
    con.set_read_timeout(Some(remaining))?;
    con.set_write_timeout(Some(remaining))?;
    build_cmd(args).query(&mut con)
}

/// GET key (None if missing). Panics on connection errors.
pub fn redis_get(url: &str, key: &str) -> Option<String> {
    redis_query(url, &["GET", key]).unwrap_or_else(|e| panic!("GET {key} on {url}: {e}"))
}

/// KEYS pattern, sorted. Panics on connection errors.
pub fn redis_keys(url: &str, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> =
        redis_query(url, &["KEYS", pattern]).unwrap_or_else(|e| panic!("KEYS on {url}: {e}"));
    keys.sort();
    keys
}

/// PTTL key in ms (-2 missing, -1 no expiry). Panics on connection errors.
pub fn redis_pttl(url: &str, key: &str) -> i64 {
    redis_query(url, &["PTTL", key]).unwrap_or_else(|e| panic!("PTTL {key} on {url}: {e}"))
}

/// True if the server answers PING within `timeout`.
pub fn redis_ping(url: &str, timeout: Duration) -> bool {
    matches!(
        redis_query_timeout::<String>(url, &["PING"], timeout).as_deref(),
        Ok("PONG")
    )
}

/// Async version of [`redis_cmd`] (tokio multiplexed connection, whole call bounded by `timeout`).
pub async fn redis_cmd_async(
    url: &str,
    args: &[&str],
    timeout: Duration,
) -> redis::RedisResult<redis::Value> {
    let cmd = build_cmd(args);
    let fut = async {
        let client = redis::Client::open(url)?;
        let mut con = client.get_multiplexed_async_connection().await?;
        cmd.query_async::<redis::Value>(&mut con).await
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "redis command timed out",
        ))),
    }
}

// ---------------------------------------------------------------------------
// HTTP receiver (wiremock)
// ---------------------------------------------------------------------------

/// Header used to deduplicate webhook deliveries.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// The `Idempotency-Key` header of a request, if present.
pub fn idempotency_key(req: &wiremock::Request) -> Option<String> {
    req.headers
        .get(IDEMPOTENCY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

struct Reply {
    status: u16,
    body: serde_json::Value,
}

struct ReceiverState {
    requests: Mutex<Vec<wiremock::Request>>,
    /// When each request arrived, on this process's (true) wall clock, in `requests`' order.
    arrivals: Mutex<Vec<chrono::DateTime<chrono::Utc>>>,
    default: Mutex<Reply>,
    queued: Mutex<VecDeque<Reply>>,
    delay_ms: AtomicU64,
}

struct Responder(Arc<ReceiverState>);

impl wiremock::Respond for Responder {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let mut requests = lock(&self.0.requests);
        lock(&self.0.arrivals).push(chrono::Utc::now());
        requests.push(request.clone());
        drop(requests);
        let template = if request.method != wiremock::http::Method::POST {
            wiremock::ResponseTemplate::new(405)
        } else if let Some(r) = lock(&self.0.queued).pop_front() {
            wiremock::ResponseTemplate::new(r.status).set_body_json(r.body)
        } else {
            let d = lock(&self.0.default);
            wiremock::ResponseTemplate::new(d.status).set_body_json(d.body.clone())
        };
        let delay = self.0.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            template.set_delay(Duration::from_millis(delay))
        } else {
            template
        }
    }
}

/// A real local HTTP server (wiremock, on its own thread) that records every
/// request and answers POST on any path with a configurable status and JSON
/// body (default `200 {"errcode":0,"errmsg":"ok"}`); other methods get 405.
/// Usable from sync and async tests alike (no `.await` needed).
pub struct Receiver {
    server: wiremock::MockServer,
    state: Arc<ReceiverState>,
}

impl Receiver {
    pub fn default_body() -> serde_json::Value {
        serde_json::json!({"errcode": 0, "errmsg": "ok"})
    }

    pub fn start() -> Self {
        Self::start_with_body(Self::default_body())
    }

    pub fn start_with_body(body: serde_json::Value) -> Self {
        let state = Arc::new(ReceiverState {
            requests: Mutex::new(Vec::new()),
            arrivals: Mutex::new(Vec::new()),
            default: Mutex::new(Reply { status: 200, body }),
            queued: Mutex::new(VecDeque::new()),
            delay_ms: AtomicU64::new(0),
        });
        let responder_state = state.clone();
        // wiremock's start/register are async; run them on a scoped thread with
        // its own runtime so this works inside or outside a tokio runtime. The
        // server itself runs on wiremock's own thread afterwards.
        let server = std::thread::scope(|s| {
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime for receiver");
                rt.block_on(async move {
                    let server = wiremock::MockServer::builder()
                        .disable_request_recording()
                        .start()
                        .await;
                    wiremock::Mock::given(wiremock::matchers::any())
                        .respond_with(Responder(responder_state))
                        .mount(&server)
                        .await;
                    server
                })
            })
            .join()
            .expect("receiver start thread panicked")
        });
        Receiver { server, state }
    }

    /// Base URI, e.g. `http://127.0.0.1:PORT`.
    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// `http://127.0.0.1:PORT/path` (a missing leading `/` is added).
    pub fn url(&self, path: &str) -> String {
        if path.starts_with('/') {
            format!("{}{}", self.server.uri(), path)
        } else {
            format!("{}/{}", self.server.uri(), path)
        }
    }

    pub fn addr(&self) -> SocketAddr {
        *self.server.address()
    }

    /// Changes the default reply to POSTs.
    pub fn set_response(&self, status: u16, body: serde_json::Value) {
        *lock(&self.state.default) = Reply { status, body };
    }

    /// Queues a one-shot reply used by the next POST (FIFO) before the default.
    pub fn push_response(&self, status: u16, body: serde_json::Value) {
        lock(&self.state.queued).push_back(Reply { status, body });
    }

    /// Delay before every reply (the request is recorded on arrival).
    pub fn set_delay(&self, delay: Duration) {
        self.state
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// All requests received so far (any method), in arrival order.
    pub fn received(&self) -> Vec<wiremock::Request> {
        lock(&self.state.requests).clone()
    }

    pub fn count(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// All requests received so far, each with its arrival time on this process's clock.
    pub fn received_at(&self) -> Vec<(wiremock::Request, chrono::DateTime<chrono::Utc>)> {
        let requests = lock(&self.state.requests);
        let arrivals = lock(&self.state.arrivals);
        requests
            .iter()
            .cloned()
            .zip(arrivals.iter().copied())
            .collect()
    }

    /// [`Self::received_at`] as (arrival, request), the arrival a `SystemTime`.
    pub fn arrivals(&self) -> Vec<(std::time::SystemTime, wiremock::Request)> {
        self.received_at()
            .into_iter()
            .map(|(request, at)| (at.into(), request))
            .collect()
    }

    /// Bodies of the received requests parsed as JSON (`Value::Null` if not JSON).
    pub fn received_json(&self) -> Vec<serde_json::Value> {
        self.received()
            .iter()
            .map(|r| r.body_json().unwrap_or(serde_json::Value::Null))
            .collect()
    }

    /// Forgets the requests received so far.
    pub fn clear(&self) {
        let mut requests = lock(&self.state.requests);
        lock(&self.state.arrivals).clear();
        requests.clear();
    }

    /// Received requests grouped by `Idempotency-Key` (requests without the
    /// header are grouped under the empty string).
    pub fn by_idempotency_key(&self) -> BTreeMap<String, Vec<wiremock::Request>> {
        let mut map: BTreeMap<String, Vec<wiremock::Request>> = BTreeMap::new();
        for r in self.received() {
            map.entry(idempotency_key(&r).unwrap_or_default())
                .or_default()
                .push(r);
        }
        map
    }

    /// Number of received requests per `Idempotency-Key` ("" = no header).
    pub fn counts_by_idempotency_key(&self) -> BTreeMap<String, usize> {
        self.by_idempotency_key()
            .into_iter()
            .map(|(k, v)| (k, v.len()))
            .collect()
    }

    /// Keys that were delivered more than once, with their counts.
    pub fn duplicate_keys(&self) -> BTreeMap<String, usize> {
        self.counts_by_idempotency_key()
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect()
    }

    /// Blocks until at least `n` requests arrived or `timeout` elapsed; returns
    /// what was received (check its length).
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<wiremock::Request> {
        let _ = wait_until(timeout, || (self.count() >= n).then_some(()));
        self.received()
    }

    /// Async twin of [`Self::wait_for`].
    pub async fn wait_for_async(&self, n: usize, timeout: Duration) -> Vec<wiremock::Request> {
        let _ = wait_until_async(timeout, || (self.count() >= n).then_some(())).await;
        self.received()
    }
}

// ---------------------------------------------------------------------------
// Child processes (slotcron replicas)
// ---------------------------------------------------------------------------

/// A child process (typically `env!("CARGO_BIN_EXE_slotcron")`) whose stdout and
/// stderr lines are captured, in arrival order, into a shared buffer. Dropping
/// it kills it; if the test is panicking, the captured output is printed.
pub struct Replica {
    name: String,
    child: Mutex<Option<Child>>,
    pid: u32,
    lines: Arc<Mutex<Vec<String>>>,
    readers_done: Arc<AtomicUsize>,
    readers: usize,
    exit: Mutex<Option<ExitStatus>>,
}

impl Replica {
    /// Spawns `bin args...` with extra environment variables (inherits the rest).
    pub fn spawn(bin: impl AsRef<OsStr>, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(bin.as_ref());
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let name = Path::new(bin.as_ref())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "replica".into());
        Self::spawn_cmd(&name, cmd)
    }

    /// `slotcron run --log-format json --replica-id ID --config CONFIG`, with extra environment
    /// variables: a replica as the tests run it.
    pub fn run(config: impl AsRef<Path>, id: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
        cmd.args([
            "run",
            "--log-format",
            "json",
            "--replica-id",
            id,
            "--config",
        ])
        .arg(config.as_ref());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self::spawn_cmd("slotcron", cmd)
    }

    /// Spawns a prepared command (e.g. wrapped in `faketime`, with a cwd);
    /// stdin/stdout/stderr are overridden. `name` labels the dumped output.
    pub fn spawn_cmd(name: &str, mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name} ({cmd:?}): {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let readers_done = Arc::new(AtomicUsize::new(0));
        let mut readers = 0;
        if let Some(out) = child.stdout.take() {
            spawn_line_reader(out, lines.clone(), readers_done.clone());
            readers += 1;
        }
        if let Some(err) = child.stderr.take() {
            spawn_line_reader(err, lines.clone(), readers_done.clone());
            readers += 1;
        }
        Replica {
            name: name.to_string(),
            pid: child.id(),
            child: Mutex::new(Some(child)),
            lines,
            readers_done,
            readers,
            exit: Mutex::new(None),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The shared line buffer (stdout and stderr interleaved).
    pub fn lines_handle(&self) -> Arc<Mutex<Vec<String>>> {
        self.lines.clone()
    }

    /// Snapshot of the captured lines.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.lines).clone()
    }

    /// The captured lines that parse as JSON objects.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        lock(&self.lines)
            .iter()
            .filter_map(|l| parse_json_object(l))
            .collect()
    }

    /// Waits for a captured line matching `pred` (checks earlier lines too).
    pub fn wait_for_line(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&str) -> bool,
    ) -> Option<String> {
        wait_until(timeout, || {
            lock(&self.lines).iter().find(|l| pred(l)).cloned()
        })
    }

    /// Waits for a captured JSON object line matching `pred`.
    pub fn wait_for_json(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        wait_until(timeout, || {
            lock(&self.lines)
                .iter()
                .filter_map(|l| parse_json_object(l))
                .find(|v| pred(v))
        })
    }

    /// Exit status if it has exited (reaps it), `None` while running.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        let mut exit = lock(&self.exit);
        if exit.is_some() {
            return *exit;
        }
        let mut child = lock(&self.child);
        if let Some(c) = child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                *exit = Some(status);
                *child = None;
                drop(child);
                drop(exit);
                self.wait_readers(Duration::from_secs(1));
                return Some(status);
            }
        }
        *exit
    }

    pub fn is_running(&self) -> bool {
        self.try_wait().is_none()
    }

    /// Waits up to `timeout` for the process to exit. Once it has, also waits
    /// (up to 1 s) for its output to be fully captured.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ExitStatus> {
        wait_until(timeout, || self.try_wait())
    }

    fn wait_readers(&self, timeout: Duration) {
        let _ = wait_until(timeout, || {
            (self.readers_done.load(Ordering::SeqCst) >= self.readers).then_some(())
        });
    }

    fn signal(&self, sig: Signal) -> bool {
        let child = lock(&self.child);
        child.is_some() && signal_pid(self.pid, sig)
    }

    /// SIGKILL, reap, and return the exit status.
    pub fn kill(&self) -> Option<ExitStatus> {
        if self.try_wait().is_none() {
            self.signal(Signal::SIGKILL);
        }
        self.wait_timeout(Duration::from_secs(5))
    }

    /// SIGTERM (graceful shutdown); use [`Self::wait_timeout`] to see it exit.
    /// A paused process only acts on it after [`Self::resume`].
    pub fn terminate(&self) {
        self.signal(Signal::SIGTERM);
    }

    /// Sends an arbitrary signal.
    pub fn send_signal(&self, sig: Signal) -> bool {
        self.signal(sig)
    }

    /// SIGSTOP.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Prints the captured output to stderr, each line prefixed by the name.
    pub fn dump(&self) {
        eprintln!("--- output of {} (pid {}) ---", self.name, self.pid);
        for l in lock(&self.lines).iter() {
            eprintln!("[{}] {}", self.name, l);
        }
        eprintln!("--- end of {} ---", self.name);
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let mut child = lock(&self.child);
        if let Some(mut c) = child.take() {
            signal_pid(self.pid, Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
        drop(child);
        if std::thread::panicking() {
            self.wait_readers(Duration::from_millis(500));
            self.dump();
        }
    }
}

fn parse_json_object(line: &str) -> Option<serde_json::Value> {
    let t = line.trim();
    if !t.starts_with('{') {
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(t) {
        Ok(v) if v.is_object() => Some(v),
        _ => None,
    }
}

fn spawn_line_reader<R: Read + Send + 'static>(
    r: R,
    lines: Arc<Mutex<Vec<String>>>,
    done: Arc<AtomicUsize>,
) {
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.trim_end_matches(['\n', '\r']).to_string();
                    lock(&lines).push(line);
                }
            }
        }
        done.fetch_add(1, Ordering::SeqCst);
    });
}

// ---------------------------------------------------------------------------
// Fault-injecting TCP proxy
// ---------------------------------------------------------------------------

enum ProxyCmd {
    Refuse(bool, std::sync::mpsc::Sender<Result<(), String>>),
    Shutdown,
}

struct ProxyShared {
    target: SocketAddr,
    up_latency_us: AtomicU64,
    down_latency_us: AtomicU64,
    blackhole: AtomicBool,
    next_id: AtomicU64,
    total: AtomicU64,
    live: Mutex<HashSet<u64>>,
    generation: tokio::sync::watch::Sender<u64>,
}

/// Removes a connection id from the live set when its task ends or is dropped.
struct ConnGuard {
    id: u64,
    shared: Arc<ProxyShared>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        lock(&self.shared.live).remove(&self.id);
    }
}

/// A TCP proxy on 127.0.0.1:free-port forwarding to `target`, with faults
/// injected on demand. It runs on its own thread with its own tokio runtime;
/// all methods are synchronous. Stops (closing every connection) on drop.
pub struct FaultyProxy {
    port: u16,
    shared: Arc<ProxyShared>,
    cmd: tokio::sync::mpsc::UnboundedSender<ProxyCmd>,
    thread: Option<JoinHandle<()>>,
}

impl FaultyProxy {
    /// Starts a proxy to `target` (e.g. `redis.addr()`).
    pub fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("local_addr").port();
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let shared = Arc::new(ProxyShared {
            target,
            up_latency_us: AtomicU64::new(0),
            down_latency_us: AtomicU64::new(0),
            blackhole: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            total: AtomicU64::new(0),
            live: Mutex::new(HashSet::new()),
            generation,
        });
        let (cmd_tx, cmd_rx) = tokio::sync::mpsc::unbounded_channel();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("faulty-proxy-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                rt.block_on(proxy_main(listener, port, thread_shared, cmd_rx));
            })
            .expect("spawn proxy thread");
        FaultyProxy {
            port,
            shared,
            cmd: cmd_tx,
            thread: Some(thread),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// `redis://127.0.0.1:PROXY_PORT`, for proxying a redis node.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PROXY_PORT`.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Delay added before forwarding each chunk client -> target, so one
    /// request/response round trip gets about `d` slower.
    pub fn set_latency(&self, d: Duration) {
        self.shared
            .up_latency_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Delay added before forwarding each chunk target -> client.
    pub fn set_response_latency(&self, d: Duration) {
        self.shared
            .down_latency_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// While on, bytes in both directions are read and silently discarded:
    /// connections stay open but nothing gets through (a partition that
    /// produces timeouts rather than connection errors).
    pub fn set_blackhole(&self, on: bool) {
        self.shared.blackhole.store(on, Ordering::SeqCst);
    }

    /// Closes every current connection (both sides) and waits (up to 2 s)
    /// until they are gone. New connections are still accepted.
    pub fn drop_all(&self) {
        let ids: Vec<u64> = {
            let live = lock(&self.shared.live);
            self.shared.generation.send_modify(|g| *g += 1);
            live.iter().copied().collect()
        };
        let _ = wait_until(Duration::from_secs(2), || {
            let live = lock(&self.shared.live);
            ids.iter().all(|id| !live.contains(id)).then_some(())
        });
    }

    /// `true`: stop listening, so new connects get ECONNREFUSED (existing
    /// connections are kept; combine with [`Self::drop_all`]). `false`: listen
    /// again on the same port. Takes effect before this returns.
    pub fn set_refuse(&self, refuse: bool) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.cmd.send(ProxyCmd::Refuse(refuse, tx)).is_err() {
            panic!("proxy thread is gone");
        }
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("proxy set_refuse({refuse}): {e}"),
            Err(e) => panic!("proxy set_refuse({refuse}): no answer: {e}"),
        }
    }

    /// Connections currently open through the proxy.
    pub fn connection_count(&self) -> usize {
        lock(&self.shared.live).len()
    }

    /// Connections accepted since start.
    pub fn total_connections(&self) -> u64 {
        self.shared.total.load(Ordering::SeqCst)
    }
}

impl Drop for FaultyProxy {
    fn drop(&mut self) {
        let _ = self.cmd.send(ProxyCmd::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum ProxyEvent {
    Cmd(Option<ProxyCmd>),
    Accepted(std::io::Result<tokio::net::TcpStream>),
}

async fn accept_opt(l: &Option<tokio::net::TcpListener>) -> std::io::Result<tokio::net::TcpStream> {
    match l {
        Some(l) => l.accept().await.map(|(s, _)| s),
        None => std::future::pending().await,
    }
}

async fn proxy_main(
    listener: TcpListener,
    port: u16,
    shared: Arc<ProxyShared>,
    mut cmd_rx: tokio::sync::mpsc::UnboundedReceiver<ProxyCmd>,
) {
    let mut listener =
        Some(tokio::net::TcpListener::from_std(listener).expect("tokio listener from std"));
    loop {
        let ev = tokio::select! {
            c = cmd_rx.recv() => ProxyEvent::Cmd(c),
            a = accept_opt(&listener) => ProxyEvent::Accepted(a),
        };
        match ev {
            ProxyEvent::Cmd(None) | ProxyEvent::Cmd(Some(ProxyCmd::Shutdown)) => break,
            ProxyEvent::Cmd(Some(ProxyCmd::Refuse(refuse, ack))) => {
                let res = if refuse {
                    listener = None;
                    Ok(())
                } else if listener.is_none() {
                    match rebind(port).await {
                        Ok(l) => {
                            listener = Some(l);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    Ok(())
                };
                let _ = ack.send(res);
            }
            ProxyEvent::Accepted(Err(_)) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ProxyEvent::Accepted(Ok(client)) => {
                let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
                shared.total.fetch_add(1, Ordering::SeqCst);
                // Register and subscribe under the live lock, so drop_all
                // either sees this id or this connection sees its bump.
                let mut gen_rx = {
                    let mut live = lock(&shared.live);
                    live.insert(id);
                    shared.generation.subscribe()
                };
                let guard = ConnGuard {
                    id,
                    shared: shared.clone(),
                };
                let conn_shared = shared.clone();
                tokio::spawn(async move {
                    let _guard = guard;
                    tokio::select! {
                        _ = proxy_conn(client, conn_shared) => {}
                        _ = gen_rx.changed() => {}
                    }
                });
            }
        }
    }
}

async fn rebind(port: u16) -> Result<tokio::net::TcpListener, String> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => return Ok(l),
            Err(e) if Instant::now() >= deadline => return Err(format!("rebind :{port}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn proxy_conn(client: tokio::net::TcpStream, shared: Arc<ProxyShared>) {
    let upstream = match tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(shared.target),
    )
    .await
    {
        Ok(Ok(s)) => s,
        _ => return,
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::join!(
        pump(cr, uw, shared.clone(), true),
        pump(ur, cw, shared.clone(), false)
    );
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<ProxyShared>,
    upstream: bool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let latency = if upstream {
            &shared.up_latency_us
        } else {
            &shared.down_latency_us
        };
        let us = latency.load(Ordering::SeqCst);
        if us > 0 {
            tokio::time::sleep(Duration::from_micros(us)).await;
        }
        if shared.blackhole.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

// ---------------------------------------------------------------------------
// Added for tests/test_ops.rs and tests/test_status_page.rs: a plain HTTP GET
// against a replica's [http] endpoints (no HTTP client crate needed).
// ---------------------------------------------------------------------------

/// A reply to [`http_get`].
#[derive(Debug, Clone)]
pub struct HttpReply {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` on 127.0.0.1:`port` with `Connection: close`; `None` when nothing answers
/// (connection refused, timeout, or a reply that is not HTTP).
pub fn http_get(port: u16, path: &str) -> Option<HttpReply> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Some(HttpReply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&data[..eol]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}
