//! WeCom (WeChat Work) group robot: every message type of the robot API.
//!
//! The robot answers HTTP 200 even on errors; the JSON `errcode` decides. 45009 is its rate
//! limit and is retried; 93000 is a bad key and is final, with a hint at the usual mistake.
//! `file` and `voice` are uploaded first (`upload_media`, multipart field `media`) and sent by
//! `media_id`.

mod parse;

use std::path::PathBuf;

use base64::Engine as _;
use md5::{Digest, Md5};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::deliver::{self, Answer, OnUncertain, Verdict, snippet};
use super::rate::Budget;
use super::template::Content;
use super::{ActionError, Delivery, SendContext};
use crate::secret::SecretUrl;

pub(crate) use parse::{RawWecom, parse};

/// Most bytes of UTF-8 in a text message's content.
pub const TEXT_LIMIT: usize = 2048;
/// Most bytes of UTF-8 in a markdown (or markdown_v2) message's content.
pub const MARKDOWN_LIMIT: usize = 4096;
/// Largest image, before base64.
pub const IMAGE_LIMIT: usize = 2 * 1024 * 1024;
/// Smallest and largest file the robot accepts for upload.
pub const FILE_MIN: usize = 5;
/// Largest file the robot accepts for upload.
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
    /// The title template.
    pub title: Content,
    /// The description template, if any.
    pub description: Option<Content>,
    /// Where the article links to.
    pub url: String,
    /// The picture shown with it, if any.
    pub picurl: Option<String>,
}

/// Where an image comes from: a file next to jobs.toml or a URL fetched at send time.
#[derive(Debug, Clone)]
pub enum ImageSource {
    /// A file next to jobs.toml, read at send time.
    Path(PathBuf),
    /// A URL fetched at send time.
    Url(Url),
}

/// The message of a WeCom action, by `msgtype`.
#[derive(Debug)]
pub enum Message {
    /// Plain text, with optional mentions.
    Text {
        /// The text template.
        content: Content,
        /// User ids to @-mention (`@all` for everyone).
        mentioned_list: Vec<String>,
        /// Mobile numbers to @-mention.
        mentioned_mobile_list: Vec<String>,
    },
    /// Markdown (the robot's subset).
    Markdown {
        /// The markdown template.
        content: Content,
    },
    /// `markdown_v2` (tables, lists, code).
    MarkdownV2 {
        /// The markdown template.
        content: Content,
    },
    /// An image, base64 with its MD5.
    Image(ImageSource),
    /// News: 1 to 8 articles.
    News(Vec<Article>),
    /// A file, uploaded then sent by `media_id`.
    File(PathBuf),
    /// An AMR voice file, uploaded then sent by `media_id`.
    Voice(PathBuf),
    /// `card_type` is `text_notice` or `news_notice`; strings with template syntax are rendered.
    TemplateCard(Value),
}

impl Message {
    /// This message's type.
    pub fn kind(&self) -> MsgType {
        match self {
            Message::Text { .. } => MsgType::Text,
            Message::Markdown { .. } => MsgType::Markdown,
            Message::MarkdownV2 { .. } => MsgType::MarkdownV2,
            Message::Image(_) => MsgType::Image,
            Message::News(_) => MsgType::News,
            Message::File(_) => MsgType::File,
            Message::Voice(_) => MsgType::Voice,
            Message::TemplateCard(_) => MsgType::TemplateCard,
        }
    }

    /// The `msgtype` the robot expects for this message.
    pub fn msgtype(&self) -> &'static str {
        self.kind().name()
    }
}

/// The robot's message types, as `msgtype` names them in jobs.toml and on the wire.
#[derive(Debug, Deserialize, schemars::JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MsgType {
    /// `text`.
    Text,
    /// `markdown`.
    Markdown,
    /// `markdown_v2`.
    MarkdownV2,
    /// `image`.
    Image,
    /// `news`.
    News,
    /// `file`.
    File,
    /// `voice`.
    Voice,
    /// `template_card`.
    TemplateCard,
}

impl MsgType {
    /// The `msgtype` string: the one place the names are spelled.
    pub fn name(self) -> &'static str {
        match self {
            MsgType::Text => "text",
            MsgType::Markdown => "markdown",
            MsgType::MarkdownV2 => "markdown_v2",
            MsgType::Image => "image",
            MsgType::News => "news",
            MsgType::File => "file",
            MsgType::Voice => "voice",
            MsgType::TemplateCard => "template_card",
        }
    }

    /// The largest upload of a `file` or `voice` message.
    fn media_limit(self) -> usize {
        if self == MsgType::Voice {
            VOICE_LIMIT
        } else {
            FILE_LIMIT
        }
    }
}

