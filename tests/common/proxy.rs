//! A fault-injecting TCP proxy between replicas and a Redis node or a receiver.

use super::*;

// ---------------------------------------------------------------------------
// Fault-injecting TCP proxy
// ---------------------------------------------------------------------------

enum ProxyCmd {
    Refuse(bool, std::sync::mpsc::Sender<Result<(), String>>),
    Shutdown,
}

struct ProxyShared {
    target: SocketAddr,
    /// A freeze timed to an answer, shared by the proxies of one replica's nodes.
    trap: Mutex<Option<Arc<FreezeTrap>>>,
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
            trap: Mutex::new(None),
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

    /// Springs `trap` on this proxy's connections (see [`FreezeTrap`]).
    pub fn set_trap(&self, trap: &Arc<FreezeTrap>) {
        *lock(&self.shared.trap) = Some(trap.clone());
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

/// A freeze timed inside a round trip: once armed, the first request through a proxy that
/// carries every one of `request`'s byte strings marks its connection, and the first answer
/// that then comes back on it SIGSTOPs `pid` (the replica) before it is forwarded. The node has
/// answered, the answer waits in the stopped replica's socket: a VM frozen as the answer
/// arrived. Sprung once.
pub struct FreezeTrap {
    pid: u32,
    request: Vec<Vec<u8>>,
    armed: AtomicBool,
    sprung: Mutex<Option<Instant>>,
}

impl FreezeTrap {
    /// A trap for `pid` on requests holding every one of `request` (RESP bytes), not armed.
    pub fn new(pid: u32, request: &[&str]) -> Arc<Self> {
        Arc::new(FreezeTrap {
            pid,
            request: request.iter().map(|r| r.as_bytes().to_vec()).collect(),
            armed: AtomicBool::new(false),
            sprung: Mutex::new(None),
        })
    }

    /// From now, the next matching round trip freezes the replica.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Waits until the trap has frozen the replica; when it did.
    pub fn wait_sprung(&self, timeout: Duration) -> Option<Instant> {
        wait_until(timeout, || *lock(&self.sprung))
    }

    fn matches(&self, chunk: &[u8]) -> bool {
        let holds = |needle: &Vec<u8>| chunk.windows(needle.len()).any(|w| w == needle.as_slice());
        self.armed.load(Ordering::SeqCst) && self.request.iter().all(holds)
    }

    /// Stops the replica (once) and waits until the kernel shows it stopped, so the answer
    /// forwarded next cannot be read before the freeze.
    fn spring(&self) {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return;
        }
        signal_pid(self.pid, Signal::SIGSTOP);
        let stat = format!("/proc/{}/stat", self.pid);
        let stopped = || {
            let text = std::fs::read_to_string(&stat).ok()?;
            let state = text.rsplit_once(") ")?.1.chars().next()?;
            (state == 'T').then_some(())
        };
        let _ = wait_until(Duration::from_secs(2), stopped);
        *lock(&self.sprung) = Some(Instant::now());
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
            ProxyEvent::Accepted(Ok(client)) => serve(client, &shared),
        }
    }
}

/// Forwards one accepted connection on its own task until it ends or `drop_all` cuts it.
fn serve(client: tokio::net::TcpStream, shared: &Arc<ProxyShared>) {
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
    // Set when a request the trap waits for went up: its answer springs it.
    let asked = Arc::new(AtomicBool::new(false));
    tokio::join!(
        pump(cr, uw, shared.clone(), true, asked.clone()),
        pump(ur, cw, shared.clone(), false, asked)
    );
}

/// The trap's part in forwarding `chunk`: a matching request marks the connection; the next
/// answer on a marked connection springs the trap before it is forwarded.
fn trap(shared: &ProxyShared, chunk: &[u8], upstream: bool, asked: &AtomicBool) {
    let Some(trap) = lock(&shared.trap).clone() else {
        return;
    };
    if upstream {
        if trap.matches(chunk) {
            asked.store(true, Ordering::SeqCst);
        }
    } else if asked.swap(false, Ordering::SeqCst) {
        trap.spring();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<ProxyShared>,
    upstream: bool,
    asked: Arc<AtomicBool>,
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
        trap(&shared, &buf[..n], upstream, &asked);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
