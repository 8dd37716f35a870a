//! The winner's run of a slot: its running-lease watchdog, the action's delivery within the
//! lock's validity, the run record (at the start of a slow run, and at its end), and the
//! slot's result from how the delivery ended.

// A part of `RaceContext` split out by step: it shares the race module's names and imports.
use super::*;

/// A run still going after this long has its start recorded (it shows as running); a shorter
/// run is recorded once, when it ends. Jobs with `catch_up` record the start at once.
pub const START_RECORD_DELAY: Duration = Duration::from_secs(1);
/// History entries a winner looks through beside its own record (on the node, which returns
/// only those under its fence), for another run of its slot: a late run of a slot is within
/// its start window of the first, a few entries back even for a job every second.
const DUPLICATE_LOOK: usize = 64;

impl RaceContext {
    /// Runs a won slot (the winner's part): the run; then the running lease is released (so
    /// the next slot, or the replica taking a handoff, is not held up); then the ending is
    /// logged and counted (handing the slot off if nothing left this replica) and recorded.
    pub async fn run(&self, won: Won) -> SlotResult {
        let won = &won;
        let mut record = self.start_record(won);
        self.confirm_replicated(won).await;
        let ran = self.execute(won, &record).await;
        self.release_running(won).await;
        let result = self.conclude(won, ran).await;
        finish_record(&mut record, &result);
        self.record_end(won, &record).await;
        if let SlotResult::Failed { error, .. } = &result {
            // The winner alone sees its failure: one alert per failed slot across the fleet.
            self.alert(&won.job, won.slot, won.fence, Outcome::Failed, error)
                .await;
        }
        result
    }

    /// Waits for the lock's replicas (`WAIT`, sentinel and cluster modes). Too few in time:
    /// the slot still runs (a new primary has no replica yet, and a slot not run is a loss
    /// too), logged and counted, since a failover now could run it twice.
    async fn confirm_replicated(&self, won: &Won) {
        let Some(replication) = self.lock.replicated(&won.lease).await else {
            return;
        };
        if replication.is_short() {
            self.metrics.unreplicated_run(&won.job.name);
            tracing::warn!(job = %won.job.name, slot = %won.slot, replica = %self.replica,
                acked = replication.acked, wanted = replication.wanted,
                "the slot's lock reached fewer replicas than wait_replicas: running it anyway \
                (a failover now could run it twice)");
        }
    }

    /// Records the run's end. A win some node refused (it held another replica's token) may be
    /// a second run of the slot: then the record's write also reads back the records under its
    /// fence, and another run found there is reported. An uncontested win costs one write.
    pub(super) async fn record_end(&self, won: &Won, record: &RunRecord) {
        if !won.lease.contested {
            return self.history.record(record).await;
        }
        let recent = self.history.record_and_read(record, DUPLICATE_LOOK).await;
        if let Some(other) = other_run(record, &recent) {
            self.report_duplicate(&won.job, record, other).await;
        }
    }

    /// Releases the job's running lease, warning when a majority did not confirm it.
    pub(super) async fn release_running(&self, won: &Won) {
        let Some(running) = &won.running else { return };
        let released = self.lock.release(running).await;
        if released < self.lock.quorum() {
            tracing::warn!(job = %won.job.name, slot = %won.slot, replica = %self.replica, nodes = released,
                "the running lease was released on {released} node(s), fewer than a majority: \
                the job's slots are skipped as overlapping until it expires (at most {} s)",
                RUNNING_LEASE_TTL.as_secs());
        }
    }

    /// The run's record as it starts: `running`, with its trigger and fence.
    pub(super) fn start_record(&self, won: &Won) -> RunRecord {
        RunRecord {
            job: won.job.name.clone(),
            slot: won.slot,
            replica: self.replica.clone(),
            started: Utc::now(),
            finished: None,
            outcome: RunState::Running,
            error: None,
            attempts: 0,
            trigger: won.kind.as_str().to_owned(),
            fence: won.fence,
            delivery: None,
            previous_winner: won.previous_winner.clone(),
        }
    }

    /// Runs the action inside the lease, keeping the running lease alive, while the start of
    /// the run is recorded (at once for `catch_up` jobs, else only once the run is slow; a
    /// history write never delays a send).
    pub(super) async fn execute(&self, won: &Won, record: &RunRecord) -> Ran {
        let started = Instant::now();
        let run = async {
            let lateness = (self.clock.now() - won.slot.instant())
                .to_std()
                .unwrap_or_default();
            self.metrics.lateness(&won.job.name, lateness);
            let action = self.send(won);
            let sent = match &won.running {
                Some(running) => self.with_watchdog(action, running).await,
                None => action.await,
            };
            let duration = started.elapsed();
            self.metrics.action_duration(&won.job.name, duration);
            Ran {
                sent,
                duration,
                lateness,
            }
        };
        if won.job.catch_up.is_some() {
            // Recorded at once: a slot whose winner dies mid-run must not look missed to the
            // catch-up of a replica starting later.
            tokio::join!(self.history.record(record), run).1
        } else {
            self.record_start_if_slow(record, run).await
        }
    }