/// The size check of an uploaded file, at load and again at send time (the file may change):
/// the robot takes [`FILE_MIN`] bytes up to the type's limit.
fn check_media_size(kind: MsgType, path: &std::path::Path, size: usize) -> Result<(), BadMedia> {
    let limit = kind.media_limit();
    if (FILE_MIN..=limit).contains(&size) {
        return Ok(());
    }
    Err(BadMedia::FileSize {
        path: path.display().to_string(),
        size,
        kind: kind.name(),
        limit,
    })
}

/// An image or file the robot would refuse, found at load or at send time.
#[derive(Debug, thiserror::Error)]
pub enum BadMedia {
    /// A `file` or `voice` outside the robot's sizes.
    #[error("{path}: {size} bytes; a {kind} must be {FILE_MIN} to {limit} bytes")]
    FileSize {
        /// The file, as jobs.toml resolves it.
        path: String,
        /// Its size in bytes.
        size: usize,
        /// `file` or `voice`.
        kind: &'static str,
        /// The type's largest size.
        limit: usize,
    },
    /// An image over [`IMAGE_LIMIT`].
    #[error("image is {0} bytes, over the robot's limit of {IMAGE_LIMIT} bytes")]
    ImageTooLarge(usize),
    /// An image URL whose `Content-Length` is over [`IMAGE_LIMIT`].
    #[error("image is over the robot's limit of {IMAGE_LIMIT} bytes")]
    ImageTooLong,
    /// Neither signature.
    #[error("image is neither JPG nor PNG")]
    NotJpgOrPng,
    /// The image URL did not answer with the image (its URL left out: it may hold a key).
    #[error("fetching the image failed: {0}")]
    Fetch(reqwest::Error),
}

/// A checked WeCom robot action.
#[derive(Debug)]
pub struct WecomAction {
    /// The robot's webhook URL; its `key` is a secret.
    pub webhook: SecretUrl,
    /// The message, checked at load.
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
    /// Sends this action for the slot in `ctx`; the delivery or why it failed.
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
        let render = |content: &Content, field: &'static str| ctx.render(content, field);
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
                json!({"msgtype": "news", "news": {"articles": articles_json(ctx, articles)?}})
            }
            Message::File(path) | Message::Voice(path) => {
                let kind = self.message.kind();
                let media_id = self.upload(ctx, kind, path).await?;
                let kind = kind.name();
                json!({"msgtype": kind, kind: {"media_id": media_id}})
            }
            Message::TemplateCard(card) => {
                let card = ctx.render_json(card, "template_card")?;
                json!({"msgtype": "template_card", "template_card": card})
            }
        })
    }

    /// Uploads `path` as `kind` (`file` or `voice`) and returns its `media_id`.
    async fn upload(
        &self,
        ctx: &SendContext<'_>,
        kind: MsgType,
        path: &std::path::Path,
    ) -> Result<String, ActionError> {
        let bad = |reason| ActionError::Input {
            field: "media_path",
            reason,
        };
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| bad(format!("{}: {e}", path.display())))?;
        check_media_size(kind, path, bytes.len()).map_err(|e| bad(e.to_string()))?;
        let kind = kind.name();
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

/// A news message's articles, rendered for this slot.
fn articles_json(ctx: &SendContext<'_>, articles: &[Article]) -> Result<Vec<Value>, ActionError> {
    let mut items = Vec::with_capacity(articles.len());
    for a in articles {
        let mut item = json!({"title": ctx.render(&a.title, "articles.title")?, "url": a.url});
        if let Some(d) = &a.description {
            item["description"] = json!(ctx.render(d, "articles.description")?);
        }
        if let Some(p) = &a.picurl {
            item["picurl"] = json!(p);
        }
        items.push(item);
    }
    Ok(items)
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
        ImageSource::Url(url) => fetch(ctx, url).await.map_err(|e| bad(e.to_string()))?,
    };
    check_image(&bytes).map_err(|e| bad(e.to_string()))?;
    Ok(bytes)
}

/// JPG or PNG by signature, at most [`IMAGE_LIMIT`] bytes.
pub fn check_image(bytes: &[u8]) -> Result<(), BadMedia> {
    if bytes.len() > IMAGE_LIMIT {
        return Err(BadMedia::ImageTooLarge(bytes.len()));
    }
    let png = bytes.starts_with(b"\x89PNG\r\n\x1a\n");
    let jpg = bytes.starts_with(&[0xFF, 0xD8, 0xFF]);
    if !(png || jpg) {
        return Err(BadMedia::NotJpgOrPng);
    }
    Ok(())
}

async fn fetch(ctx: &SendContext<'_>, url: &Url) -> Result<Vec<u8>, BadMedia> {
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
        .map_err(|e| BadMedia::Fetch(e.without_url()))?;
    if response
        .content_length()
        .is_some_and(|n| n > IMAGE_LIMIT as u64)
    {
        return Err(BadMedia::ImageTooLong);
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| BadMedia::Fetch(e.without_url()))?;
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
