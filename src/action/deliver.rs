//! One HTTP delivery with bounded retries, all inside the job's deadline.
//!
//! Each action supplies how to build its request and how to read the answer; this module owns
//! the headers every request carries, the retry loop, the backoff and the body size cap.

use std::time::Duration;

use rand::Rng;
use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, StatusCode};
use tokio::time::Instant;

use super::egress::Sent;
use super::rate::Budget;
use super::{ActionError, Delivery, SendContext};

/// Most attempts one slot makes, even when the deadline would allow more.
pub const MAX_ATTEMPTS: u32 = 8;
/// First backoff; doubled each retry.
pub const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// Longest backoff between two attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub use super::egress::{Answer, MAX_BODY_BYTES};

/// An action's reading of one answer; `T` is what a success yields (a media id, or nothing).
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<T = ()> {
    /// Delivered; what the success yields.
    Success(T),
    /// Worth another attempt (network error, 5xx, 429, a robot's rate limit).
    Retry {
        /// Why this attempt failed.
        reason: String,
        /// How long the receiver asked to wait, if it did.
        after: Option<Duration>,
    },
    /// Final: another attempt would get the same answer.
    Fail(String),
}

/// What an action does after an *uncertain* attempt: one whose request was written (or partly
/// written) and whose answer was never read, so the receiver may have acted on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUncertain {
    /// Never send again: a group robot does not deduplicate, so a resend is a second message.
    Stop,
    /// Send again: the receiver deduplicates by `Idempotency-Key` (`http`, media uploads).
    Resend,
}

/// How one attempt ended, before the action's reading of an answer.
#[derive(Debug)]
enum Attempt<T> {
    /// The receiver answered; the action's verdict on the answer.
    Answered(Verdict<T>),
    /// Nothing left this machine: connect, DNS, TLS or proxy failure. Local to this replica as
    /// far as it can tell, so another replica may well get through (the handoff).
    NotSent(String),
    /// The request was written and no (whole) answer was read: reset, closed, read timeout,
    /// truncated answer. The receiver may have acted on it.
    Uncertain(String),
}

/// Sends until `classify` says success or fail, or the deadline or attempt cap is reached.
/// Each attempt first takes a place in `budget` (the robot's rate limit), when there is one.
pub async fn deliver(
    ctx: &SendContext<'_>,
    budget: Option<&Budget>,
    on_uncertain: OnUncertain,
    request: impl Fn() -> RequestBuilder,
    classify: impl Fn(&Answer) -> Verdict,
) -> Result<Delivery, ActionError> {
    deliver_for(ctx, budget, on_uncertain, request, classify)
        .await
        .map(|((), delivery)| delivery)
}

/// [`deliver`], returning what the successful answer yielded.
///
/// The first attempt that cannot leave this machine ends the delivery at once with
/// [`ActionError::NotSent`] when no earlier attempt reached the receiver: retrying from a replica
/// whose egress is broken only spends the deadline that the handoff gives to another replica.
pub async fn deliver_for<T>(
    ctx: &SendContext<'_>,
    budget: Option<&Budget>,
    on_uncertain: OnUncertain,
    request: impl Fn() -> RequestBuilder,
    classify: impl Fn(&Answer) -> Verdict<T>,
) -> Result<(T, Delivery), ActionError> {
    let mut last = String::from("no attempt made before the deadline");
    // Whether an attempt reached the receiver (an answer, or an uncertain attempt): from then
    // on a connect failure is transient, not this replica's broken egress.
    let mut seen = Seen::default();
    for attempt in 1..=MAX_ATTEMPTS {
        if let Some(budget) = budget {
            take_budget(ctx, budget, attempt, seen.reached).await?;
        }
        ctx.may_send(attempt, seen.reached, &last)
            .map_err(|e| e.with_uncertain(seen.uncertain))?;
        let remaining = ctx.deadline.saturating_duration_since(Instant::now());
        let outcome = attempt_once(ctx, request(), attempt, remaining, &classify).await;
        let retry = match seen.judge(outcome, attempt, on_uncertain) {
            Next::Done(result) => return result,
            Next::Retry(retry) => retry,
        };
        last = wait_to_retry(ctx, attempt, retry)
            .await
            .map_err(|e| e.with_uncertain(seen.uncertain))?;
    }
    Err(ActionError::GaveUp {
        attempts: MAX_ATTEMPTS,
        reason: last,
        uncertain: seen.uncertain,
    })
}

