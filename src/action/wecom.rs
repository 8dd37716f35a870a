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
use crate::action::check::Check;
use crate::secret::SecretUrl;

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
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
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

// --- Checking the `[job.action]` table (at load) ---

/// The robot's documented rate limit, the default `rate`.
const DEFAULT_RATE: &str = "20/min";

/// `type = "wecom"` as written: one flat table for every `msgtype`, as WeCom's own docs lay the
/// fields out; `parse` checks that only the fields of the chosen `msgtype` are set (naming any
/// other) and checks the files it names (present, within WeCom's size limits) at load.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWecom {
    pub(crate) webhook: String,
    pub(crate) msgtype: MsgType,
    pub(crate) content: Option<String>,
    pub(crate) mentioned_list: Option<Vec<String>>,
    pub(crate) mentioned_mobile_list: Option<Vec<String>>,
    pub(crate) image_path: Option<PathBuf>,
    pub(crate) image_url: Option<String>,
    pub(crate) articles: Option<Vec<RawArticle>>,
    pub(crate) media_path: Option<PathBuf>,
    pub(crate) template_card: Option<toml::Value>,
    pub(crate) rate: Option<String>,
}

/// One `articles` entry of a `news` message, as written; checked like the other URLs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawArticle {
    pub(crate) title: String,
    pub(crate) description: Option<String>,
    pub(crate) url: String,
    pub(crate) picurl: Option<String>,
}

/// Checks a `type = "wecom"` action table; errors go to `check`.
pub(crate) fn parse(check: &mut impl Check, raw: RawWecom) -> Option<WecomAction> {
    let webhook = check.url(&raw.webhook, "webhook");
    let budget = check.budget(raw.rate.as_deref(), DEFAULT_RATE, &raw.webhook);
    let message = wecom_message(check, &raw);
    Some(WecomAction {
        webhook: webhook?,
        message: message?,
        budget: budget?,
    })
}

/// `msgtype` and the fields that go with it.
fn wecom_message(check: &mut impl Check, raw: &RawWecom) -> Option<Message> {
    let what = format!("msgtype {:?}", raw.msgtype.name());
    if !check.unused(&what, &unused_fields(raw)) {
        return None;
    }
    match raw.msgtype {
        MsgType::Text | MsgType::Markdown | MsgType::MarkdownV2 => wecom_text(check, raw, &what),
        MsgType::Image => wecom_image(check, raw, &what).map(Message::Image),
        MsgType::News => wecom_news(check, raw, &what).map(Message::News),
        MsgType::File | MsgType::Voice => wecom_media(check, raw, &what),
        MsgType::TemplateCard => wecom_card(check, raw, &what).map(Message::TemplateCard),
    }
}

