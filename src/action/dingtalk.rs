//! DingTalk custom robot: text, markdown, link and actionCard, with optional signing
//! ("加签": HMAC-SHA256 of "{timestamp_ms}\n{secret}", base64, URL-encoded, appended as
//! `&timestamp=…&sign=…`). `errcode` 0 is success; 130101 is its rate limit and is retried.

use serde::Deserialize;
use serde_json::Value;
use url::Url;

use super::deliver::{self, Answer, OnUncertain, Verdict, snippet};
use super::rate::Budget;
use super::{ActionError, Delivery, SendContext};
use crate::action::check::Check;
use crate::secret::{Secret, SecretUrl};
use serde_json::json;

const ERRCODE_RATE_LIMIT: i64 = 130101;

/// A checked DingTalk action. `message` is the JSON body with `msgtype` and its object; its
/// strings with template syntax are rendered per slot.
#[derive(Debug)]
pub struct DingTalkAction {
    /// The robot's webhook URL; its `access_token` is a secret.
    pub webhook: SecretUrl,
    /// The signing secret ("加签"), when the robot has one.
    pub secret: Option<Secret>,
    /// The JSON body with `msgtype` and its object.
    pub message: Value,
    /// The robot's rate limit, shared by the fleet (20 a minute unless `rate` says otherwise).
    pub budget: Budget,
}

/// `sign` for `timestamp_ms` and `secret`: base64(HMAC-SHA256(key = secret, "{ts}\n{secret}")).
pub fn sign(timestamp_ms: i64, secret: &str) -> String {
    super::hmac_sha256_base64(
        secret.as_bytes(),
        format!("{timestamp_ms}\n{secret}").as_bytes(),
    )
}

/// The webhook with `timestamp` and `sign` appended (URL-encoded by the query serializer).
pub fn signed_url(webhook: &Url, secret: &str, timestamp_ms: i64) -> Url {
    let mut url = webhook.clone();
    url.query_pairs_mut()
        .append_pair("timestamp", &timestamp_ms.to_string())
        .append_pair("sign", &sign(timestamp_ms, secret));
    url
}

impl DingTalkAction {
    /// Sends this action for the slot in `ctx`; the delivery or why it failed.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let body = ctx.render_json(&self.message, "message")?;
        // Signed per attempt: DingTalk refuses a timestamp more than an hour old.
        let build = || {
            let url = match &self.secret {
                Some(secret) => signed_url(
                    self.webhook.expose(),
                    secret.expose(),
                    chrono::Utc::now().timestamp_millis(),
                ),
                None => self.webhook.expose().clone(),
            };
            ctx.client.post(url).json(&body)
        };
        deliver::deliver(ctx, Some(&self.budget), OnUncertain::Stop, build, classify).await
    }
}

#[derive(Deserialize)]
struct RobotAnswer {
    errcode: i64,
    #[serde(default)]
    errmsg: String,
}

/// Reads the robot's answer: the HTTP status, then `errcode` (130101 is retried).
pub fn classify(answer: &Answer) -> Verdict {
    if let Some(failure) = deliver::status_failure(answer) {
        return failure;
    }
    let Ok(robot) = serde_json::from_str::<RobotAnswer>(&answer.body) else {
        return Verdict::Fail(format!(
            "answer is not DingTalk's JSON: {}",
            snippet(&answer.body)
        ));
    };
    match robot.errcode {
        0 => Verdict::Success(()),
        ERRCODE_RATE_LIMIT => Verdict::Retry {
            reason: format!("errcode {}: {} (rate limited)", robot.errcode, robot.errmsg),
            after: None,
        },
        code => Verdict::Fail(format!("errcode {code}: {}", robot.errmsg)),
    }
}

// --- Checking the `[job.action]` table (at load) ---

/// The robot's documented rate limit, the default `rate`.
const DEFAULT_RATE: &str = "20/min";

/// `type = "dingtalk"` as written: one flat table for every `msgtype`; `parse` checks that only
/// the chosen type's fields are set, naming any other.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDingTalk {
    pub(crate) webhook: String,
    pub(crate) secret: Option<String>,
    pub(crate) msgtype: RawDingTalkMsgType,
    pub(crate) content: Option<String>,
    pub(crate) title: Option<String>,
    pub(crate) text: Option<String>,
    pub(crate) message_url: Option<String>,
    pub(crate) pic_url: Option<String>,
    pub(crate) single_title: Option<String>,
    pub(crate) single_url: Option<String>,
    pub(crate) buttons: Option<Vec<RawButton>>,
    pub(crate) at_mobiles: Option<Vec<String>>,
    pub(crate) at_user_ids: Option<Vec<String>>,
    pub(crate) at_all: Option<bool>,
    pub(crate) rate: Option<String>,
}

/// `msgtype` as DingTalk spells it (`actionCard` in camel case, hence the renames).
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawDingTalkMsgType {
    #[serde(rename = "text")]
    Text,
    #[serde(rename = "markdown")]
    Markdown,
    #[serde(rename = "link")]
    Link,
    #[serde(rename = "actionCard")]
    ActionCard,
}

/// One button of an `actionCard`, as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawButton {
    pub(crate) title: String,
    pub(crate) url: String,
}

