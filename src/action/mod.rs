//! What the winner of a slot does: push to a WeCom robot, call a URL, or write a log line.
//!
//! Every action runs against a deadline (the job's timeout, cut short by the lock's validity)
//! and reports a `Delivery` or an `ActionError` that says why, with secrets scrubbed.

pub mod check;
pub mod command;
pub mod deliver;
#[cfg(feature = "robots")]
pub mod dingtalk;
pub mod egress;
#[cfg(feature = "robots")]
pub mod feishu;
pub mod function;
pub mod http;
pub mod log;
pub mod rate;
pub mod slack;
pub mod template;
#[cfg(feature = "robots")]
pub mod wecom;

use chrono_tz::Tz;
use tokio::time::Instant;

pub use crate::record::history::DeliveryState;
use crate::time::schedule::{Fence, Slot};
use template::{Content, Templates};

/// A checked action of a job.
#[derive(Debug)]
pub enum Action {
    /// A WeCom group robot message.
    #[cfg(feature = "robots")]
    Wecom(wecom::WecomAction),
    /// A DingTalk custom robot message.
    #[cfg(feature = "robots")]
    DingTalk(dingtalk::DingTalkAction),
    /// A Feishu / Lark custom bot message.
    #[cfg(feature = "robots")]
    Feishu(feishu::FeishuAction),
    /// A Slack incoming-webhook message.
    Slack(slack::SlackAction),
    /// Any HTTP request.
    Http(http::HttpAction),
    /// A local command.
    Command(command::CommandAction),
    /// A line in the replica's log (trying slotcron out, dry runs).
    Log(log::LogAction),
    /// A library user's async function ([`crate::api`]).
    Fn(function::FnAction),
}

impl Action {
    /// The action's `type` in jobs.toml.
    pub fn kind(&self) -> &'static str {
        match self {
            #[cfg(feature = "robots")]
            Action::Wecom(_) => "wecom",
            #[cfg(feature = "robots")]
            Action::DingTalk(_) => "dingtalk",
            #[cfg(feature = "robots")]
            Action::Feishu(_) => "feishu",
            Action::Slack(_) => "slack",
            Action::Http(_) => "http",
            Action::Command(_) => "command",
            Action::Log(_) => "log",
            Action::Fn(_) => "fn",
        }
    }

    /// Where the action sends, redacted; `None` for actions that send nowhere.
    pub fn target(&self) -> Option<String> {
        match self {
            #[cfg(feature = "robots")]
            Action::Wecom(a) => Some(format!("{} {}", a.message.msgtype(), a.webhook)),
            #[cfg(feature = "robots")]
            Action::DingTalk(a) => Some(a.webhook.to_string()),
            #[cfg(feature = "robots")]
            Action::Feishu(a) => Some(a.webhook.to_string()),
            Action::Slack(a) => Some(a.webhook.to_string()),
            Action::Http(a) => Some(format!("{} {}", a.method, a.url)),
            Action::Command(a) => Some(a.argv.to_string()),
            Action::Log(_) | Action::Fn(_) => None,
        }
    }

    /// Where the action sends, unredacted, hashed: two replicas whose job of one name has
    /// different fingerprints send it to different places (see [`crate::fleet::destinations`]).
    /// `None` for `log`, which sends nowhere.
    pub fn destination_fingerprint(&self) -> Option<String> {
        let raw = match self {
            #[cfg(feature = "robots")]
            Action::Wecom(a) => a.webhook.expose().to_string(),
            #[cfg(feature = "robots")]
            Action::DingTalk(a) => a.webhook.expose().to_string(),
            #[cfg(feature = "robots")]
            Action::Feishu(a) => a.webhook.expose().to_string(),
            Action::Slack(a) => a.webhook.expose().to_string(),
            Action::Http(a) => format!("{} {}", a.method, a.url.expose()),
            Action::Command(a) => a.argv.to_string(),
            Action::Log(_) | Action::Fn(_) => return None,
        };
        Some(format!(
            "{:016x}",
            xxhash_rust::xxh3::xxh3_64(raw.as_bytes())
        ))
    }

    /// Each action's future is boxed: inline, every run's task would carry the largest of them
    /// (over 128 KiB, from the command's pipe buffers and the robots' retries), allocated, page
    /// faulted and copied on each spawn. Boxed, a run allocates what its own action needs.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        match self {
            #[cfg(feature = "robots")]
            Action::Wecom(a) => Box::pin(a.execute(ctx)).await,
            #[cfg(feature = "robots")]
            Action::DingTalk(a) => Box::pin(a.execute(ctx)).await,
            #[cfg(feature = "robots")]
            Action::Feishu(a) => Box::pin(a.execute(ctx)).await,
            Action::Slack(a) => Box::pin(a.execute(ctx)).await,
            Action::Http(a) => Box::pin(a.execute(ctx)).await,
            Action::Command(a) => Box::pin(a.execute(ctx)).await,
            Action::Log(a) => Box::pin(a.execute(ctx)).await,
            Action::Fn(a) => Box::pin(a.execute(ctx)).await,
        }
    }
}

