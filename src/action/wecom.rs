//! WeCom (WeChat Work) group robot: every message type of the robot API.
//!
//! The robot answers HTTP 200 even on errors; the JSON `errcode` decides. 45009 is its rate
//! limit and is retried; 93000 is a bad key and is final, with a hint at the usual mistake.
//! `file` and `voice` are uploaded first (`upload_media`, multipart field `media`) and sent by
//! `media_id`.

use std::path::PathBuf;

use base64::Engine as _;
use md5::{Digest, Md5};
use serde::Deserialize;
use serde_json::{json, Value};
use url::Url;

use super::deliver::{self, snippet, Answer, OnUncertain, Verdict};
use super::rate::Budget;
use super::template::Content;
use super::{ActionError, Delivery, SendContext};
use crate::secret::SecretUrl;

/// Most bytes of UTF-8 in a text message's content.
pub const TEXT_LIMIT: usize = 2048;
/// Most bytes of UTF-8 in a markdown (or markdown_v2) message's content.
pub const MARKDOWN_LIMIT: usize = 4096;
/// Largest image, before base64.
pub const IMAGE_LIMIT: usize = 2 * 1024 * 1024;
/// Smallest and largest file the robot accepts for upload.
pub const FILE_MIN: usize = 5;
pub const FILE_LIMIT: usize = 20 * 1024 * 1024;
/// Largest voice file (AMR).
pub const VOICE_LIMIT: usize = 2 * 1024 * 1024;
/// Articles in one news message.
pub const MAX_ARTICLES: usize = 8;

const ERRCODE_RATE_LIMIT: i64 = 45009;
const ERRCODE_BAD_KEY: i64 = 93000;

/// An article of a `news` message.
#[derive(Debug)]
pub struct Article {
    pub title: Content,
    pub description: Option<Content>,
    pub url: String,
    pub picurl: Option<String>,
}

/// Where an image comes from: a file next to jobs.toml or a URL fetched at send time.
#[derive(Debug, Clone)]
pub enum ImageSource {
    Path(PathBuf),
    Url(Url),
}

/// The message of a WeCom action, by `msgtype`.
#[derive(Debug)]
pub enum Message {
    Text {
        content: Content,
        mentioned_list: Vec<String>,
        mentioned_mobile_list: Vec<String>,
    },
    Markdown {
        content: Content,
    },
    MarkdownV2 {
        content: Content,
    },
    Image(ImageSource),
    News(Vec<Article>),
    File(PathBuf),
    Voice(PathBuf),
    /// `card_type` is `text_notice` or `news_notice`; strings with template syntax are rendered.
    TemplateCard(Value),
}

impl Message {
    pub fn msgtype(&self) -> &'static str {
        match self {
            Message::Text { .. } => "text",
            Message::Markdown { .. } => "markdown",
            Message::MarkdownV2 { .. } => "markdown_v2",
            Message::Image(_) => "image",
            Message::News(_) => "news",
            Message::File(_) => "file",
            Message::Voice(_) => "voice",
            Message::TemplateCard(_) => "template_card",
        }
    }
}

/// A checked WeCom robot action.
#[derive(Debug)]
pub struct WecomAction {
    pub webhook: SecretUrl,
    pub message: Message,
    /// The robot's rate limit, shared by the fleet (20 a minute unless `rate` says otherwise).
    pub budget: Budget,
}

/// Checks `content` against the robot's limit for `msgtype`.
pub fn check_size(msgtype: &'static str, limit: usize, content: &str) -> Result<(), ActionError> {
    let size = content.len();
    if size > limit {
        return Err(ActionError::TooLarge {
            field: "content",
            limit,
            size,
            msgtype,
        });
    }
    Ok(())
}

/// The content limit of a text-like message type.
pub fn content_limit(msgtype: &str) -> usize {
    if msgtype == "text" {
        TEXT_LIMIT
    } else {
        MARKDOWN_LIMIT
    }
}