/// What the attempts so far have shown.
#[derive(Debug, Default)]
struct Seen {
    /// An attempt reached the receiver: an answer, or an uncertain attempt.
    reached: bool,
    /// An attempt may have been acted on.
    uncertain: bool,
}

/// After one attempt: the delivery's end, or a retry.
enum Next<T> {
    Done(Result<(T, Delivery), ActionError>),
    Retry(RetryAfter),
}

impl Seen {
    /// What attempt number `attempt`'s outcome means for the delivery.
    fn judge<T>(
        &mut self,
        outcome: Attempt<T>,
        attempt: u32,
        on_uncertain: OnUncertain,
    ) -> Next<T> {
        match outcome {
            Attempt::Answered(Verdict::Success(value)) => {
                Next::Done(Ok((value, Delivery { attempts: attempt })))
            }
            Attempt::Answered(Verdict::Fail(reason)) => Next::Done(Err(ActionError::Rejected {
                attempts: attempt,
                reason,
            })),
            Attempt::NotSent(reason) if !self.reached => Next::Done(Err(ActionError::NotSent {
                attempts: attempt,
                reason,
            })),
            Attempt::Uncertain(reason) if on_uncertain == OnUncertain::Stop => {
                Next::Done(Err(ActionError::Uncertain {
                    attempts: attempt,
                    reason,
                }))
            }
            Attempt::Answered(Verdict::Retry { reason, after }) => {
                self.reached = true;
                Next::Retry(RetryAfter { reason, after })
            }
            Attempt::Uncertain(reason) => {
                self.reached = true;
                self.uncertain = true;
                Next::Retry(RetryAfter::backoff(reason))
            }
            Attempt::NotSent(reason) => Next::Retry(RetryAfter::backoff(reason)),
        }
    }
}

/// A retryable attempt's reason, and the receiver's `Retry-After` if it sent one.
struct RetryAfter {
    reason: String,
    after: Option<Duration>,
}

impl RetryAfter {
    fn backoff(reason: String) -> Self {
        RetryAfter {
            reason,
            after: None,
        }
    }
}

/// Sleeps before the next attempt, or gives up when the cap or the deadline comes first.
/// Returns the reason to report if the next attempt never happens.
async fn wait_to_retry(
    ctx: &SendContext<'_>,
    attempt: u32,
    retry: RetryAfter,
) -> Result<String, ActionError> {
    let delay = retry.after.unwrap_or_else(|| backoff(attempt));
    if attempt == MAX_ATTEMPTS || Instant::now() + delay >= ctx.deadline {
        return Err(ActionError::GaveUp {
            attempts: attempt,
            reason: retry.reason,
            uncertain: false,
        });
    }
    // Only the kind of failure ("HTTP 502 Bad Gateway", "errcode 45009"): the rest may echo what
    // the receiver was sent, and this line is not scrubbed. The final error (scrubbed) carries
    // the whole reason.
    let kind = retry.reason.split(": ").next().unwrap_or_default();
    tracing::debug!(job = %ctx.job, slot = %ctx.slot, attempt, reason = %kind, "retrying");
    tokio::time::sleep(delay).await;
    Ok(retry.reason)
}

/// Waits for a place in the webhook's rate budget, or fails the slot when none frees in time.
async fn take_budget(
    ctx: &SendContext<'_>,
    budget: &Budget,
    attempt: u32,
    reached: bool,
) -> Result<(), ActionError> {
    match ctx.budgets.take(budget, ctx.deadline).await {
        Ok(waited) => {
            if !waited.is_zero() {
                ctx.metrics.budget_wait(ctx.job, waited);
                tracing::info!(job = %ctx.job, slot = %ctx.slot, replica = %ctx.replica, waited_ms = waited.as_millis() as u64,
                    "waited for the webhook's rate budget");
            }
            Ok(())
        }
        Err(spent) => {
            // A replica paused in the wait wakes past both its validity and the deadline: the
            // slot is then another replica's to run, not one skipped for the budget.
            ctx.check_validity(attempt, reached)?;
            tracing::warn!(job = %ctx.job, slot = %ctx.slot, replica = %ctx.replica, rate = %spent.rate,
                "skipped for the rate budget: {spent}");
            Err(ActionError::BudgetSpent {
                attempts: attempt - 1,
                reason: spent.to_string(),
            })
        }
    }
}