/// Everything an action needs for one slot.
pub struct SendContext<'a> {
    /// The job, for templates, logs and the command's environment.
    pub job: &'a str,
    /// The slot being run.
    pub slot: Slot,
    /// The job's zone, for local times in templates.
    pub zone: Tz,
    /// This replica's name, for templates and logs.
    pub replica: &'a str,
    /// This run's fencing token: `X-Slotcron-Fence`, `SLOTCRON_FENCE`, `{{ fence }}`.
    pub fence: Fence,
    /// Why the slot runs (a job's function is told); `None` in an alert.
    pub trigger: Option<function::Trigger>,
    /// No attempt starts after this instant.
    pub deadline: Instant,
    /// The lock's validity: past it another replica may run the slot, so no first byte may
    /// leave after it (an attempt already under way is not cut).
    pub valid_until: Instant,
    /// In an alert: the slot's outcome and error, for the alert's templates.
    pub about: Option<(&'a str, &'a str)>,
    /// The job's schedule in words, for templates (`{{ schedule_words }}`).
    pub schedule_words: &'a str,
    /// The shared HTTP client (one connection pool per replica) and where it sends.
    pub client: &'a egress::Http,
    /// The compiled templates of the configuration.
    pub templates: &'a Templates,
    /// The fleet-wide rate budgets of the webhooks.
    pub budgets: &'a rate::Budgets,
    /// Where delivery counts are recorded.
    pub metrics: &'a crate::metrics::Metrics,
}

impl SendContext<'_> {
    /// The template context of this slot.
    pub fn template_context(&self) -> template::TemplateContext<'_> {
        let context = template::TemplateContext::new(
            self.job,
            self.slot,
            self.zone,
            self.replica,
            self.fence,
        )
        .in_words(self.schedule_words);
        match self.about {
            Some((outcome, error)) => context.about(outcome, error),
            None => context,
        }
    }

    /// `content` rendered for this slot; `field` names it in the error.
    pub fn render(&self, content: &Content, field: &'static str) -> Result<String, ActionError> {
        self.templates
            .render(content, &self.template_context())
            .map_err(|reason| ActionError::Render { field, reason })
    }

    /// `value` with its template strings rendered for this slot (cards, posts, blocks, argv).
    pub fn render_json(
        &self,
        value: &serde_json::Value,
        field: &'static str,
    ) -> Result<serde_json::Value, ActionError> {
        self.templates
            .render_json(value, &self.template_context())
            .map_err(|reason| ActionError::Render { field, reason })
    }

    /// Whether attempt `attempt` may still start: not past the lock's validity while nothing
    /// has reached the receiver (the slot is then handed off), and not past the deadline.
    /// `reached` says whether an earlier attempt reached the receiver; `last` is its reason.
    pub fn may_send(&self, attempt: u32, reached: bool, last: &str) -> Result<(), ActionError> {
        self.check_validity(attempt, reached)?;
        if Instant::now() >= self.deadline {
            return Err(ActionError::GaveUp {
                attempts: attempt - 1,
                reason: last.to_owned(),
                uncertain: false,
            });
        }
        Ok(())
    }

    /// `NotSent` once the lock's validity has run out while nothing reached the receiver: past
    /// it another replica may hold the slot, so this one must not send its first byte.
    pub fn check_validity(&self, attempt: u32, reached: bool) -> Result<(), ActionError> {
        if Instant::now() >= self.valid_until && !reached {
            return Err(ActionError::NotSent {
                attempts: attempt - 1,
                reason: "the lock's validity ran out before the first byte left \
                    (was the process paused?)"
                    .to_owned(),
            });
        }
        Ok(())
    }
}

fn uncertain_note(uncertain: bool) -> &'static str {
    if uncertain {
        "; an earlier attempt may have been delivered"
    } else {
        ""
    }
}

/// A successful delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// How many attempts it took (retries show in the run record).
    pub attempts: u32,
}

