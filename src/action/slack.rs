//! Slack incoming webhook: `text` and `blocks`. Success is HTTP 200 with the body `ok`; 429 is
//! retried after its `Retry-After`.

use serde_json::Value;

use super::deliver::{self, snippet, Answer, OnUncertain, Verdict};
use super::rate::Budget;
use super::{ActionError, Delivery, SendContext};
use crate::secret::SecretUrl;

#[derive(Debug)]
pub struct SlackAction {
    pub webhook: SecretUrl,
    /// `{"text": …, "blocks": […]}`; strings with template syntax are rendered per slot.
    pub message: Value,
    pub budget: Budget,
}

impl SlackAction {
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