impl WecomAction {
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let body = self.payload(ctx).await?;
        let url = self.webhook.expose().clone();
        deliver::deliver(
            ctx,
            Some(&self.budget),
            OnUncertain::Stop,
            || ctx.client.post(url.clone()).json(&body),
            classify,
        )
        .await
    }

    /// The JSON the robot expects for this message, rendered for this slot.
    pub async fn payload(&self, ctx: &SendContext<'_>) -> Result<Value, ActionError> {
        let tctx = ctx.template_context();
        let render = |content: &Content, field: &'static str| {
            ctx.templates
                .render(content, &tctx)
                .map_err(|reason| ActionError::Render { field, reason })
        };
        Ok(match &self.message {
            Message::Text {
                content,
                mentioned_list,
                mentioned_mobile_list,
            } => {
                let content = render(content, "content")?;
                check_size("text", TEXT_LIMIT, &content)?;
                json!({"msgtype": "text", "text": {
                    "content": content,
                    "mentioned_list": mentioned_list,
                    "mentioned_mobile_list": mentioned_mobile_list,
                }})
            }
            Message::Markdown { content } | Message::MarkdownV2 { content } => {
                let msgtype = self.message.msgtype();
                let content = render(content, "content")?;
                check_size(msgtype, MARKDOWN_LIMIT, &content)?;
                json!({"msgtype": msgtype, msgtype: {"content": content}})
            }
            Message::Image(source) => {
                let bytes = image_bytes(ctx, source).await?;
                json!({"msgtype": "image", "image": {
                    "base64": base64::engine::general_purpose::STANDARD.encode(&bytes),
                    "md5": hex::encode(Md5::digest(&bytes)),
                }})
            }
            Message::News(articles) => {
                let mut items = Vec::with_capacity(articles.len());
                for a in articles {
                    let mut item =
                        json!({"title": render(&a.title, "articles.title")?, "url": a.url});
                    if let Some(d) = &a.description {
                        item["description"] = json!(render(d, "articles.description")?);
                    }
                    if let Some(p) = &a.picurl {
                        item["picurl"] = json!(p);
                    }
                    items.push(item);
                }
                json!({"msgtype": "news", "news": {"articles": items}})
            }
            Message::File(path) | Message::Voice(path) => {
                let kind = self.message.msgtype();
                let media_id = self.upload(ctx, kind, path).await?;
                json!({"msgtype": kind, kind: {"media_id": media_id}})
            }
            Message::TemplateCard(card) => {
                let card = ctx.templates.render_json(card, &tctx).map_err(|reason| {
                    ActionError::Render {
                        field: "template_card",
                        reason,
                    }
                })?;
                json!({"msgtype": "template_card", "template_card": card})
            }
        })
    }

    /// Uploads `path` as `kind` (`file` or `voice`) and returns its `media_id`.
    async fn upload(
        &self,
        ctx: &SendContext<'_>,
        kind: &'static str,
        path: &std::path::Path,
    ) -> Result<String, ActionError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| ActionError::Input {
                field: "media_path",
                reason: format!("{}: {e}", path.display()),
            })?;
        let limit = if kind == "voice" {
            VOICE_LIMIT
        } else {
            FILE_LIMIT
        };
        if bytes.len() < FILE_MIN || bytes.len() > limit {
            return Err(ActionError::Input {
                field: "media_path",
                reason: format!(
                    "{}: {} bytes; a {kind} must be {FILE_MIN} to {limit} bytes",
                    path.display(),
                    bytes.len()
                ),
            });
        }
        let name = path
            .file_name()
            .map_or_else(|| "media".to_owned(), |n| n.to_string_lossy().into_owned());
        let url = upload_url(self.webhook.expose(), kind);
        let build = || {
            let part = || reqwest::multipart::Part::bytes(bytes.clone()).file_name(name.clone());
            // The part's type as the robot's documentation shows it (a constant: never an error).
            let part = part()
                .mime_str("application/octet-stream")
                .unwrap_or_else(|_| part());
            ctx.client
                .post(url.clone())
                .multipart(reqwest::multipart::Form::new().part("media", part))
        };
        let (media_id, _) =
            deliver::deliver_for(ctx, None, OnUncertain::Resend, build, classify_upload).await?;
        Ok(media_id)
    }
}

/// `…/cgi-bin/webhook/upload_media?key=KEY&type=file` from `…/cgi-bin/webhook/send?key=KEY`.
pub fn upload_url(webhook: &Url, kind: &str) -> Url {
    let mut url = webhook.clone();
    let path = url.path().trim_end_matches("/send").to_owned();
    url.set_path(&format!("{path}/upload_media"));
    url.query_pairs_mut().append_pair("type", kind);
    url
}

/// The image's bytes, checked: JPG or PNG, at most 2 MB.
async fn image_bytes(ctx: &SendContext<'_>, source: &ImageSource) -> Result<Vec<u8>, ActionError> {
    let bad = |reason: String| ActionError::Input {
        field: "image",
        reason,
    };
    let bytes = match source {
        ImageSource::Path(path) => tokio::fs::read(path)
            .await
            .map_err(|e| bad(format!("{}: {e}", path.display())))?,
        ImageSource::Url(url) => fetch(ctx, url).await.map_err(bad)?,
    };
    check_image(&bytes).map_err(bad)?;
    Ok(bytes)
}

/// JPG or PNG by signature, at most [`IMAGE_LIMIT`] bytes.
pub fn check_image(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() > IMAGE_LIMIT {
        return Err(format!(
            "image is {} bytes, over the robot's limit of {IMAGE_LIMIT} bytes",
            bytes.len()
        ));
    }
    let png = bytes.starts_with(b"\x89PNG\r\n\x1a\n");
    let jpg = bytes.starts_with(&[0xFF, 0xD8, 0xFF]);
    if !(png || jpg) {
        return Err("image is neither JPG nor PNG".to_owned());
    }
    Ok(())
}

