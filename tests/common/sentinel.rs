//! A real Sentinel deployment: a primary, its replica and three sentinels (`redis-server
//! --sentinel`, or `valkey-server --sentinel`: same flags), on free ports, stopped on drop.

use super::*;

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "mymaster";

/// The replication and Sentinel user of a set under the ACL line (`+@all`: the replica's
/// `PSYNC` and Sentinel's `REPLICAOF` are `@admin`), beside the book's least-privilege
/// [`ACL_USER`], which slotcron uses.
const ADMIN_USER: &str = "repl";
/// Its password.
const ADMIN_PASSWORD: &str = "repl-s3cret";

/// How long the sentinels may take to know each other and the replica (hello messages every
/// 2 s).
const DISCOVERY: Duration = Duration::from_secs(20);

/// One sentinel process, with its config file (Sentinel rewrites it, so it is its own).
pub struct SentinelProc {
    port: u16,
    child: Mutex<Option<Child>>,
    dir: tempfile::TempDir,
}

impl SentinelProc {
    /// Starts `bin --sentinel` monitoring `primary` with quorum 2, down-after 1 s and
    /// failover-timeout 3 s; `acl`: as [`ADMIN_USER`] (the sentinel itself needs no password).
    /// Tried again on another port when the free port found was taken meanwhile.
    fn start(bin: &Path, primary: u16, acl: bool) -> Self {
        let mut log = String::new();
        for _ in 0..5 {
            let sentinel = Self::spawn(bin, primary, acl);
            let url = sentinel.url();
            let answers = || redis_ping(&url, Duration::from_millis(200)).then_some(());
            // Alive after it answered: a server of another test on the port answers too.
            if wait_until(REDIS_START_DEADLINE, answers).is_some() && sentinel.is_running() {
                return sentinel;
            }
            log = sentinel.log();
            if !log.contains("Address already in use") {
                break;
            }
        }
        panic!("a sentinel did not start:\n{log}");
    }

    fn spawn(bin: &Path, primary: u16, acl: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("slotcron-sentinel-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        let auth = match acl {
            true => format!(
                "sentinel auth-user {MASTER} {ADMIN_USER}\nsentinel auth-pass {MASTER} {ADMIN_PASSWORD}\n"
            ),
            false => String::new(),
        };
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 3000\n\
             sentinel parallel-syncs {MASTER} 1\n{auth}",
            dir = dir.path().display(),
        );
        std::fs::write(&conf, text).unwrap();
        let log = std::fs::File::create(dir.path().join("sentinel.log")).unwrap();
        let child = Command::new(bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} --sentinel: {e}", bin.display()));
        SentinelProc {
            port,
            child: Mutex::new(Some(child)),
            dir,
        }
    }

    fn is_running(&self) -> bool {
        let mut child = lock(&self.child);
        child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The sentinel's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for SentinelProc {
    fn drop(&mut self) {
        if let Some(mut child) = lock(&self.child).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- sentinel :{} log (tail) ---\n{}",
                self.port,
                tail(&self.log(), 15)
            );
        }
    }
}

/// A primary, one replica of it, and three sentinels that know both and each other.
pub struct SentinelSet {
    /// The primary at start.
    pub primary: RedisServer,
    /// Its replica at start.
    pub replica: RedisServer,
    /// The three sentinels.
    pub sentinels: Vec<SentinelProc>,
    /// The data nodes run under the book's ACL line (default user off).
    acl: bool,
}

impl SentinelSet {
    /// Starts the set on redis-server.
    pub fn start() -> Self {
        Self::start_bin(Path::new(&redis_server_bin()), false)
    }

    /// Starts the set on `bin` (redis-server or valkey-server), and waits until each sentinel
    /// knows the replica and the two other sentinels (a failover needs them). `acl`: the data
    /// nodes have the book's ACL user ([`ACL_USER`]), an admin user for replication and
    /// Sentinel, and the default user off.
    pub fn start_bin(bin: &Path, acl: bool) -> Self {
        let mut args: Vec<String> = Vec::new();
        if acl {
            args = acl_args();
            let admin = format!(">{ADMIN_PASSWORD}");
            args.extend(
                ["--user", ADMIN_USER, "on", &admin, "~*", "&*", "+@all"].map(str::to_owned),
            );
            args.extend(
                ["--masteruser", ADMIN_USER, "--masterauth", ADMIN_PASSWORD].map(str::to_owned),
            );
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let primary = RedisServer::start_bin(bin, &args, &[]);
        let port = primary.port().to_string();
        let replica_args = [&args[..], &["--replicaof", "127.0.0.1", &port]].concat();
        let replica = RedisServer::start_bin(bin, &replica_args, &[]);
        let sentinels = (0..3)
            .map(|_| SentinelProc::start(bin, primary.port(), acl))
            .collect();
        let set = SentinelSet {
            primary,
            replica,
            sentinels,
            acl,
        };
        let known = || set.sentinels.iter().all(|s| set.knows_all(s)).then_some(());
        if wait_until(DISCOVERY, known).is_none() {
            panic!("the sentinels did not discover each other and the replica");
        }
        set
    }

    fn knows_all(&self, sentinel: &SentinelProc) -> bool {
        let count = |what: &str| {
            redis_query::<Vec<::redis::Value>>(&sentinel.url(), &["SENTINEL", what, MASTER])
                .map(|v| v.len())
                .unwrap_or(0)
        };
        count("sentinels") == 2 && count("replicas") == 1 && self.replica_linked()
    }

    fn replica_linked(&self) -> bool {
        let url = self.admin_url(&self.replica);
        let info = redis_query::<String>(&url, &["INFO", "replication"]);
        info.is_ok_and(|i| i.contains("master_link_status:up"))
    }

    /// `server`'s URL as a user that may run anything.
    pub fn admin_url(&self, server: &RedisServer) -> String {
        match self.acl {
            true => format!(
                "redis://{ADMIN_USER}:{ADMIN_PASSWORD}@127.0.0.1:{}",
                server.port()
            ),
            false => server.url(),
        }
    }

    /// The sentinels' URLs: `[redis] nodes` in sentinel mode.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelProc::url).collect()
    }

    /// The primary's port as the first sentinel names it now.
    pub fn primary_port(&self) -> Option<u16> {
        let url = self.sentinels[0].url();
        let args = ["SENTINEL", "get-master-addr-by-name", MASTER];
        let addr = redis_query::<Option<(String, u16)>>(&url, &args).ok()??;
        Some(addr.1)
    }
}

impl SentinelSet {
    /// Cuts the replica's replication link and keeps it down: the replica is given a wrong
    /// `masterauth` and its link to the primary killed, so each reconnection fails at `AUTH`.
    /// Sentinel still sees the replica answer, and may promote it.
    pub fn cut_replication(&self) {
        let url = self.admin_url(&self.replica);
        redis_cmd(&url, &["CONFIG", "SET", "masterauth", "not-the-primary-s"]).unwrap();
        redis_cmd(&url, &["CLIENT", "KILL", "TYPE", "master"]).unwrap();
        let down = || (!self.replica_linked()).then_some(());
        wait_until(DISCOVERY, down).expect("the replica's link stays down");
    }
}