async fn attempt_once<T>(
    ctx: &SendContext<'_>,
    request: RequestBuilder,
    attempt: u32,
    remaining: Duration,
    classify: &impl Fn(&Answer) -> Verdict<T>,
) -> Attempt<T> {
    // Ended when the attempt is (dropped on return).
    let span = crate::trace::attempt_span(attempt);
    let request = request
        .headers(slotcron_headers(ctx))
        .headers(span.traceparent())
        .timeout(remaining);
    match ctx.client.send(request).await {
        Sent::Answered(answer) => Attempt::Answered(classify(&answer)),
        Sent::NotSent(reason) => Attempt::NotSent(reason),
        Sent::Invalid(reason) => Attempt::Answered(Verdict::Fail(reason)),
        Sent::Uncertain(reason) => Attempt::Uncertain(reason),
    }
}

/// The headers every request carries, so receivers can see who sent what and deduplicate.
fn slotcron_headers(ctx: &SendContext<'_>) -> HeaderMap {
    let slot = ctx.slot.rfc3339_utc();
    let pairs = [
        ("x-slotcron-job", ctx.job.to_owned()),
        ("x-slotcron-slot", slot.clone()),
        ("x-slotcron-replica", ctx.replica.to_owned()),
        ("idempotency-key", format!("{}/{}", ctx.job, slot)),
        ("x-slotcron-fence", ctx.fence.to_string()),
    ];
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        if let Ok(value) = value.parse() {
            headers.insert(name, value);
        }
    }
    headers
}

/// The verdict on the status for robots that answer JSON: a 2xx goes on to the body.
pub fn status_failure<T>(answer: &Answer) -> Option<Verdict<T>> {
    match status_verdict(answer) {
        Verdict::Success(()) => None,
        Verdict::Retry { reason, after } => Some(Verdict::Retry { reason, after }),
        Verdict::Fail(reason) => Some(Verdict::Fail(reason)),
    }
}

/// The verdict on the HTTP status alone: 2xx success, 429 and 5xx retried, other codes final.
pub fn status_verdict(answer: &Answer) -> Verdict {
    let status = answer.status;
    if status.is_success() {
        Verdict::Success(())
    } else if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        Verdict::Retry {
            reason: format!("HTTP {status}: {}", snippet(&answer.body)),
            after: answer.retry_after,
        }
    } else {
        Verdict::Fail(format!("HTTP {status}: {}", snippet(&answer.body)))
    }
}

/// The start of a body, for an error message.
pub fn snippet(body: &str) -> String {
    const MAX: usize = 200;
    let body = body.trim();
    match body.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &body[..i]),
        None => body.to_owned(),
    }
}

/// Exponential backoff with jitter: attempt 1 waits 125–250 ms, attempt 2 250–500 ms, …
fn backoff(attempt: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1 << attempt.saturating_sub(1).min(10));
    let cap = exp.min(BACKOFF_MAX);
    crate::seed::rng().random_range(cap / 2..=cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            retry_after: None,
            body: body.into(),
        }
    }

    #[test]
    fn statuses() {
        assert_eq!(status_verdict(&answer(204, "")), Verdict::Success(()));
        assert!(matches!(
            status_verdict(&answer(503, "")),
            Verdict::Retry { .. }
        ));
        assert!(matches!(
            status_verdict(&answer(429, "")),
            Verdict::Retry { .. }
        ));
        assert!(matches!(status_verdict(&answer(404, "")), Verdict::Fail(_)));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1) <= BACKOFF_BASE);
        assert!(backoff(3) >= BACKOFF_BASE * 2);
        assert!(backoff(30) <= BACKOFF_MAX);
    }

    #[test]
    fn snippet_is_bounded() {
        assert_eq!(snippet(&"é".repeat(500)).chars().count(), 201);
    }
}
