//! A generic HTTP request: any method, URL, headers and a templated body. 2xx is success.

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Method;

use super::deliver::{self};
use super::template::{Content, TemplateContext};
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
}

impl HttpAction {
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let tctx = TemplateContext::new(ctx.job, ctx.slot, ctx.zone, ctx.replica);
        let body = match &self.body {
            Some(content) => Some(
                ctx.templates
                    .render(content, &tctx)
                    .map_err(|reason| ActionError::Render { field: "body", reason })?,
            ),
            None => None,
        };
        let build = || {
            let mut request = ctx.client.request(self.method.clone(), self.url.expose().clone());
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
        deliver::deliver(ctx, build, deliver::status_verdict).await
    }
}
