//! A winner's handoff: a delivery that failed for a reason local to this replica is offered
//! to the fleet, and the offerer waits to learn who claimed it.

// A part of `RaceContext` split out by step: it shares the race module's names and imports.
use super::*;

/// How long an offerer waits for a taker to claim its handoff offer before claiming the
/// offer's key itself: a taker claims within milliseconds of the offer; the wait covers a
/// loaded replica. Past it the slot is `failed` and alerted, and no taker can take it later.
pub const HANDOFF_CLAIM_WAIT: Duration = Duration::from_secs(2);

/// Why an offer found no taker: said in the slot's error, after the delivery's own.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unclaimed {
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

impl RaceContext {
    /// The failure as a handoff offer's reason when it may be handed off: nothing left this
    /// replica, the slot has not been handed off already, and its deadline is not past.
    pub(super) fn offerable(
        &self,
        won: &Won,
        failure: SendFailure,
    ) -> Result<SendFailure, SendFailure> {
        let open = self.clock.now() < self.handoff_deadline(&won.job, won.slot);
        if failure.local && won.fence.handoff() < Fence::MAX_HANDOFF && open {
            Ok(failure)
        } else {
            Err(failure)
        }
    }

    /// Offers the slot to the fleet. `HandedOff` once a taker has claimed the offer (holds its
    /// handoff key); the failure back, its error saying so, when no replica subscribed or none
    /// claimed it in time ([`HANDOFF_CLAIM_WAIT`]).
    pub(super) async fn hand_off(
        &self,
        won: &Won,
        failure: SendFailure,
        duration: Duration,
    ) -> Result<SlotResult, SendFailure> {
        let offer = self.offer_of(won, &failure);
        let heard = self
            .handoffs
            .offer(&offer, !self.shutdown.is_cancelled())
            .await;
        let unclaimed = |why: Unclaimed| SendFailure {
            error: format!("{}; {why}", failure.error),
            ..failure.clone()
        };
        if heard == 0 {
            return Err(unclaimed(Unclaimed::NobodyHeard));
        }
        let taker = self.claimed_by(won, &offer).await.map_err(unclaimed)?;
        self.report(SlotLine {
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
    pub(super) fn offer_of(&self, won: &Won, failure: &SendFailure) -> HandoffRequest {
        let mut excluded = won.excluded.clone();
        excluded.push(self.replica.clone());
        HandoffRequest {
            job: won.job.name.clone(),
            slot_ms: won.slot.epoch_ms(),
            handoff: won.fence.handoff() + 1,
            previous_winner: self.replica.clone(),
            excluded,
            reason: failure.error.clone(),
        }
    }

    /// Who claimed `offer`: after [`HANDOFF_CLAIM_WAIT`] (cut to the slot's deadline) the
    /// offerer races for the offer's key itself. Losing names the taker; winning means no
    /// replica took the offer, and none can any more (the error says which).
    pub(super) async fn claimed_by(
        &self,
        won: &Won,
        offer: &HandoffRequest,
    ) -> Result<String, Unclaimed> {
        let left = (self.handoff_deadline(&won.job, won.slot) - self.clock.now())
            .to_std()
            .unwrap_or_default();
        tokio::time::sleep(HANDOFF_CLAIM_WAIT.min(left)).await;
        let key = SlotKey::handoff(&self.key_prefix, &won.job.name, won.slot, offer.handoff);
        match self.lock.acquire(&key, self.key_ttl(&won.job)).await {
            Acquire::Lost { holder } => Ok(holder.replica().to_owned()),
            Acquire::Won(_) => Err(Unclaimed::NotTaken(HANDOFF_CLAIM_WAIT.min(left))),
            Acquire::Unavailable(why) => Err(Unclaimed::Unknown(why)),
        }
    }
}
