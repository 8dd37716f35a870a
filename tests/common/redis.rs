//! Real redis-server processes ([`RedisServer`], [`RedisCluster`]) and the sync/async
//! client helpers the tests use to look inside them.

use super::*;

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
    /// The server binary: redis-server, or valkey-server (same flags).
    bin: PathBuf,
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
        Self::start_bin(Path::new(&redis_server_bin()), args, env)
    }

    /// Starts `bin` (redis-server, or valkey-server: it takes the same flags) with extra
    /// arguments and environment variables.
    pub fn start_bin(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
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
            match spawn_redis(bin, port, dir.path(), &extra_args, &env) {
                Ok(child) => {
                    let pid = child.id();
                    return RedisServer {
                        port,
                        bin: bin.to_owned(),
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
            match spawn_redis(
                &self.bin,
                self.port,
                self.dir.path(),
                &self.extra_args,
                &self.env,
            ) {
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
    bin: &Path,
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
    let mut cmd = Command::new(bin);
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
    let child = cmd.spawn().map_err(|e| {
        StartError::Other(format!(
            "spawn {}: {e} (is it installed? see scripts/test.sh)",
            bin.display()
        ))
    })?;
    wait_for_ping(child, port, &log_path, log_len_before)
}

/// Waits until the fresh redis-server on `port` answers PING; its log (from `log_len_before`)
/// says why when it exits first (an address in use is told apart, to retry on another port).
fn wait_for_ping(
    mut child: Child,
    port: u16,
    log_path: &Path,
    log_len_before: u64,
) -> Result<Child, StartError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + REDIS_START_DEADLINE;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read(log_path).unwrap_or_default();
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
            let text = std::fs::read_to_string(log_path).unwrap_or_default();
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
        Self::start_bin(n, Path::new(&redis_server_bin()), args, env)
    }

    /// `n` nodes of `bin` (redis-server or valkey-server; see [`RedisServer::start_bin`]).
    pub fn start_bin(n: usize, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        RedisCluster {
            nodes: (0..n)
                .map(|_| RedisServer::start_bin(bin, args, env))
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

/// The book's least-privilege ACL user, for the key prefix `slotcron`: its name.
pub const ACL_USER: &str = "slot";
/// Its password.
pub const ACL_PASSWORD: &str = "acl-s3cret";

/// Server arguments that create [`ACL_USER`] with the book's ACL line, and turn the default
/// user off (so nothing can pass unless that user may).
pub fn acl_args() -> Vec<String> {
    let pass = format!(">{ACL_PASSWORD}");
    let line = [
        ACL_USER,
        "on",
        &pass,
        "~slotcron:*",
        "&slotcron:*",
        "+@all",
        "-@dangerous",
        "-@admin",
    ];
    let mut args = vec!["--user".to_owned()];
    args.extend(line.iter().map(|w| w.to_string()));
    args.extend(["--user", "default", "off"].map(str::to_owned));
    args
}

impl RedisCluster {
    /// The nodes' URLs with [`ACL_USER`]'s credentials.
    pub fn acl_urls(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|p| format!("redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{p}"))
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Redis client helpers (sync API of the redis crate; it needs no extra feature)
// ---------------------------------------------------------------------------

/// Default timeout of [`redis_cmd`] and friends (the whole call).
pub const REDIS_CMD_TIMEOUT: Duration = Duration::from_secs(2);

fn build_cmd(args: &[&str]) -> ::redis::Cmd {
    assert!(!args.is_empty(), "redis command needs a name");
    let mut cmd = ::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd
}

/// Runs one command on a fresh connection with a 2 s timeout.
/// e.g. `redis_cmd(&url, &["SET", "k", "v", "PX", "1000"])`.
pub fn redis_cmd(url: &str, args: &[&str]) -> ::redis::RedisResult<::redis::Value> {
    redis_query(url, args)
}

/// Like [`redis_cmd`], with `timeout` bounding the whole call (connect + command).
pub fn redis_cmd_timeout(
    url: &str,
    args: &[&str],
    timeout: Duration,
) -> ::redis::RedisResult<::redis::Value> {
    redis_query_timeout(url, args, timeout)
}

/// Like [`redis_cmd`], converting the reply (e.g. to `Option<String>`, `i64`, `Vec<String>`).
pub fn redis_query<T: ::redis::FromRedisValue>(
    url: &str,
    args: &[&str],
) -> ::redis::RedisResult<T> {
    redis_query_timeout(url, args, REDIS_CMD_TIMEOUT)
}

pub fn redis_query_timeout<T: ::redis::FromRedisValue>(
    url: &str,
    args: &[&str],
    timeout: Duration,
) -> ::redis::RedisResult<T> {
    use ::redis::IntoConnectionInfo;
    let start = Instant::now();
    // No CLIENT SETINFO round trip on connect: the whole call stays within `timeout`.
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let client = ::redis::Client::open(info.set_redis_settings(settings))?;
    let mut con = client.get_connection_with_timeout(timeout)?;
    let remaining = timeout
        .checked_sub(start.elapsed())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ::redis::RedisError::from(std::io::Error::new(
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
) -> ::redis::RedisResult<::redis::Value> {
    let cmd = build_cmd(args);
    let fut = async {
        let client = ::redis::Client::open(url)?;
        let mut con = client.get_multiplexed_async_connection().await?;
        cmd.query_async::<::redis::Value>(&mut con).await
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(::redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "redis command timed out",
        ))),
    }
}
