//! How a run ended: delivered, or failed; a failure where nothing left this replica is offered
//! to the fleet (once per slot, while its deadline allows), and the offerer waits to learn who
//! claimed it.

use std::time::Duration;

use super::report::SlotLine;
use super::run::{Ran, SendFailure};
use super::{Books, Race, SlotEnv, SlotResult, Won};
use crate::fleet::handoff::HandoffRequest;
use crate::lock::{Acquire, SlotKey, Unavailable};
use crate::outcome::Outcome;
use crate::time::schedule::Fence;

/// How long an offerer waits for a taker to claim its handoff offer before claiming the
/// offer's key itself: a taker claims within milliseconds of the offer; the wait covers a
/// loaded replica. Past it the slot is `failed` and alerted, and no taker can take it later.
pub const HANDOFF_CLAIM_WAIT: Duration = Duration::from_secs(2);

/// Why an offer found no taker: said in the slot's error, after the delivery's own.
#[derive(Debug, thiserror::Error)]
enum Unclaimed {
    /// Nobody subscribed that has not had the slot.
    #[error("no replica that has not had the slot heard the handoff offer")]
    NobodyHeard,
    /// The offerer won the offer's key itself after the wait: nobody took it.
    #[error("no replica took the handoff offer within {} ms", .0.as_millis())]
    NotTaken(Duration),
    /// The lock could not tell.
    #[error("whether a replica took the handoff offer is unknown: {0}")]
    Unknown(Unavailable),
}

/// Logs how the run ended and counts it; a failure where nothing left this replica is offered
/// to the fleet instead (once per slot, while its deadline allows). The one step that takes
/// the whole env: an offer is judged on the race's clock, sent through the outbox's handoffs,
/// told whether this replica still listens (shutdown), and logged in the books.
pub(super) async fn conclude(env: &SlotEnv, won: &Won, ran: Ran) -> SlotResult {
    let books = &env.books;
    let failure = match ran.sent {
        Ok(delivery) => {
            books.report(SlotLine {
                attempts: Some(delivery.attempts),
                lateness_ms: Some(ran.lateness.as_millis() as u64),
                ..won.line(Outcome::Done, "ran the slot", ran.duration)
            });
            return SlotResult::Done {
                delivery,
                duration: ran.duration,
            };
        }
        Err(failure) => failure,
    };
    let failure = match offerable(&env.race, won, failure) {
        Ok(reason) => match hand_off(env, won, reason, ran.duration).await {
            Ok(handed_off) => return handed_off,
            Err(failure) => failure,
        },
        Err(failure) => failure,
    };
    books.report(SlotLine {
        delivery: Some(failure.delivery.as_str()),
        attempts: Some(failure.attempts),
        error: Some(&failure.error),
        ..won.line(Outcome::Failed, "the slot's action failed", ran.duration)
    });
    SlotResult::Failed {
        error: failure.error,
        attempts: failure.attempts,
        duration: ran.duration,
        delivery: failure.delivery,
    }
}

/// The failure as a handoff offer's reason when it may be handed off: nothing left this
/// replica, the slot has not been handed off already, and its deadline is not past.
fn offerable(race: &Race, won: &Won, failure: SendFailure) -> Result<SendFailure, SendFailure> {
    let open = won.now(race) < race.handoff_deadline(&won.job, won.slot);
    if failure.local && won.fence.handoff() < Fence::MAX_HANDOFF && open {
        Ok(failure)
    } else {
        Err(failure)
    }
}

/// Offers the slot to the fleet. `HandedOff` once a taker has claimed the offer (holds its
/// handoff key); the failure back, its error saying so, when no replica subscribed or none
/// claimed it in time ([`HANDOFF_CLAIM_WAIT`]).
async fn hand_off(
    env: &SlotEnv,
    won: &Won,
    failure: SendFailure,
    duration: Duration,
) -> Result<SlotResult, SendFailure> {
    let offer = offer_of(&env.books, won, &failure);
    let listening = !env.shutdown.is_cancelled();
    let heard = env.outbox.handoffs.offer(&offer, listening).await;
    let unclaimed = |why: Unclaimed| SendFailure {
        error: format!("{}; {why}", failure.error),
        ..failure.clone()
    };
    if heard == 0 {
        return Err(unclaimed(Unclaimed::NobodyHeard));
    }
    let taker = claimed_by(&env.race, won, &offer)
        .await
        .map_err(unclaimed)?;
    env.books.report(SlotLine {
        attempts: Some(failure.attempts),
        reason: Some(&failure.error),
        winner: Some(&taker),
        ..won.line(
            Outcome::HandedOff,
            "nothing left this replica: the slot is handed off to the fleet",
            duration,
        )
    });
    Ok(SlotResult::HandedOff {
        reason: failure.error,
        attempts: failure.attempts,
        duration,
    })
}

/// The offer of `won`'s slot to every replica that has not had it.
fn offer_of(books: &Books, won: &Won, failure: &SendFailure) -> HandoffRequest {
    let mut excluded = won
        .trigger
        .offer()
        .map(|o| o.excluded.clone())
        .unwrap_or_default();
    excluded.push(books.replica.clone());
    HandoffRequest {
        job: won.job.name.clone(),
        slot_ms: won.slot.epoch_ms(),
        handoff: won.fence.handoff() + 1,
        previous_winner: books.replica.clone(),
        excluded,
        reason: failure.error.clone(),
    }
}

/// Who claimed `offer`: after [`HANDOFF_CLAIM_WAIT`] (cut to the slot's deadline) the offerer
/// races for the offer's key itself. Losing names the taker; winning means no replica took the
/// offer, and none can any more (the error says which).
async fn claimed_by(race: &Race, won: &Won, offer: &HandoffRequest) -> Result<String, Unclaimed> {
    let left = (race.handoff_deadline(&won.job, won.slot) - won.now(race))
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(HANDOFF_CLAIM_WAIT.min(left)).await;
    let key = SlotKey::handoff(&race.key_prefix, &won.job.name, won.slot, offer.handoff);
    match race
        .lock
        .acquire(&key, race.handoff_key_ttl(&won.job))
        .await
    {
        Acquire::Lost { holder } => Ok(holder.replica().to_owned()),
        Acquire::Won(_) => Err(Unclaimed::NotTaken(HANDOFF_CLAIM_WAIT.min(left))),
        Acquire::Unavailable(why) => Err(Unclaimed::Unknown(why)),
    }
}
