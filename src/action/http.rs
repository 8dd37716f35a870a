//! A generic HTTP request: any method, URL, headers and a templated body. 2xx is success.

use reqwest::Method;
use reqwest::header::{HeaderName, HeaderValue};

use super::deliver;
use super::template::Content;
use super::{ActionError, Delivery, SendContext};
use crate::action::check::Check;
use crate::secret::{Secret, SecretUrl};
use serde::Deserialize;

/// A checked generic HTTP action.
#[derive(Debug)]
pub struct HttpAction {
    /// Where the request goes; its query may hold a key, so it never prints.
    pub url: SecretUrl,
    /// The request's method (default POST).
    pub method: Method,
    /// Header values may hold credentials (`Authorization`), so they never print.
    pub headers: Vec<(HeaderName, Secret)>,
    /// The body template, rendered per slot.
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
    /// Sends this action for the slot in `ctx`; the delivery or why it failed.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let body = match &self.body {
            Some(content) => Some(ctx.render(content, "body")?),
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

// --- Checking the `[job.action]` table (at load) ---

/// `type = "http"` as written: method, status range and headers stay strings here so that
/// `parse` checks each and names the key at fault.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    pub(crate) url: String,
    pub(crate) method: Option<String>,
    #[serde(default)]
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    pub(crate) body: Option<String>,
    pub(crate) rate: Option<String>,
    pub(crate) success_status: Option<String>,
    pub(crate) success_json: Option<RawSuccessJson>,
    pub(crate) retry_uncertain: Option<bool>,
}

/// `success_json = { field, equals }` as written: the answer counts as delivered only when the
/// JSON `field` of the reply equals `equals`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSuccessJson {
    pub(crate) field: String,
    #[schemars(with = "serde_json::Value")]
    pub(crate) equals: toml::Value,
}

/// Checks a `type = "http"` action table; errors go to `check`.
pub(crate) fn parse(check: &mut impl Check, raw: RawHttp) -> Option<HttpAction> {
    let url = check.url(&raw.url, "url");
    let method = method(check, raw.method.as_deref());
    let headers = headers(check, raw.headers);
    let body = match raw.body {
        Some(body) => Some(check.content("body", body)?),
        None => None,
    };
    let budget = match &raw.rate {
        Some(rate) => Some(check.budget(Some(rate), "", &raw.url)?),
        None => None,
    };
    let success = status_range(check, raw.success_status.as_deref())?;
    let success_json = match raw.success_json {
        Some(rule) => Some((rule.field, check.json(rule.equals, "success_json.equals")?)),
        None => None,
    };
    Some(HttpAction {
        url: url?,
        method: method?,
        headers: headers?,
        body,
        budget,
        success,
        success_json,
        on_uncertain: match raw.retry_uncertain {
            Some(false) => deliver::OnUncertain::Stop,
            Some(true) | None => deliver::OnUncertain::Resend,
        },
    })
}

fn method(check: &mut impl Check, raw: Option<&str>) -> Option<Method> {
    match raw.unwrap_or("POST").to_ascii_uppercase().as_str() {
        m @ ("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD") => {
            Method::from_bytes(m.as_bytes()).ok()
        }
        other => {
            check.error(
                "method",
                format!("unknown method {other:?} (GET, POST, PUT, PATCH, DELETE or HEAD)"),
            );
            None
        }
    }
}

/// `"200-299"` or `"204"`.
fn status_range(
    check: &mut impl Check,
    raw: Option<&str>,
) -> Option<std::ops::RangeInclusive<u16>> {
    let Some(raw) = raw else {
        return Some(200..=299);
    };
    let parse = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (100..=599).contains(c))
    };
    let range = match raw.split_once('-') {
        Some((a, b)) => parse(a).zip(parse(b)).map(|(a, b)| a..=b),
        None => parse(raw).map(|c| c..=c),
    };
    match range {
        Some(r) if r.start() <= r.end() => Some(r),
        _ => {
            check.error(
                "success_status",
                format!("{raw:?} is not a status or range such as \"200-299\""),
            );
            None
        }
    }
}

fn headers(
    check: &mut impl Check,
    raw: std::collections::BTreeMap<String, String>,
) -> Option<Vec<(HeaderName, Secret)>> {
    let mut headers = Vec::new();
    let mut ok = true;
    for (name, value) in raw {
        let field = format!("headers.{name}");
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            (Ok(name), Ok(_)) => headers.push((name, Secret::new(value))),
            (Err(_), _) => {
                ok = false;
                check.error(&field, "not a valid HTTP header name");
            }
            (_, Err(_)) => {
                ok = false;
                check.error(&field, "not a valid HTTP header value");
            }
        }
    }
    ok.then_some(headers)
}