    /// Logs how the run ended and counts it; a failure where nothing left this replica is
    /// offered to the fleet instead (once per slot, while its deadline allows).
    pub(super) async fn conclude(&self, won: &Won, ran: Ran) -> SlotResult {
        let failure = match ran.sent {
            Ok(delivery) => {
                self.report(SlotLine {
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
        let failure = match self.offerable(won, failure) {
            Ok(reason) => match self.hand_off(won, reason, ran.duration).await {
                Ok(handed_off) => return handed_off,
                Err(failure) => failure,
            },
            Err(failure) => failure,
        };
        self.report(SlotLine {
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

    /// Drives `run`; if it is still going after [`START_RECORD_DELAY`], records its start
    /// meanwhile, so the history shows it running. A shorter run is recorded once, at its end:
    /// half the history writes for the usual run of a few milliseconds.
    pub(super) async fn record_start_if_slow<T>(
        &self,
        record: &RunRecord,
        run: impl std::future::Future<Output = T>,
    ) -> T {
        tokio::pin!(run);
        tokio::select! {
            biased;
            outcome = &mut run => return outcome,
            () = tokio::time::sleep(START_RECORD_DELAY) => {}
        }
        tokio::join!(self.history.record(record), run).1
    }

    /// Runs the job's action for `won`: the deadline is the job's timeout, cut short by the
    /// lock's validity and, on a handoff, by the slot's deadline.
    pub(super) async fn send(&self, won: &Won) -> Result<Delivery, SendFailure> {
        let job = &won.job;
        let mut deadline = (Instant::now() + job.timeout).min(won.lease.valid_until);
        if won.kind == RaceKind::Handoff {
            let left = (self.handoff_deadline(job, won.slot) - self.clock.now()).to_std();
            deadline = deadline.min(Instant::now() + left.unwrap_or_default());
        }
        let ctx = SendContext {
            job: &job.name,
            slot: won.slot,
            zone: job.zone(),
            replica: &self.replica,
            fence: won.fence,
            deadline,
            valid_until: won.lease.valid_until,
            about: None,
            client: &self.client,
            templates: &self.templates,
            budgets: &self.budgets,
            metrics: &self.metrics,
        };
        let sent = match ctx.check_validity(1, false) {
            Ok(()) => job.action.execute(&ctx).await,
            Err(expired) => Err(expired),
        };
        sent.map_err(|e: ActionError| SendFailure {
            error: self.scrubber.scrub(&e.to_string()),
            attempts: e.attempts(),
            delivery: e.delivery(),
            local: e.is_local(),
        })
    }

    /// Drives `action` while extending the running lease every third of its TTL.
    pub(super) async fn with_watchdog<T>(
        &self,
        action: impl std::future::Future<Output = T>,
        running: &Lease,
    ) -> T {
        tokio::pin!(action);
        loop {
            tokio::select! {
                result = &mut action => return result,
                _ = tokio::time::sleep(RUNNING_LEASE_TTL / 3) => {
                    if !self.lock.extend(running, RUNNING_LEASE_TTL).await {
                        tracing::warn!(key = %running.key, replica = %self.replica,
                            "could not extend the running lease on a majority; another slot may start");
                    }
                }
            }
        }
    }
}

/// The run's final record: its ending, attempts, error and delivery.
pub(super) fn finish_record(record: &mut RunRecord, result: &SlotResult) {
    record.finished = Some(Utc::now());
    match result {
        SlotResult::Done { delivery, .. } => {
            record.outcome = RunState::Done;
            record.attempts = delivery.attempts;
        }
        SlotResult::Failed {
            error,
            attempts,
            delivery,
            ..
        } => {
            record.outcome = RunState::Failed;
            record.error = Some(error.clone());
            record.attempts = *attempts;
            record.delivery = Some(*delivery);
        }
        SlotResult::HandedOff {
            reason, attempts, ..
        } => {
            record.outcome = RunState::HandedOff;
            record.error = Some(reason.clone());
            record.attempts = *attempts;
            record.delivery = Some(DeliveryState::NotDelivered);
        }
        SlotResult::Overlapping { holder } => {
            record.outcome = RunState::Skipped;
            record.error = Some(match holder {
                Some(holder) => format!(
                    "overlap: the previous run is still going on {}",
                    holder.replica()
                ),
                None => "overlap: cannot tell whether the previous run is still going".to_owned(),
            });
        }
        SlotResult::Late { .. }
        | SlotResult::Early { .. }
        | SlotResult::Unmeasured
        | SlotResult::Lost { .. }
        | SlotResult::Unavailable(_) => {}
    }
}
