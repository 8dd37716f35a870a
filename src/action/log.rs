//! The `log` action: renders its message into the replica's log. For trying slotcron out with
//! nothing else installed, and for dry runs of a schedule.

use super::template::Content;
use super::{ActionError, Delivery, SendContext};
use crate::action::check::Check;
use serde::Deserialize;

#[derive(Debug)]
/// A checked `log` action.
pub struct LogAction {
    /// The message template, rendered per slot.
    pub content: Content,
}

impl LogAction {
    /// Sends this action for the slot in `ctx`; the delivery or why it failed.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let message = ctx.render(&self.content, "content")?;
        tracing::info!(
            job = %ctx.job,
            slot = %ctx.slot,
            replica = %ctx.replica,
            action = %"log",
            "{message}"
        );
        Ok(Delivery { attempts: 1 })
    }
}

// --- Checking the `[job.action]` table (at load) ---

/// `type = "log"` as written: the content template, checked at load like every template.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLog {
    pub(crate) content: String,
}

/// Checks a `type = "log"` action table; errors go to `check`.
pub(crate) fn parse(check: &mut impl Check, raw: RawLog) -> Option<LogAction> {
    Some(LogAction {
        content: check.content("content", raw.content)?,
    })
}