/// Why an action did not deliver.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The receiver refused it for good (a 4xx, a robot's error code, a non-zero exit).
    #[error("rejected after {attempts} attempt(s): {reason}")]
    Rejected {
        /// Attempts made.
        attempts: u32,
        /// The receiver's answer or the reason it is final.
        reason: String,
    },
    #[error(
        "gave up after {attempts} attempt(s) within the job's timeout: {reason}{}",
        uncertain_note(*.uncertain)
    )]
    /// The job's timeout came before a success.
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// Why the last attempt failed.
        reason: String,
        /// An attempt may have reached the receiver (an `http` resend after an uncertain one,
        /// a command killed at its timeout).
        uncertain: bool,
    },
    #[error("field {field}: {reason}")]
    /// A template failed to render for this slot.
    Render {
        /// The field whose template failed.
        field: &'static str,
        /// minijinja's reason, with the line.
        reason: template::TemplateError,
    },
    #[error(
        "field {field}: {msgtype} content is {size} bytes, over the robot's limit of {limit} bytes"
    )]
    /// Rendered content over the robot's size limit.
    TooLarge {
        /// The field that is too large.
        field: &'static str,
        /// The robot's limit, in bytes.
        limit: usize,
        /// The rendered size, in bytes.
        size: usize,
        /// The message type whose limit applies.
        msgtype: &'static str,
    },
    #[error("field {field}: {reason}")]
    /// An input of the action (a file, an image, the argv) is unusable at send time.
    Input {
        /// The field the input comes from.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    #[error("not sent after {attempts} attempt(s): {reason}")]
    /// The webhook's rate budget had no place before the deadline.
    BudgetSpent {
        /// Attempts made.
        attempts: u32,
        /// Why the budget could not be waited for.
        reason: String,
    },
    /// Nothing left this replica (connect, DNS, TLS, proxy; or its lock's validity ran out
    /// before the first byte): another replica may deliver it (the handoff).
    #[error("not delivered: nothing left this replica after {attempts} attempt(s): {reason}")]
    NotSent {
        /// Attempts made.
        attempts: u32,
        /// Why nothing left.
        reason: String,
    },
    /// A job's function returned an error (or panicked): its text, as the run's error.
    #[error("{reason}")]
    Returned {
        /// The error's text.
        reason: String,
    },
    /// A request was written and no answer read: the receiver may have acted on it, so it is
    /// not sent again.
    #[error(
        "may have been delivered: attempt {attempts} was sent and no answer came back ({reason}); \
         not sent again"
    )]
    Uncertain {
        /// The attempt whose answer was lost.
        attempts: u32,
        /// Why no answer came.
        reason: String,
    },
}

impl ActionError {
    /// How many requests were sent.
    pub fn attempts(&self) -> u32 {
        match self {
            ActionError::Rejected { attempts, .. }
            | ActionError::GaveUp { attempts, .. }
            | ActionError::BudgetSpent { attempts, .. }
            | ActionError::NotSent { attempts, .. }
            | ActionError::Uncertain { attempts, .. } => *attempts,
            ActionError::Returned { .. } => 1,
            ActionError::Render { .. }
            | ActionError::TooLarge { .. }
            | ActionError::Input { .. } => 0,
        }
    }

    /// What the receiver may have seen: every ending other than `Uncertain` and an uncertain
    /// `GaveUp` either sent nothing or read the receiver's refusal.
    pub fn delivery(&self) -> DeliveryState {
        match self {
            ActionError::Uncertain { .. } => DeliveryState::Uncertain,
            ActionError::GaveUp {
                uncertain: true, ..
            } => DeliveryState::Uncertain,
            ActionError::Rejected { .. }
            | ActionError::GaveUp { .. }
            | ActionError::BudgetSpent { .. }
            | ActionError::NotSent { .. }
            | ActionError::Render { .. }
            | ActionError::TooLarge { .. }
            | ActionError::Input { .. } => DeliveryState::NotDelivered,
            // The function ran and said it failed: not delivered, by its own account.
            ActionError::Returned { .. } => DeliveryState::NotDelivered,
        }
    }

    /// `self`, marked uncertain when an earlier attempt was (a `GaveUp` only: every other
    /// ending already says what the receiver saw).
    pub fn with_uncertain(self, uncertain: bool) -> Self {
        match self {
            ActionError::GaveUp {
                attempts, reason, ..
            } if uncertain => ActionError::GaveUp {
                attempts,
                reason,
                uncertain,
            },
            other => other,
        }
    }

    /// Whether another replica may deliver what this one could not: nothing left this replica
    /// for a reason local to it. A receiver's explicit refusal is not handed off (another
    /// replica would get the same answer), nor is an uncertain attempt (it may have arrived).
    pub fn is_local(&self) -> bool {
        matches!(self, ActionError::NotSent { .. })
    }
}

/// Longest TCP, TLS and proxy set-up of one attempt.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The HTTP client all actions share: one connection pool per replica, sending to the network.
pub fn http_client() -> reqwest::Result<egress::Http> {
    crate::tls::ensure_crypto_provider();
    reqwest::Client::builder()
        .user_agent(concat!("slotcron/", env!("CARGO_PKG_VERSION")))
        .tcp_nodelay(true)
        // Bounds the connect phase on its own, so a black-holed address fails as a connect
        // error (nothing sent: handed off) rather than as the request's timeout (uncertain).
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map(egress::Http::new)
}

/// base64(HMAC-SHA256(key, message)): the robots' signing primitive.
#[cfg(feature = "robots")]
pub fn hmac_sha256_base64(key: &[u8], message: &[u8]) -> String {
    use base64::Engine as _;
    use hmac::Mac as _;
    // HMAC accepts a key of any length, so this never fails; were it to, the empty signature
    // would be refused by the robot and logged, rather than crash the replica.
    hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
        .map(|mut mac| {
            mac.update(message);
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        })
        .unwrap_or_default()
}
