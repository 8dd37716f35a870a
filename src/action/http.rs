//! A generic HTTP request: any method, URL, headers and a templated body. 2xx is success.

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Method;

use super::deliver;
use super::template::Content;
use super::{ActionError, Delivery, SendContext};
use crate::secret::{Secret, SecretUrl};

/// A checked generic HTTP action.
#[derive(Debug)]
pub struct HttpAction {
    pub url: SecretUrl,
    pub method: Method,
    /// Header values may hold credentials (`Authorization`), so they never print.
    pub headers: Vec<(HeaderName, Secret)>,
    pub body: Option<Content>,
    /// `rate = "…"`: a fleet-wide budget for this URL; none by default.
    pub budget: Option<super::rate::Budget>,
    /// Statuses counted as success (default 200–299).
    pub success: std::ops::RangeInclusive<u16>,
    /// `success_json = { field = "code", equals = 0 }`: a JSON field that must equal a value.
    pub success_json: Option<(String, serde_json::Value)>,
    /// `retry_uncertain` (default true): resend after an attempt whose answer was lost. Safe
    /// for receivers that deduplicate by `Idempotency-Key`, which every request carries.
    pub on_uncertain: deliver::OnUncertain,
}

impl HttpAction {
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let tctx = ctx.template_context();
        let body = match &self.body {
            Some(content) => Some(ctx.templates.render(content, &tctx).map_err(|reason| {
                ActionError::Render {
                    field: "body",
                    reason,
                }
            })?),
            None => None,
        };
        let build = || {
            let mut request = ctx
                .client
                .request(self.method.clone(), self.url.expose().clone());
            for (name, value) in &self.headers {
                if let Ok(value) = HeaderValue::from_str(value.expose()) {
                    request = request.header(name, value);
                }
            }
            match &body {
                Some(body) => request.body(body.clone()),
                None => request,
            }
        };
        deliver::deliver(
            ctx,
            self.budget.as_ref(),
            self.on_uncertain,
            build,
            |answer| self.classify(answer),
        )
        .await
    }

    /// Success when the status is in `success` and (if set) the JSON field has its value.
    fn classify(&self, answer: &deliver::Answer) -> deliver::Verdict {
        let status = answer.status.as_u16();
        if !self.success.contains(&status) {
            return match deliver::status_verdict(answer) {
                deliver::Verdict::Success(()) => deliver::Verdict::Fail(format!(
                    "HTTP {status} is outside the success range {}-{}: {}",
                    self.success.start(),
                    self.success.end(),
                    deliver::snippet(&answer.body)
                )),
                other => other,
            };
        }
        let Some((field, expected)) = &self.success_json else {
            return deliver::Verdict::Success(());
        };
        let found = serde_json::from_str::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v.pointer(&json_pointer(field)).cloned());
        match found {
            Some(value) if value == *expected => deliver::Verdict::Success(()),
            Some(value) => {
                deliver::Verdict::Fail(format!("field {field} is {value}, expected {expected}"))
            }
            None => deliver::Verdict::Fail(format!(
                "the answer has no JSON field {field}: {}",
                deliver::snippet(&answer.body)
            )),
        }
    }
}

/// `a.b.0` as the JSON pointer `/a/b/0`.
fn json_pointer(dotted: &str) -> String {
    dotted.split('.').fold(String::new(), |mut p, part| {
        p.push('/');
        p.push_str(part);
        p
    })
}
