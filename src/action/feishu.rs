//! Feishu / Lark custom bot: text, post and interactive cards, with optional signing (the HMAC
//! key is "{timestamp_s}\n{secret}", the message empty; base64; `timestamp` and `sign` go in the
//! JSON body). `code` 0 is success.

use serde::Deserialize;
use serde_json::{Value, json};

use super::deliver::{self, Answer, OnUncertain, Verdict, snippet};
use super::rate::Budget;
use super::{ActionError, Delivery, SendContext};
use crate::action::check::Check;
use crate::secret::{Secret, SecretUrl};

/// A checked Feishu action; `message` holds `msg_type` and `content` or `card`.
#[derive(Debug)]
pub struct FeishuAction {
    /// The bot's webhook URL; its hook id is a secret.
    pub webhook: SecretUrl,
    /// The signing secret, when the bot has one.
    pub secret: Option<Secret>,
    /// The JSON body with `msg_type` and `content` or `card`.
    pub message: Value,
    /// The bot's rate limit, shared by the fleet (100 a minute unless `rate` says otherwise).
    pub budget: Budget,
}

/// `sign` for `timestamp_s` and `secret`: base64(HMAC-SHA256(key = "{ts}\n{secret}", "")).
pub fn sign(timestamp_s: i64, secret: &str) -> String {
    super::hmac_sha256_base64(format!("{timestamp_s}\n{secret}").as_bytes(), b"")
}

impl FeishuAction {
    /// Sends this action for the slot in `ctx`; the delivery or why it failed.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let body = ctx.render_json(&self.message, "message")?;
        let build = || {
            let mut body = body.clone();
            if let Some(secret) = &self.secret {
                let ts = chrono::Utc::now().timestamp();
                body["timestamp"] = json!(ts.to_string());
                body["sign"] = json!(sign(ts, secret.expose()));
            }
            ctx.client.post(self.webhook.expose().clone()).json(&body)
        };
        deliver::deliver(ctx, Some(&self.budget), OnUncertain::Stop, build, classify).await
    }
}

#[derive(Deserialize)]
struct BotAnswer {
    #[serde(alias = "StatusCode")]
    code: i64,
    #[serde(default, alias = "StatusMessage")]
    msg: String,
}

/// Reads the bot's answer: the HTTP status, then `code`.
pub fn classify(answer: &Answer) -> Verdict {
    if let Some(failure) = deliver::status_failure(answer) {
        return failure;
    }
    match serde_json::from_str::<BotAnswer>(&answer.body) {
        Ok(BotAnswer { code: 0, .. }) => Verdict::Success(()),
        Ok(BotAnswer { code, msg }) => Verdict::Fail(format!("code {code}: {msg}")),
        Err(_) => Verdict::Fail(format!(
            "answer is not Feishu's JSON: {}",
            snippet(&answer.body)
        )),
    }
}

// --- Checking the `[job.action]` table (at load) ---

/// The robot's documented rate limit, the default `rate`.
const DEFAULT_RATE: &str = "100/min";

/// `type = "feishu"` as written: one flat table for every `msg_type`; `parse` checks that only
/// the chosen type's field is set, and turns `post`/`card` into the JSON it sends, once.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFeishu {
    pub(crate) webhook: String,
    pub(crate) secret: Option<String>,
    pub(crate) msg_type: RawFeishuMsgType,
    pub(crate) text: Option<String>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub(crate) post: Option<toml::Value>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub(crate) card: Option<toml::Value>,
    pub(crate) rate: Option<String>,
}

/// `msg_type` as Feishu spells it; `parse` pairs it with the one field it needs.
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawFeishuMsgType {
    Text,
    Post,
    Interactive,
}

/// Checks a `type = "feishu"` action table; errors go to `check`.
pub(crate) fn parse(check: &mut impl Check, raw: RawFeishu) -> Option<FeishuAction> {
    use RawFeishuMsgType as M;
    let what = format!(
        "msg_type {:?}",
        format!("{:?}", raw.msg_type).to_lowercase()
    );
    let fields = [
        ("text", raw.text.is_some() && raw.msg_type != M::Text),
        ("post", raw.post.is_some() && raw.msg_type != M::Post),
        ("card", raw.card.is_some() && raw.msg_type != M::Interactive),
    ];
    if !check.unused(&what, &fields) {
        return None;
    }
    let webhook = check.url(&raw.webhook, "webhook");
    let budget = check.budget(raw.rate.as_deref(), DEFAULT_RATE, &raw.webhook);
    let message = match raw.msg_type {
        M::Text => check
            .required(&what, "text", raw.text.clone())
            .map(|t| json!({"msg_type": "text", "content": {"text": t}})),
        M::Post => {
            let post = check
                .required(&what, "post", raw.post.clone())
                .and_then(|p| check.json(p, "post"));
            post.map(|p| json!({"msg_type": "post", "content": {"post": p}}))
        }
        M::Interactive => {
            let card = check
                .required(&what, "card", raw.card.clone())
                .and_then(|c| check.json(c, "card"));
            card.map(|c| json!({"msg_type": "interactive", "card": c}))
        }
    };
    let message = check.check_json_templates(message?, "message")?;
    Some(FeishuAction {
        webhook: webhook?,
        secret: raw.secret.map(Secret::new),
        message,
        budget: budget?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn codes() {
        let ok = Answer {
            status: reqwest::StatusCode::OK,
            retry_after: None,
            body: r#"{"code":0,"msg":"success"}"#.into(),
        };
        assert_eq!(classify(&ok), Verdict::Success(()));
        let bad = Answer {
            body: r#"{"code":19021,"msg":"sign match fail"}"#.into(),
            ..ok
        };
        assert!(matches!(classify(&bad), Verdict::Fail(m) if m.contains("19021")));
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(sign(1_700_000_000, "s"))
                .unwrap()
                .len(),
            32
        );
    }
}
