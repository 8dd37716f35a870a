//! DingTalk custom robot: text, markdown, link and actionCard, with optional signing
//! ("加签": HMAC-SHA256 of "{timestamp_ms}\n{secret}", base64, URL-encoded, appended as
//! `&timestamp=…&sign=…`). `errcode` 0 is success; 130101 is its rate limit and is retried.

use serde::Deserialize;
use serde_json::Value;
use url::Url;

use super::deliver::{self, snippet, Answer, OnUncertain, Verdict};
use super::rate::Budget;
use super::{ActionError, Delivery, SendContext};
use crate::secret::{Secret, SecretUrl};

const ERRCODE_RATE_LIMIT: i64 = 130101;

/// A checked DingTalk action. `message` is the JSON body with `msgtype` and its object; its
/// strings with template syntax are rendered per slot.
#[derive(Debug)]
pub struct DingTalkAction {
    pub webhook: SecretUrl,
    pub secret: Option<Secret>,
    pub message: Value,
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
