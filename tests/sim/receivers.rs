//! The receivers: what answers the replicas' HTTP requests, through slotcron's HTTP seam
//! (`action::egress`): the real `http` action builds each request (headers, fence,
//! `Idempotency-Key`, retries, handoffs), and the receiver here reads it and answers as the
//! world says: accept, refuse the connection, 5xx, 429, a black hole, or an answer cut off
//! after the effect. Each effect is recorded with its job, slot, fence and key.

use std::sync::Arc;
use std::time::Duration;

use slotcron::unstable::action::egress::{Answer, Egress, Sender, Sending, Sent};

use crate::invariants::Violations;
use crate::world::{Effect, Shared};

/// How long a black-holed request waits before failing as a connect timeout (the client's
/// `CONNECT_TIMEOUT`): nothing was written, so it is handed off.
const BLACK_HOLE: Duration = slotcron::unstable::action::CONNECT_TIMEOUT;

/// How every receiver answers, while a fault says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Answering {
    /// 200, the effect recorded.
    #[default]
    Accept,
    /// The connection refused (nothing sent).
    Refuse,
    /// This status, no effect (a 5xx, or 429 with `Retry-After: 1`).
    Status(u16),
    /// Nothing answers the connect: a connect timeout.
    BlackHole,
    /// 429 with this `Retry-After`, no effect.
    Busy(Duration),
}

/// The receivers of replica `replica`'s incarnation `incarnation`.
pub fn egress(world: &Shared, replica: &str, incarnation: u64, v: &Violations) -> Egress {
    Egress::Via(Arc::new(Receivers {
        world: world.clone(),
        replica: replica.to_owned(),
        incarnation,
        v: v.clone(),
    }))
}

struct Receivers {
    world: Shared,
    replica: String,
    incarnation: u64,
    v: Violations,
}

impl Sender for Receivers {
    fn send(&self, request: reqwest::Request) -> Sending {
        let (sent, after) = self.arrive(&request);
        Box::pin(async move {
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            sent
        })
    }
}

fn header(request: &reqwest::Request, name: &str) -> String {
    (request.headers().get(name))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn answer(status: u16) -> Sent {
    answer_after(status, (status == 429).then_some(Duration::from_secs(1)))
}

fn answer_after(status: u16, retry_after: Option<Duration>) -> Sent {
    Sent::Answered(Answer {
        status: reqwest::StatusCode::from_u16(status).expect("a status"),
        retry_after,
        body: String::new(),
    })
}

impl Receivers {
    /// What one request meets, and how long before the sender hears it.
    fn arrive(&self, request: &reqwest::Request) -> (Sent, Duration) {
        let mut w = self.world.lock();
        let refused = || Sent::NotSent("connection refused".to_owned());
        if !w.alive(&self.replica, self.incarnation) {
            return (
                Sent::NotSent("a dead process sends nothing".to_owned()),
                Duration::ZERO,
            );
        }
        let answering = match w.egress_broken.contains(&self.replica) || w.receivers_refuse {
            true => Answering::Refuse,
            false => w.answering,
        };
        match answering {
            Answering::Refuse => return (refused(), Duration::ZERO),
            Answering::BlackHole => {
                let wait = request
                    .timeout()
                    .map_or(BLACK_HOLE, |t| (*t).min(BLACK_HOLE));
                return (Sent::NotSent("connect timed out".to_owned()), wait);
            }
            Answering::Status(_) | Answering::Busy(_) | Answering::Accept => {}
        }
        // The request reached the receiver: its run is in flight until one is acted on.
        let effect = self.effect(w.now_us(), request);
        self.v.on_request(&effect);
        match answering {
            Answering::Status(status) => return (answer(status), Duration::ZERO),
            Answering::Busy(after) => return (answer_after(429, Some(after)), Duration::ZERO),
            _ => {}
        }
        let stale = request.timeout().is_none_or(|t| t.is_zero());
        w.event(|| {
            format!(
                "effect {} {} fence={} key={} by {}",
                effect.job, effect.slot_us, effect.fence, effect.key, effect.replica
            )
        });
        self.v.on_effect(&mut w, &effect, stale);
        w.effects.push(effect);
        if w.ambiguous > 0 {
            w.ambiguous -= 1;
            let cut = "the answer was cut off after the receiver acted".to_owned();
            return (Sent::Uncertain(cut), Duration::ZERO);
        }
        (answer(200), Duration::ZERO)
    }

    /// The effect `request` has, as its headers name it.
    fn effect(&self, at_us: i64, request: &reqwest::Request) -> Effect {
        let slot = header(request, "x-slotcron-slot");
        let slot_us = chrono::DateTime::parse_from_rfc3339(&slot)
            .map(|t| t.timestamp_micros())
            .unwrap_or_default();
        Effect {
            job: header(request, "x-slotcron-job"),
            slot_us,
            fence: header(request, "x-slotcron-fence").parse().unwrap_or(-1),
            key: header(request, "idempotency-key"),
            replica: self.replica.clone(),
            at_us,
        }
    }
}
