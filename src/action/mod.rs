//! What the winner of a slot does: push to a WeCom robot, call a URL, or write a log line.
//!
//! Every action runs against a deadline (the job's timeout, cut short by the lock's validity)
//! and reports a `Delivery` or an `ActionError` that says why, with secrets scrubbed.

pub mod command;
pub mod deliver;
pub mod dingtalk;
pub mod feishu;
pub mod http;
pub mod log;
pub mod rate;
pub mod slack;
pub mod template;
pub mod wecom;

use chrono_tz::Tz;
use tokio::time::Instant;

use crate::schedule::Slot;
use template::Templates;

/// A checked action of a job.
#[derive(Debug)]
pub enum Action {
    Wecom(wecom::WecomAction),
    DingTalk(dingtalk::DingTalkAction),
    Feishu(feishu::FeishuAction),
    Slack(slack::SlackAction),
    Http(http::HttpAction),
    Command(command::CommandAction),
    Log(log::LogAction),
}

impl Action {
    /// The action's `type` in jobs.toml.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Wecom(_) => "wecom",
            Action::DingTalk(_) => "dingtalk",
            Action::Feishu(_) => "feishu",
            Action::Slack(_) => "slack",
            Action::Http(_) => "http",
            Action::Command(_) => "command",
            Action::Log(_) => "log",
        }
    }

    /// Where the action sends, redacted; `None` for actions that send nowhere.
    pub fn target(&self) -> Option<String> {
        match self {
            Action::Wecom(a) => Some(format!("{} {}", a.message.msgtype(), a.webhook)),
            Action::DingTalk(a) => Some(a.webhook.to_string()),
            Action::Feishu(a) => Some(a.webhook.to_string()),
            Action::Slack(a) => Some(a.webhook.to_string()),
            Action::Http(a) => Some(format!("{} {}", a.method, a.url)),
            Action::Command(a) => Some(a.argv.to_string()),
            Action::Log(_) => None,
        }
    }

    /// Each action's future is boxed: inline, every run's task would carry the largest of them
    /// (over 128 KiB, from the command's pipe buffers and the robots' retries), allocated, page
    /// faulted and copied on each spawn. Boxed, a run allocates what its own action needs.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        match self {
            Action::Wecom(a) => Box::pin(a.execute(ctx)).await,
            Action::DingTalk(a) => Box::pin(a.execute(ctx)).await,
            Action::Feishu(a) => Box::pin(a.execute(ctx)).await,
            Action::Slack(a) => Box::pin(a.execute(ctx)).await,
            Action::Http(a) => Box::pin(a.execute(ctx)).await,
            Action::Command(a) => Box::pin(a.execute(ctx)).await,
            Action::Log(a) => Box::pin(a.execute(ctx)).await,
        }
    }
}

/// Everything an action needs for one slot.
pub struct SendContext<'a> {
    pub job: &'a str,
    pub slot: Slot,
    pub zone: Tz,
    pub replica: &'a str,
    /// No attempt starts after this instant.
    pub deadline: Instant,
    pub client: &'a reqwest::Client,
    pub templates: &'a Templates,
    /// The fleet-wide rate budgets of the webhooks.
    pub budgets: &'a rate::Budgets,
    pub metrics: &'a crate::metrics::Metrics,
}

impl SendContext<'_> {
    /// The template context of this slot.
    pub fn template_context(&self) -> template::TemplateContext<'_> {
        template::TemplateContext::new(self.job, self.slot, self.zone, self.replica)
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
}

/// A successful delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub attempts: u32,
}

/// Why an action did not deliver.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("rejected after {attempts} attempt(s): {reason}")]
    Rejected { attempts: u32, reason: String },
    #[error("gave up after {attempts} attempt(s) within the job's timeout: {reason}")]
    GaveUp { attempts: u32, reason: String },
    #[error("field {field}: {reason}")]
    Render { field: &'static str, reason: String },
    #[error(
        "field {field}: {msgtype} content is {size} bytes, over the robot's limit of {limit} bytes"
    )]
    TooLarge {
        field: &'static str,
        limit: usize,
        size: usize,
        msgtype: &'static str,
    },
    #[error("field {field}: {reason}")]
    Input { field: &'static str, reason: String },
    #[error("not sent after {attempts} attempt(s): {reason}")]
    BudgetSpent { attempts: u32, reason: String },
}

impl ActionError {
    /// How many requests were sent.
    pub fn attempts(&self) -> u32 {
        match self {
            ActionError::Rejected { attempts, .. }
            | ActionError::GaveUp { attempts, .. }
            | ActionError::BudgetSpent { attempts, .. } => *attempts,
            ActionError::Render { .. }
            | ActionError::TooLarge { .. }
            | ActionError::Input { .. } => 0,
        }
    }
}

/// The HTTP client all actions share: one connection pool per replica.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    crate::tls::ensure_crypto_provider();
    reqwest::Client::builder()
        .user_agent(concat!("slotcron/", env!("CARGO_PKG_VERSION")))
        .tcp_nodelay(true)
        .build()
}

/// base64(HMAC-SHA256(key, message)): the robots' signing primitive.
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
