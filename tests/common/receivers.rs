//! The HTTP receiver (wiremock) that plays a robot or webhook and records every request.

use super::*;

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