/// Checks a `type = "dingtalk"` action table; errors go to `check`.
pub(crate) fn parse(check: &mut impl Check, raw: RawDingTalk) -> Option<DingTalkAction> {
    use RawDingTalkMsgType as M;
    let what = format!("msgtype {:?}", dingtalk_name(raw.msgtype));
    let t = raw.msgtype;
    let fields = [
        ("content", raw.content.is_some() && t != M::Text),
        ("title", raw.title.is_some() && t == M::Text),
        ("text", raw.text.is_some() && t == M::Text),
        ("message_url", raw.message_url.is_some() && t != M::Link),
        ("pic_url", raw.pic_url.is_some() && t != M::Link),
        (
            "single_title",
            raw.single_title.is_some() && t != M::ActionCard,
        ),
        ("single_url", raw.single_url.is_some() && t != M::ActionCard),
        ("buttons", raw.buttons.is_some() && t != M::ActionCard),
        (
            "at_mobiles",
            raw.at_mobiles.is_some() && !matches!(t, M::Text | M::Markdown),
        ),
        (
            "at_user_ids",
            raw.at_user_ids.is_some() && !matches!(t, M::Text | M::Markdown),
        ),
        (
            "at_all",
            raw.at_all.is_some() && !matches!(t, M::Text | M::Markdown),
        ),
    ];
    if !check.unused(&what, &fields) {
        return None;
    }
    let webhook = check.url(&raw.webhook, "webhook");
    let budget = check.budget(raw.rate.as_deref(), DEFAULT_RATE, &raw.webhook);
    let message = dingtalk_message(check, &raw, &what);
    let message = check.check_json_templates(message?, "message")?;
    Some(DingTalkAction {
        webhook: webhook?,
        secret: raw.secret.map(Secret::new),
        message,
        budget: budget?,
    })
}

fn dingtalk_message(check: &mut impl Check, raw: &RawDingTalk, what: &str) -> Option<Value> {
    let at = json!({
        "atMobiles": raw.at_mobiles.clone().unwrap_or_default(),
        "atUserIds": raw.at_user_ids.clone().unwrap_or_default(),
        "isAtAll": raw.at_all.unwrap_or(false),
    });
    match raw.msgtype {
        RawDingTalkMsgType::Text => {
            let content = check.required(what, "content", raw.content.clone())?;
            Some(json!({"msgtype": "text", "text": {"content": content}, "at": at}))
        }
        RawDingTalkMsgType::Markdown => {
            let (title, text) = (
                check.required(what, "title", raw.title.clone()),
                check.required(what, "text", raw.text.clone()),
            );
            Some(
                json!({"msgtype": "markdown", "markdown": {"title": title?, "text": text?}, "at": at}),
            )
        }
        RawDingTalkMsgType::Link => {
            let title = check.required(what, "title", raw.title.clone());
            let text = check.required(what, "text", raw.text.clone());
            let url = check.required(what, "message_url", raw.message_url.clone());
            let mut link = json!({"title": title?, "text": text?, "messageUrl": url?});
            if let Some(pic) = &raw.pic_url {
                link["picUrl"] = json!(pic);
            }
            Some(json!({"msgtype": "link", "link": link}))
        }
        RawDingTalkMsgType::ActionCard => dingtalk_action_card(check, raw, what),
    }
}

fn dingtalk_action_card(check: &mut impl Check, raw: &RawDingTalk, what: &str) -> Option<Value> {
    let title = check.required(what, "title", raw.title.clone());
    let text = check.required(what, "text", raw.text.clone());
    let mut card = json!({"title": title?, "text": text?});
    match (&raw.single_title, &raw.single_url, &raw.buttons) {
        (Some(t), Some(u), None) => {
            card["singleTitle"] = json!(t);
            card["singleURL"] = json!(u);
        }
        (None, None, Some(buttons)) if !buttons.is_empty() => {
            card["btnOrientation"] = json!("0");
            card["btns"] = buttons
                .iter()
                .map(|b| json!({"title": b.title, "actionURL": b.url}))
                .collect();
        }
        _ => {
            check.error(
                "buttons",
                format!("{what} needs single_title with single_url, or a non-empty buttons list"),
            );
            return None;
        }
    }
    Some(json!({"msgtype": "actionCard", "actionCard": card}))
}

fn dingtalk_name(t: RawDingTalkMsgType) -> &'static str {
    match t {
        RawDingTalkMsgType::Text => "text",
        RawDingTalkMsgType::Markdown => "markdown",
        RawDingTalkMsgType::Link => "link",
        RawDingTalkMsgType::ActionCard => "actionCard",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn signature_matches_the_documented_algorithm() {
        // HMAC-SHA256(key="SEC123", "1700000000000\nSEC123"), base64.
        let s = sign(1_700_000_000_000, "SEC123");
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&s)
                .unwrap()
                .len(),
            32
        );
        let url = signed_url(
            &Url::parse("https://oapi.dingtalk.com/robot/send?access_token=T").unwrap(),
            "SEC123",
            1_700_000_000_000,
        );
        let query: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        assert_eq!(
            query[1],
            ("timestamp".to_owned(), "1700000000000".to_owned())
        );
        assert_eq!(query[2], ("sign".to_owned(), s));
    }

    #[test]
    fn errcodes() {
        let ok = Answer {
            status: reqwest::StatusCode::OK,
            retry_after: None,
            body: r#"{"errcode":0}"#.into(),
        };
        assert_eq!(classify(&ok), Verdict::Success(()));
        let limited = Answer {
            body: r#"{"errcode":130101,"errmsg":"send too fast"}"#.into(),
            ..ok
        };
        assert!(matches!(classify(&limited), Verdict::Retry { .. }));
    }
}
