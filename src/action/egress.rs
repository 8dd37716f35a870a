//! The HTTP seam: where a built request leaves the replica. Every action builds its request on
//! the shared reqwest client and hands it to [`Http::send`]; in production (`Network`) reqwest
//! sends it and the answer is read here, in a simulation (`Via`) a sender of its own answers it
//! (tests/sim's receivers), so the headers, fence, retries, handoffs and verdicts above this
//! line run the same either way. As with the Redis dialer, no file can choose `Via`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::RETRY_AFTER;
use reqwest::{RequestBuilder, StatusCode};

/// Most of a response body read: enough for any robot's JSON answer, and a 10 MB answer from a
/// misbehaving receiver costs nothing.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What a receiver answered, before an action reads it.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// `Retry-After`, when the receiver asked for a pause.
    pub retry_after: Option<Duration>,
    /// The body, read to decide (robots answer errors with 200), cut at [`MAX_BODY_BYTES`].
    pub body: String,
}

/// How one request fared on the wire.
#[derive(Debug)]
pub enum Sent {
    /// A whole answer was read.
    Answered(Answer),
    /// Nothing left this machine (connect, DNS, TLS, proxy): another replica may get through.
    NotSent(String),
    /// Written, and no whole answer read: the receiver may have acted on it.
    Uncertain(String),
    /// The request could not be built (a bad header value): no attempt will do better.
    Invalid(String),
}

/// A sent request's outcome, later.
pub type Sending = Pin<Box<dyn Future<Output = Sent> + Send>>;

/// Sends requests somewhere other than the network (a simulation's receivers).
pub trait Sender: Send + Sync + 'static {
    /// Sends `request` (its timeout, if any, is [`reqwest::Request::timeout`]).
    fn send(&self, request: reqwest::Request) -> Sending;
}

/// Where a replica's HTTP requests go.
#[derive(Clone, Default)]
pub enum Egress {
    /// Through reqwest's connection pool to the network: production.
    #[default]
    Network,
    /// To a sender of its own (the simulation).
    Via(Arc<dyn Sender>),
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Egress::Network => f.write_str("Network"),
            Egress::Via(_) => f.write_str("Via"),
        }
    }
}

/// The HTTP client all actions share (one connection pool per replica) and where its requests
/// go. Derefs to the reqwest client, on which actions build their requests.
#[derive(Clone, Debug)]
pub struct Http {
    client: reqwest::Client,
    egress: Egress,
}

impl std::ops::Deref for Http {
    type Target = reqwest::Client;

    fn deref(&self) -> &reqwest::Client {
        &self.client
    }
}

impl Http {
    /// `client`'s requests sent to the network.
    pub fn new(client: reqwest::Client) -> Self {
        Http {
            client,
            egress: Egress::Network,
        }
    }

    /// This client with its requests sent through `egress`.
    pub fn through(self, egress: Egress) -> Self {
        Http { egress, ..self }
    }

    /// Sends `request` and reads its answer.
    pub async fn send(&self, request: RequestBuilder) -> Sent {
        match &self.egress {
            Egress::Network => network(request).await,
            Egress::Via(sender) => match request.build() {
                Ok(request) => sender.send(request).await,
                Err(e) => Sent::Invalid(describe(&e)),
            },
        }
    }
}

async fn network(request: RequestBuilder) -> Sent {
    match request.send().await {
        Ok(response) => match read_answer(response).await {
            Ok(answer) => Sent::Answered(answer),
            Err(e) => Sent::Uncertain(format!("the answer was cut off: {}", describe(&e))),
        },
        Err(e) if e.is_connect() => Sent::NotSent(describe(&e)),
        Err(e) if e.is_builder() => Sent::Invalid(describe(&e)),
        Err(e) => Sent::Uncertain(describe(&e)),
    }
}

/// reqwest's error without the URL (it carries the webhook key) but with its cause.
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let mut text = kind.to_owned();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn read_answer(mut response: reqwest::Response) -> Result<Answer, reqwest::Error> {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = MAX_BODY_BYTES - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_BODY_BYTES {
            break;
        }
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}
