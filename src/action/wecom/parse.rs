//! Checking a `type = "wecom"` `[job.action]` table at load: only the fields of the chosen
//! `msgtype` set, the files it names present and within WeCom's limits, the URLs and templates
//! checked, into a [`WecomAction`].

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::{
    Article, ImageSource, MAX_ARTICLES, Message, MsgType, WecomAction, check_image,
    check_media_size, check_size, content_limit,
};
use crate::action::check::Check;
use crate::action::template::Content;

/// The robot's documented rate limit, the default `rate`.
const DEFAULT_RATE: &str = "20/min";

/// `type = "wecom"` as written: one flat table for every `msgtype`, as WeCom's own docs lay the
/// fields out; `parse` checks that only the fields of the chosen `msgtype` are set (naming any
/// other) and checks the files it names (present, within WeCom's size limits) at load.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
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
    #[schemars(with = "Option<serde_json::Value>")]
    pub(crate) template_card: Option<toml::Value>,
    pub(crate) rate: Option<String>,
}

/// One `articles` entry of a `news` message, as written; checked like the other URLs.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
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
    if let Content::Static(text) = &content
        && let Err(e) = check_size(name, content_limit(name), text)
    {
        check.error(
            "content",
            e.to_string()
                .trim_start_matches("field content: ")
                .to_owned(),
        );
        return None;
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