async fn fetch(ctx: &SendContext<'_>, url: &Url) -> Result<Vec<u8>, String> {
    let remaining = ctx
        .deadline
        .saturating_duration_since(tokio::time::Instant::now());
    let response = ctx
        .client
        .get(url.clone())
        .timeout(remaining)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("fetching the image failed: {}", e.without_url()))?;
    if response
        .content_length()
        .is_some_and(|n| n > IMAGE_LIMIT as u64)
    {
        return Err(format!(
            "image is over the robot's limit of {IMAGE_LIMIT} bytes"
        ));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("fetching the image failed: {}", e.without_url()))?;
    Ok(bytes.to_vec())
}

#[derive(Deserialize)]
struct RobotAnswer {
    errcode: i64,
    #[serde(default)]
    errmsg: String,
    #[serde(default)]
    media_id: Option<String>,
}

fn robot_answer<T>(answer: &Answer) -> Result<RobotAnswer, Verdict<T>> {
    if let Some(failure) = deliver::status_failure(answer) {
        return Err(failure);
    }
    serde_json::from_str::<RobotAnswer>(&answer.body).map_err(|_| {
        Verdict::Fail(format!(
            "answer is not the robot's JSON ({{\"errcode\":…}}): {}",
            snippet(&answer.body)
        ))
    })
}

/// Reads the robot's answer: the HTTP status first, then `errcode`.
pub fn classify(answer: &Answer) -> Verdict {
    match robot_answer(answer) {
        Ok(robot) => errcode_verdict(robot.errcode, &robot.errmsg, ()),
        Err(verdict) => verdict,
    }
}

fn classify_upload(answer: &Answer) -> Verdict<String> {
    match robot_answer(answer) {
        Ok(RobotAnswer {
            errcode: 0,
            media_id: Some(id),
            ..
        }) => Verdict::Success(id),
        Ok(RobotAnswer { errcode: 0, .. }) => {
            Verdict::Fail("upload_media answered without a media_id".to_owned())
        }
        Ok(robot) => match errcode_verdict(robot.errcode, &robot.errmsg, ()) {
            Verdict::Retry { reason, after } => Verdict::Retry { reason, after },
            Verdict::Fail(reason) => Verdict::Fail(reason),
            Verdict::Success(()) => {
                Verdict::Fail("upload_media answered without a media_id".to_owned())
            }
        },
        Err(verdict) => verdict,
    }
}

fn errcode_verdict<T>(errcode: i64, errmsg: &str, ok: T) -> Verdict<T> {
    match errcode {
        0 => Verdict::Success(ok),
        ERRCODE_RATE_LIMIT => Verdict::Retry {
            reason: format!("errcode {errcode}: {errmsg} (rate limited)"),
            after: None,
        },
        ERRCODE_BAD_KEY => Verdict::Fail(format!(
            "errcode {errcode}: {errmsg} (the webhook key is wrong: `webhook` must be the full URL \
             https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY, not the key alone)"
        )),
        code => Verdict::Fail(format!("errcode {code}: {errmsg}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    fn answer(body: &str) -> Answer {
        Answer {
            status: StatusCode::OK,
            retry_after: None,
            body: body.into(),
        }
    }

    #[test]
    fn errcodes() {
        assert_eq!(
            classify(&answer(r#"{"errcode":0,"errmsg":"ok"}"#)),
            Verdict::Success(())
        );
        assert!(matches!(
            classify(&answer(r#"{"errcode":45009,"errmsg":"freq"}"#)),
            Verdict::Retry { .. }
        ));
        let Verdict::Fail(msg) = classify(&answer(
            r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#,
        )) else {
            panic!("93000 must be final");
        };
        assert!(msg.contains("93000") && msg.contains("full URL"), "{msg}");
        assert!(matches!(classify(&answer("<html>")), Verdict::Fail(_)));
        assert_eq!(
            classify_upload(&answer(r#"{"errcode":0,"media_id":"m1"}"#)),
            Verdict::Success("m1".to_owned())
        );
    }

    #[test]
    fn size_limits_name_limit_and_size() {
        assert!(check_size("text", TEXT_LIMIT, &"a".repeat(2048)).is_ok());
        let err = check_size("text", TEXT_LIMIT, &"a".repeat(2049))
            .unwrap_err()
            .to_string();
        assert!(err.contains("2048") && err.contains("2049"), "{err}");
        assert!(check_size("markdown", MARKDOWN_LIMIT, &"é".repeat(2049)).is_err());
    }

    #[test]
    fn upload_url_keeps_the_key() {
        let url = Url::parse("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K").unwrap();
        assert_eq!(
            upload_url(&url, "file").as_str(),
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/upload_media?key=K&type=file"
        );
    }

    #[test]
    fn images_are_checked() {
        assert!(check_image(b"\x89PNG\r\n\x1a\nrest").is_ok());
        assert!(check_image(&[0xFF, 0xD8, 0xFF, 0xE0]).is_ok());
        assert!(check_image(b"GIF89a").is_err());
        assert!(check_image(&vec![0xFF; IMAGE_LIMIT + 1]).is_err());
    }
}
