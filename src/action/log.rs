//! The `log` action: renders its message into the replica's log. For trying slotcron out with
//! nothing else installed, and for dry runs of a schedule.

use super::template::Content;
use super::{ActionError, Delivery, SendContext};

#[derive(Debug)]
pub struct LogAction {
    pub content: Content,
}

impl LogAction {
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let tctx = ctx.template_context();
        let message = ctx
            .templates
            .render(&self.content, &tctx)
            .map_err(|reason| ActionError::Render {
                field: "content",
                reason,
            })?;
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