/// Each field, and whether it is set although `msgtype` does not use it.
fn unused_fields(raw: &RawWecom) -> [(&'static str, bool); 8] {
    let t = raw.msgtype;
    let text_like = matches!(t, MsgType::Text | MsgType::Markdown | MsgType::MarkdownV2);
    [
        ("content", raw.content.is_some() && !text_like),
        (
            "mentioned_list",
            raw.mentioned_list.is_some() && t != MsgType::Text,
        ),
        (
            "mentioned_mobile_list",
            raw.mentioned_mobile_list.is_some() && t != MsgType::Text,
        ),
        (
            "image_path",
            raw.image_path.is_some() && t != MsgType::Image,
        ),
        ("image_url", raw.image_url.is_some() && t != MsgType::Image),
        ("articles", raw.articles.is_some() && t != MsgType::News),
        (
            "media_path",
            raw.media_path.is_some() && !matches!(t, MsgType::File | MsgType::Voice),
        ),
        (
            "template_card",
            raw.template_card.is_some() && t != MsgType::TemplateCard,
        ),
    ]
}

/// `file` and `voice`: a file next to jobs.toml, its size checked now as images are.
fn wecom_media(check: &mut impl Check, raw: &RawWecom, what: &str) -> Option<Message> {
    let path = check.required(what, "media_path", raw.media_path.clone())?;
    let path = check.existing_file(&path, "media_path")?;
    let size = std::fs::metadata(&path).map_or(0, |m| m.len() as usize);
    if let Err(e) = check_media_size(raw.msgtype, &path, size) {
        check.error("media_path", e.to_string());
        return None;
    }
    Some(if raw.msgtype == MsgType::File {
        Message::File(path)
    } else {
        Message::Voice(path)
    })
}

fn wecom_text(check: &mut impl Check, raw: &RawWecom, what: &str) -> Option<Message> {
    let source = check.required(what, "content", raw.content.clone())?;
    let name = raw.msgtype.name();
    let content = check.content("content", source)?;
    if let Content::Static(text) = &content {
        if let Err(e) = check_size(name, content_limit(name), text) {
            check.error(
                "content",
                e.to_string()
                    .trim_start_matches("field content: ")
                    .to_owned(),
            );
            return None;
        }
    }
    Some(match raw.msgtype {
        MsgType::Text => Message::Text {
            content,
            mentioned_list: raw.mentioned_list.clone().unwrap_or_default(),
            mentioned_mobile_list: raw.mentioned_mobile_list.clone().unwrap_or_default(),
        },
        MsgType::Markdown => Message::Markdown { content },
        _ => Message::MarkdownV2 { content },
    })
}

fn wecom_image(check: &mut impl Check, raw: &RawWecom, what: &str) -> Option<ImageSource> {
    match (&raw.image_path, &raw.image_url) {
        (Some(path), None) => {
            let path = check.existing_file(path, "image_path")?;
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| check_image(&b).map_err(|e| e.to_string()))
            {
                Ok(()) => Some(ImageSource::Path(path)),
                Err(e) => {
                    check.error("image_path", format!("{}: {e}", path.display()));
                    None
                }
            }
        }
        (None, Some(url)) => check
            .url(url, "image_url")
            .map(|u| ImageSource::Url(u.expose().clone())),
        _ => {
            check.error(
                "image_path",
                format!("{what} needs exactly one of image_path and image_url"),
            );
            None
        }
    }
}

fn wecom_news(check: &mut impl Check, raw: &RawWecom, what: &str) -> Option<Vec<Article>> {
    let articles = check.required(what, "articles", raw.articles.as_ref())?;
    if articles.is_empty() || articles.len() > MAX_ARTICLES {
        check.error(
            "articles",
            format!(
                "{} article(s); news takes 1 to {}",
                articles.len(),
                MAX_ARTICLES
            ),
        );
        return None;
    }
    let mut out = Vec::new();
    for (i, a) in articles.iter().enumerate() {
        let title = check.content(&format!("articles[{i}].title"), a.title.clone());
        let description = match &a.description {
            Some(d) => Some(check.content(&format!("articles[{i}].description"), d.clone())?),
            None => None,
        };
        let url = check.url(&a.url, &format!("articles[{i}].url"));
        out.push(Article {
            title: title?,
            description,
            url: url?.expose().to_string(),
            picurl: a.picurl.clone(),
        });
    }
    Some(out)
}

fn wecom_card(check: &mut impl Check, raw: &RawWecom, what: &str) -> Option<Value> {
    let card = check.required(what, "template_card", raw.template_card.clone())?;
    let card = check.json(card, "template_card")?;
    match card.get("card_type").and_then(Value::as_str) {
        Some("text_notice" | "news_notice") => {}
        other => {
            check.error(
                "template_card.card_type",
                format!("{other:?}: must be \"text_notice\" or \"news_notice\""),
            );
            return None;
        }
    }
    if card.get("card_action").is_none() {
        check.error(
            "template_card.card_action",
            "required by the robot for every template card (type 1: url, 2: app)",
        );
        return None;
    }
    Some(card)
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
