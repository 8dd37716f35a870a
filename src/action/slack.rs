//! Slack incoming webhook: `text` and `blocks`. Success is HTTP 200 with the body `ok`; 429 is
//! retried after its `Retry-After`.

use serde_json::Value;

use super::deliver::{self, Answer, OnUncertain, Verdict, snippet};
use super::rate::Budget;
use super::{ActionError, Delivery, SendContext};
use crate::action::check::Check;
use crate::secret::SecretUrl;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug)]
/// A checked Slack action.
pub struct SlackAction {
    /// The incoming webhook URL; its path is a secret.
    pub webhook: SecretUrl,
    /// `{"text": …, "blocks": […]}`; strings with template syntax are rendered per slot.
    pub message: Value,
    /// Slack's rate limit for webhooks, shared by the fleet (1 a second unless `rate` says otherwise).
    pub budget: Budget,
}

impl SlackAction {
    /// Sends this action for the slot in `ctx`; the delivery or why it failed.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let body = ctx.render_json(&self.message, "message")?;
        deliver::deliver(
            ctx,
            Some(&self.budget),
            OnUncertain::Stop,
            || ctx.client.post(self.webhook.expose().clone()).json(&body),
            classify,
        )
        .await
    }
}

/// Reads Slack's answer: 200 with `ok` is success; 429 is retried after `Retry-After`.
pub fn classify(answer: &Answer) -> Verdict {
    if let Some(failure) = deliver::status_failure(answer) {
        return failure;
    }
    if answer.body.trim() == "ok" {
        Verdict::Success(())
    } else {
        Verdict::Fail(format!(
            "Slack answered {:?} instead of \"ok\"",
            snippet(&answer.body)
        ))
    }
}

// --- Checking the `[job.action]` table (at load) ---

/// The robot's documented rate limit, the default `rate`.
const DEFAULT_RATE: &str = "1/s";

/// `type = "slack"` as written: `text`, `blocks` or both; `parse` builds the JSON body once.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSlack {
    pub(crate) webhook: String,
    pub(crate) text: Option<String>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub(crate) blocks: Option<toml::Value>,
    pub(crate) rate: Option<String>,
}

/// Checks a `type = "slack"` action table; errors go to `check`.
pub(crate) fn parse(check: &mut impl Check, raw: RawSlack) -> Option<SlackAction> {
    let webhook = check.url(&raw.webhook, "webhook");
    let budget = check.budget(raw.rate.as_deref(), DEFAULT_RATE, &raw.webhook);
    let mut message = json!({});
    if let Some(text) = &raw.text {
        message["text"] = json!(text);
    }
    if let Some(blocks) = raw.blocks.clone() {
        let blocks = check.json(blocks, "blocks")?;
        if !blocks.is_array() {
            check.error(
                "blocks",
                "must be an array of block tables ([[job.action.blocks]])",
            );
            return None;
        }
        message["blocks"] = blocks;
    }
    if raw.text.is_none() && raw.blocks.is_none() {
        check.error("text", "a Slack message needs text, blocks, or both");
        return None;
    }
    let message = check.check_json_templates(message, "text")?;
    Some(SlackAction {
        webhook: webhook?,
        message,
        budget: budget?,
    })
}
