//! Replica processes (the slotcron binary) with their output captured, and a plain HTTP GET
//! against a replica's `[http]` endpoints.

use super::*;

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
        let mut cmd = Self::run_command(config.as_ref(), id);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self::spawn_cmd("slotcron", cmd)
    }

    /// The command [`Replica::run`] spawns, for a test that adds to it (a resource limit).
    pub fn run_command(config: &Path, id: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
        cmd.args([
            "run",
            "--log-format",
            "json",
            "--replica-id",
            id,
            "--config",
        ])
        .arg(config);
        cmd
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
        if let Some(c) = child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            *exit = Some(status);
            *child = None;
            drop(child);
            drop(exit);
            self.wait_readers(Duration::from_secs(1));
            return Some(status);
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

/// How long a replica process may take to start, or to stop after SIGTERM: seconds on a
/// loaded 2-core machine where it takes milliseconds alone, so only a hung one fails it.
pub const REPLICA_START_STOP: Duration = Duration::from_secs(20);

impl Replica {
    /// [`Replica::run`] under libfaketime: `lib` preloaded directly (not through the `faketime`
    /// wrapper, so signals reach slotcron itself), with `env` (`FAKETIME`, …); named `id`.
    pub fn run_faked(config: &Path, id: &str, lib: &Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = Self::run_command(config, id);
        cmd.env("LD_PRELOAD", lib);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self::spawn_cmd(id, cmd)
    }

    /// Waits for the replica's `slotcron started` line; panics with its output without one.
    pub fn assert_started(&self) {
        let started =
            self.wait_for_json(REPLICA_START_STOP, |l| l["message"] == "slotcron started");
        assert!(
            started.is_some(),
            "{} did not start: {:?}",
            self.name,
            self.lines()
        );
    }
}

/// Replica processes of one config, `replica-{i}`, each seen started: the process fleet of
/// the tests that race real binaries.
pub struct ProcessFleet {
    pub replicas: Vec<Replica>,
}

impl ProcessFleet {
    /// One replica per entry of `envs` (its extra environment), `replica-{i}`.
    pub fn start_with_env(config: &Path, envs: &[Vec<(&str, &str)>]) -> Self {
        let replicas: Vec<Replica> = envs
            .iter()
            .enumerate()
            .map(|(i, env)| Replica::run(config, &format!("replica-{i}"), env))
            .collect();
        for r in &replicas {
            r.assert_started();
        }
        ProcessFleet { replicas }
    }

    /// `n` replicas with no extra environment.
    pub fn start(config: &Path, n: usize) -> Self {
        Self::start_with_env(config, &vec![Vec::new(); n])
    }

    /// SIGTERM to every replica (a paused one resumed first) and waits for each to exit;
    /// panics if one does not. Returns their exit statuses, in order.
    pub fn stop(&self) -> Vec<ExitStatus> {
        stop_all(&self.replicas)
    }

    /// Every JSON line with an `outcome`, by slot, tagged with the replica's index.
    pub fn outcomes(&self) -> BTreeMap<String, Vec<(usize, serde_json::Value)>> {
        let mut by_slot: BTreeMap<String, Vec<(usize, serde_json::Value)>> = BTreeMap::new();
        for (i, r) in self.replicas.iter().enumerate() {
            for line in r.json_lines() {
                if let (Some(slot), Some(_)) = (line["slot"].as_str(), line.get("outcome")) {
                    by_slot.entry(slot.to_owned()).or_default().push((i, line));
                }
            }
        }
        by_slot
    }
}

/// SIGTERM to every one of `replicas` (a paused one resumed first) and waits for each to exit;
/// panics if one does not. Returns their exit statuses, in order.
pub fn stop_all(replicas: &[Replica]) -> Vec<ExitStatus> {
    for r in replicas {
        r.resume();
        r.terminate();
    }
    replicas
        .iter()
        .map(|r| {
            let status = r.wait_timeout(REPLICA_START_STOP);
            status.unwrap_or_else(|| panic!("{} did not exit on SIGTERM", r.name))
        })
        .collect()
}

impl<'a> IntoIterator for &'a ProcessFleet {
    type Item = &'a Replica;
    type IntoIter = std::slice::Iter<'a, Replica>;
    fn into_iter(self) -> Self::IntoIter {
        self.replicas.iter()
    }
}

impl std::ops::Deref for ProcessFleet {
    type Target = [Replica];
    fn deref(&self) -> &[Replica] {
        &self.replicas
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
// Added for tests/it/operations.rs and tests/it/status_page.rs: a plain HTTP GET
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

/// Runs `slotcron ARGS --config CONFIG` to its end (a CLI command: `pause`, `resume`,
/// `history`, `trigger`…); panics unless it exits 0. Returns its stdout. The caller's
/// `RUST_LOG` is not passed on, so the log lines a test reads are the default `info` ones.
pub fn slotcron_cli(config: &Path, args: &[&str]) -> String {
    let out = slotcron_cli_output(config, args);
    assert!(
        out.status.success(),
        "slotcron {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`slotcron_cli`] whatever its exit: the code, and its stdout then its stderr.
pub fn slotcron_cli_status(config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = slotcron_cli_output(config, args);
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text.into_owned())
}

/// Runs `slotcron ARGS --config CONFIG` to its end, whatever its exit: for a test of a failure.
pub fn slotcron_cli_output(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}
