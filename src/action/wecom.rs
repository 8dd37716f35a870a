//! WeCom (WeChat Work) group robot: text and markdown messages.
//!
//! The robot answers HTTP 200 even on errors; the JSON `errcode` decides. 45009 is its rate
//! limit and is retried; 93000 is a bad key and is final, with a hint at the usual mistake.

use serde::Deserialize;
use serde_json::{json, Value};

use super::deliver::{self, snippet, Answer, Verdict};
use super::template::{Content, TemplateContext};
use super::{ActionError, Delivery, SendContext};
use crate::secret::SecretUrl;

/// Most bytes of UTF-8 in a text message's content.
pub const TEXT_LIMIT: usize = 2048;
/// Most bytes of UTF-8 in a markdown message's content.
pub const MARKDOWN_LIMIT: usize = 4096;

const ERRCODE_RATE_LIMIT: i64 = 45009;
const ERRCODE_BAD_KEY: i64 = 93000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgType {
    Text,
    Markdown,
}

impl MsgType {
    pub fn name(self) -> &'static str {
        match self {
            MsgType::Text => "text",
            MsgType::Markdown => "markdown",
        }
    }

    /// The robot's documented content limit, in bytes.
    pub fn limit(self) -> usize {
        match self {
            MsgType::Text => TEXT_LIMIT,
            MsgType::Markdown => MARKDOWN_LIMIT,
        }
    }
}

/// A checked WeCom robot action.
#[derive(Debug)]
pub struct WecomAction {
    pub webhook: SecretUrl,
    pub msgtype: MsgType,
    pub content: Content,
    /// User ids (or `@all`) to mention; text messages only.
    pub mentioned_list: Vec<String>,
    /// Phone numbers (or `@all`) to mention; text messages only.
    pub mentioned_mobile_list: Vec<String>,
}

/// Checks `content` against the robot's limit for `msgtype`.
pub fn check_size(msgtype: MsgType, content: &str) -> Result<(), ActionError> {
    let size = content.len();
    let limit = msgtype.limit();
    if size > limit {
        return Err(ActionError::TooLarge {
            field: "content",
            limit,
            size,
            msgtype: msgtype.name(),
        });
    }
    Ok(())
}

impl WecomAction {
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let tctx = TemplateContext::new(ctx.job, ctx.slot, ctx.zone, ctx.replica);
        let content = ctx
            .templates
            .render(&self.content, &tctx)
            .map_err(|reason| ActionError::Render { field: "content", reason })?;
        check_size(self.msgtype, &content)?;
        let body = self.payload(content);
        let url = self.webhook.expose().clone();
        deliver::deliver(ctx, || ctx.client.post(url.clone()).json(&body), classify).await
    }

    /// The JSON the robot expects for this message type.
    pub fn payload(&self, content: String) -> Value {
        match self.msgtype {
            MsgType::Text => json!({
                "msgtype": "text",
                "text": {
                    "content": content,
                    "mentioned_list": self.mentioned_list,
                    "mentioned_mobile_list": self.mentioned_mobile_list,
                }
            }),
            MsgType::Markdown => json!({
                "msgtype": "markdown",
                "markdown": { "content": content }
            }),
        }
    }
}

#[derive(Deserialize)]
struct RobotAnswer {
    errcode: i64,
    #[serde(default)]
    errmsg: String,
}

/// Reads the robot's answer: the HTTP status first, then `errcode`.
pub fn classify(answer: &Answer) -> Verdict {
    let by_status = deliver::status_verdict(answer);
    if by_status != Verdict::Success {
        return by_status;
    }
    let Ok(robot) = serde_json::from_str::<RobotAnswer>(&answer.body) else {
        return Verdict::Fail(format!(
            "answer is not the robot's JSON ({{\"errcode\":…}}): {}",
            snippet(&answer.body)
        ));
    };
    match robot.errcode {
        0 => Verdict::Success,
        ERRCODE_RATE_LIMIT => Verdict::Retry {
            reason: format!("errcode {}: {} (rate limited)", robot.errcode, robot.errmsg),
            after: None,
        },
        ERRCODE_BAD_KEY => Verdict::Fail(format!(
            "errcode {}: {} (the webhook key is wrong: `webhook` must be the full URL \
             https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY, not the key alone)",
            robot.errcode, robot.errmsg
        )),
        code => Verdict::Fail(format!("errcode {code}: {}", robot.errmsg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    fn answer(body: &str) -> Answer {
        Answer { status: StatusCode::OK, retry_after: None, body: body.into() }
    }

    #[test]
    fn errcodes() {
        assert_eq!(classify(&answer(r#"{"errcode":0,"errmsg":"ok"}"#)), Verdict::Success);
        assert!(matches!(classify(&answer(r#"{"errcode":45009,"errmsg":"freq"}"#)), Verdict::Retry { .. }));
        let Verdict::Fail(msg) = classify(&answer(r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#)) else {
            panic!("93000 must be final");
        };
        assert!(msg.contains("93000") && msg.contains("full URL"), "{msg}");
        assert!(matches!(classify(&answer("<html>")), Verdict::Fail(_)));
    }

    #[test]
    fn size_limits_name_limit_and_size() {
        assert!(check_size(MsgType::Text, &"a".repeat(2048)).is_ok());
        let err = check_size(MsgType::Text, &"a".repeat(2049)).unwrap_err().to_string();
        assert!(err.contains("2048") && err.contains("2049"), "{err}");
        assert!(check_size(MsgType::Markdown, &"a".repeat(4096)).is_ok());
        assert!(check_size(MsgType::Markdown, &"é".repeat(2049)).is_err());
    }
}
