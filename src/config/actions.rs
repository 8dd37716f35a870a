//! Checking a job's `[job.action]` into an [`Action`]: each type's fields, each message type's
//! required and forbidden fields, sizes known at load, URLs, signing secrets and rate budgets.

use std::path::{Path, PathBuf};

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Method;
use serde_json::{json, Value as Json};
use toml::Value;
use url::Url;

use super::raw::{
    RawAction, RawCommand, RawDingTalk, RawDingTalkMsgType, RawFeishu, RawFeishuMsgType, RawHttp,
    RawLog, RawMsgType, RawSlack, RawWecom,
};
use super::{ConfigError, Loader, Section};
use crate::action::command::CommandAction;
use crate::action::deliver::OnUncertain;
use crate::action::dingtalk::DingTalkAction;
use crate::action::feishu::FeishuAction;
use crate::action::http::HttpAction;
use crate::action::log::LogAction;
use crate::action::rate::{Budget, Rate};
use crate::action::slack::SlackAction;
use crate::action::template::Content;
use crate::action::wecom::{self, Article, ImageSource, Message, WecomAction};
use crate::action::Action;
use crate::secret::{Secret, SecretUrl};

/// The robots' documented rate limits, the default `rate` of each.
const WECOM_RATE: &str = "20/min";
const DINGTALK_RATE: &str = "20/min";
const FEISHU_RATE: &str = "100/min";
const SLACK_RATE: &str = "1/s";

/// `*_file` fields whose contents are secrets (scrubbed from logs and errors).
const SECRET_FILE_FIELDS: [&str; 4] = ["webhook", "secret", "url", "token"];

/// Who checks one action: the loader, plus the job and file it belongs to.
pub(super) struct ActionCheck<'l, 'e> {
    pub loader: &'l mut Loader<'e>,
    pub job: &'l str,
    pub section: Section,
    pub config_dir: PathBuf,
}

impl ActionCheck<'_, '_> {
    fn error(&mut self, field: &str, message: impl Into<String>) {
        self.loader.errors.push(ConfigError::field(
            self.section.clone(),
            format!("action.{field}"),
            message,
        ));
    }

    pub fn action(&mut self, raw: RawAction) -> Option<Action> {
        match raw {
            RawAction::Wecom(a) => self.wecom(a).map(Action::Wecom),
            RawAction::DingTalk(a) => self.dingtalk(a).map(Action::DingTalk),
            RawAction::Feishu(a) => self.feishu(a).map(Action::Feishu),
            RawAction::Slack(a) => self.slack(a).map(Action::Slack),
            RawAction::Http(a) => self.http(a).map(Action::Http),
            RawAction::Command(a) => self.command(a).map(Action::Command),
            RawAction::Log(a) => self.log(a).map(Action::Log),
        }
    }

    /// Fails on each field that is set but not used by `what`.
    fn unused(&mut self, what: &str, fields: &[(&str, bool)]) -> bool {
        let mut ok = true;
        for (name, set) in fields {
            if *set {
                ok = false;
                self.error(name, format!("not used by {what}"));
            }
        }
        ok
    }

    fn required<T>(&mut self, what: &str, field: &str, value: Option<T>) -> Option<T> {
        if value.is_none() {
            self.error(field, format!("required by {what}"));
        }
        value
    }

    fn wecom(&mut self, raw: RawWecom) -> Option<WecomAction> {
        let webhook = self.url(&raw.webhook, "webhook");
        let budget = self.budget(raw.rate.as_deref(), WECOM_RATE, &raw.webhook);
        let message = self.wecom_message(&raw);
        Some(WecomAction {
            webhook: webhook?,
            message: message?,
            budget: budget?,
        })
    }

    fn wecom_message(&mut self, raw: &RawWecom) -> Option<Message> {
        let what = format!("msgtype {:?}", msgtype_name(raw.msgtype));
        let text_like = matches!(
            raw.msgtype,
            RawMsgType::Text | RawMsgType::Markdown | RawMsgType::MarkdownV2
        );
        let fields = [
            ("content", raw.content.is_some() && !text_like),
            (
                "mentioned_list",
                raw.mentioned_list.is_some() && raw.msgtype != RawMsgType::Text,
            ),
            (
                "mentioned_mobile_list",
                raw.mentioned_mobile_list.is_some() && raw.msgtype != RawMsgType::Text,
            ),
            (
                "image_path",
                raw.image_path.is_some() && raw.msgtype != RawMsgType::Image,
            ),
            (
                "image_url",
                raw.image_url.is_some() && raw.msgtype != RawMsgType::Image,
            ),
            (
                "articles",
                raw.articles.is_some() && raw.msgtype != RawMsgType::News,
            ),
            (
                "media_path",
                raw.media_path.is_some()
                    && !matches!(raw.msgtype, RawMsgType::File | RawMsgType::Voice),
            ),
            (
                "template_card",
                raw.template_card.is_some() && raw.msgtype != RawMsgType::TemplateCard,
            ),
        ];
        if !self.unused(&what, &fields) {
            return None;
        }
        match raw.msgtype {
            RawMsgType::Text | RawMsgType::Markdown | RawMsgType::MarkdownV2 => {
                self.wecom_text(raw, &what)
            }
            RawMsgType::Image => self.wecom_image(raw, &what).map(Message::Image),
            RawMsgType::News => self.wecom_news(raw, &what).map(Message::News),
            RawMsgType::File | RawMsgType::Voice => {
                let path = self.required(&what, "media_path", raw.media_path.clone())?;
                let path = self.existing_file(&path, "media_path")?;
                // Checked now as images are (and again at send time: the file may change).
                let limit = if raw.msgtype == RawMsgType::Voice {
                    wecom::VOICE_LIMIT
                } else {
                    wecom::FILE_LIMIT
                };
                let size = std::fs::metadata(&path).map_or(0, |m| m.len() as usize);
                if !(wecom::FILE_MIN..=limit).contains(&size) {
                    let min = wecom::FILE_MIN;
                    let kind = msgtype_name(raw.msgtype);
                    let reason = format!("{size} bytes; a {kind} must be {min} to {limit} bytes");
                    self.error("media_path", format!("{}: {reason}", path.display()));
                    return None;
                }
                Some(if raw.msgtype == RawMsgType::File {
                    Message::File(path)
                } else {
                    Message::Voice(path)
                })
            }
            RawMsgType::TemplateCard => self.wecom_card(raw, &what).map(Message::TemplateCard),
        }
    }

    fn wecom_text(&mut self, raw: &RawWecom, what: &str) -> Option<Message> {
        let source = self.required(what, "content", raw.content.clone())?;
        let name = msgtype_name(raw.msgtype);
        let content = self.content("content", source)?;
        if let Content::Static(text) = &content {
            if let Err(e) = wecom::check_size(name, wecom::content_limit(name), text) {
                self.error(
                    "content",
                    e.to_string()
                        .trim_start_matches("field content: ")
                        .to_owned(),
                );
                return None;
            }
        }
        Some(match raw.msgtype {
            RawMsgType::Text => Message::Text {
                content,
                mentioned_list: raw.mentioned_list.clone().unwrap_or_default(),
                mentioned_mobile_list: raw.mentioned_mobile_list.clone().unwrap_or_default(),
            },
            RawMsgType::Markdown => Message::Markdown { content },
            _ => Message::MarkdownV2 { content },
        })
    }

    fn wecom_image(&mut self, raw: &RawWecom, what: &str) -> Option<ImageSource> {
        match (&raw.image_path, &raw.image_url) {
            (Some(path), None) => {
                let path = self.existing_file(path, "image_path")?;
                match std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| wecom::check_image(&b))
                {
                    Ok(()) => Some(ImageSource::Path(path)),
                    Err(e) => {
                        self.error("image_path", format!("{}: {e}", path.display()));
                        None
                    }
                }
            }
            (None, Some(url)) => self
                .url(url, "image_url")
                .map(|u| ImageSource::Url(u.expose().clone())),
            _ => {
                self.error(
                    "image_path",
                    format!("{what} needs exactly one of image_path and image_url"),
                );
                None
            }
        }
    }

    fn wecom_news(&mut self, raw: &RawWecom, what: &str) -> Option<Vec<Article>> {
        let articles = self.required(what, "articles", raw.articles.as_ref())?;
        if articles.is_empty() || articles.len() > wecom::MAX_ARTICLES {
            self.error(
                "articles",
                format!(
                    "{} article(s); news takes 1 to {}",
                    articles.len(),
                    wecom::MAX_ARTICLES
                ),
            );
            return None;
        }
        let mut out = Vec::new();
        for (i, a) in articles.iter().enumerate() {
            let title = self.content(&format!("articles[{i}].title"), a.title.clone());
            let description = match &a.description {
                Some(d) => Some(self.content(&format!("articles[{i}].description"), d.clone())?),
                None => None,
            };
            let url = self.url(&a.url, &format!("articles[{i}].url"));
            out.push(Article {
                title: title?,
                description,
                url: url?.expose().to_string(),
                picurl: a.picurl.clone(),
            });
        }
        Some(out)
    }

    fn wecom_card(&mut self, raw: &RawWecom, what: &str) -> Option<Json> {
        let card = self.required(what, "template_card", raw.template_card.clone())?;
        let card = self.json(card, "template_card")?;
        match card.get("card_type").and_then(Json::as_str) {
            Some("text_notice" | "news_notice") => {}
            other => {
                self.error(
                    "template_card.card_type",
                    format!("{other:?}: must be \"text_notice\" or \"news_notice\""),
                );
                return None;
            }
        }
        if card.get("card_action").is_none() {
            self.error(
                "template_card.card_action",
                "required by the robot for every template card (type 1: url, 2: app)",
            );
            return None;
        }
        Some(card)
    }

    fn dingtalk(&mut self, raw: RawDingTalk) -> Option<DingTalkAction> {
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
        if !self.unused(&what, &fields) {
            return None;
        }
        let webhook = self.url(&raw.webhook, "webhook");
        let budget = self.budget(raw.rate.as_deref(), DINGTALK_RATE, &raw.webhook);
        let message = self.dingtalk_message(&raw, &what);
        let message = self.check_json_templates(message?, "message")?;
        Some(DingTalkAction {
            webhook: webhook?,
            secret: raw.secret.map(Secret::new),
            message,
            budget: budget?,
        })
    }

    fn dingtalk_message(&mut self, raw: &RawDingTalk, what: &str) -> Option<Json> {
        let at = json!({
            "atMobiles": raw.at_mobiles.clone().unwrap_or_default(),
            "atUserIds": raw.at_user_ids.clone().unwrap_or_default(),
            "isAtAll": raw.at_all.unwrap_or(false),
        });
        match raw.msgtype {
            RawDingTalkMsgType::Text => {
                let content = self.required(what, "content", raw.content.clone())?;
                Some(json!({"msgtype": "text", "text": {"content": content}, "at": at}))
            }
            RawDingTalkMsgType::Markdown => {
                let (title, text) = (
                    self.required(what, "title", raw.title.clone()),
                    self.required(what, "text", raw.text.clone()),
                );
                Some(
                    json!({"msgtype": "markdown", "markdown": {"title": title?, "text": text?}, "at": at}),
                )
            }
            RawDingTalkMsgType::Link => {
                let title = self.required(what, "title", raw.title.clone());
                let text = self.required(what, "text", raw.text.clone());
                let url = self.required(what, "message_url", raw.message_url.clone());
                let mut link = json!({"title": title?, "text": text?, "messageUrl": url?});
                if let Some(pic) = &raw.pic_url {
                    link["picUrl"] = json!(pic);
                }
                Some(json!({"msgtype": "link", "link": link}))
            }
            RawDingTalkMsgType::ActionCard => self.dingtalk_action_card(raw, what),
        }
    }

    fn dingtalk_action_card(&mut self, raw: &RawDingTalk, what: &str) -> Option<Json> {
        let title = self.required(what, "title", raw.title.clone());
        let text = self.required(what, "text", raw.text.clone());
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
                self.error(
                    "buttons",
                    format!(
                        "{what} needs single_title with single_url, or a non-empty buttons list"
                    ),
                );
                return None;
            }
        }
        Some(json!({"msgtype": "actionCard", "actionCard": card}))
    }

    fn feishu(&mut self, raw: RawFeishu) -> Option<FeishuAction> {
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
        if !self.unused(&what, &fields) {
            return None;
        }
        let webhook = self.url(&raw.webhook, "webhook");
        let budget = self.budget(raw.rate.as_deref(), FEISHU_RATE, &raw.webhook);
        let message = match raw.msg_type {
            M::Text => self
                .required(&what, "text", raw.text.clone())
                .map(|t| json!({"msg_type": "text", "content": {"text": t}})),
            M::Post => {
                let post = self
                    .required(&what, "post", raw.post.clone())
                    .and_then(|p| self.json(p, "post"));
                post.map(|p| json!({"msg_type": "post", "content": {"post": p}}))
            }
            M::Interactive => {
                let card = self
                    .required(&what, "card", raw.card.clone())
                    .and_then(|c| self.json(c, "card"));
                card.map(|c| json!({"msg_type": "interactive", "card": c}))
            }
        };
        let message = self.check_json_templates(message?, "message")?;
        Some(FeishuAction {
            webhook: webhook?,
            secret: raw.secret.map(Secret::new),
            message,
            budget: budget?,
        })
    }

    fn slack(&mut self, raw: RawSlack) -> Option<SlackAction> {
        let webhook = self.url(&raw.webhook, "webhook");
        let budget = self.budget(raw.rate.as_deref(), SLACK_RATE, &raw.webhook);
        let mut message = json!({});
        if let Some(text) = &raw.text {
            message["text"] = json!(text);
        }
        if let Some(blocks) = raw.blocks.clone() {
            let blocks = self.json(blocks, "blocks")?;
            if !blocks.is_array() {
                self.error(
                    "blocks",
                    "must be an array of block tables ([[job.action.blocks]])",
                );
                return None;
            }
            message["blocks"] = blocks;
        }
        if raw.text.is_none() && raw.blocks.is_none() {
            self.error("text", "a Slack message needs text, blocks, or both");
            return None;
        }
        let message = self.check_json_templates(message, "text")?;
        Some(SlackAction {
            webhook: webhook?,
            message,
            budget: budget?,
        })
    }

    fn http(&mut self, raw: RawHttp) -> Option<HttpAction> {
        let url = self.url(&raw.url, "url");
        let method = self.method(raw.method.as_deref());
        let headers = self.headers(raw.headers);
        let body = match raw.body {
            Some(body) => Some(self.content("body", body)?),
            None => None,
        };
        let budget = match &raw.rate {
            Some(rate) => Some(self.budget(Some(rate), "", &raw.url)?),
            None => None,
        };
        let success = self.status_range(raw.success_status.as_deref())?;
        let success_json = match raw.success_json {
            Some(rule) => Some((rule.field, self.json(rule.equals, "success_json.equals")?)),
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
                Some(false) => OnUncertain::Stop,
                Some(true) | None => OnUncertain::Resend,
            },
        })
    }

    fn method(&mut self, raw: Option<&str>) -> Option<Method> {
        match raw.unwrap_or("POST").to_ascii_uppercase().as_str() {
            m @ ("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD") => {
                Method::from_bytes(m.as_bytes()).ok()
            }
            other => {
                self.error(
                    "method",
                    format!("unknown method {other:?} (GET, POST, PUT, PATCH, DELETE or HEAD)"),
                );
                None
            }
        }
    }

    /// `"200-299"` or `"204"`.
    fn status_range(&mut self, raw: Option<&str>) -> Option<std::ops::RangeInclusive<u16>> {
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
                self.error(
                    "success_status",
                    format!("{raw:?} is not a status or range such as \"200-299\""),
                );
                None
            }
        }
    }

    fn headers(
        &mut self,
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
                    self.error(&field, "not a valid HTTP header name");
                }
                (_, Err(_)) => {
                    ok = false;
                    self.error(&field, "not a valid HTTP header value");
                }
            }
        }
        ok.then_some(headers)
    }

    fn command(&mut self, raw: RawCommand) -> Option<CommandAction> {
        let argv = match (raw.argv, raw.shell) {
            (Some(argv), None) if !argv.is_empty() => argv,
            (None, Some(script)) => vec!["sh".to_owned(), "-c".to_owned(), script],
            _ => {
                self.error("argv", "give either argv = [\"program\", \"arg\", …] (no shell) or shell = \"a script\"");
                return None;
            }
        };
        let argv = self.check_json_templates(json!(argv), "argv")?;
        Some(CommandAction { argv })
    }

    fn log(&mut self, raw: RawLog) -> Option<LogAction> {
        Some(LogAction {
            content: self.content("content", raw.content)?,
        })
    }

    fn content(&mut self, field: &str, source: String) -> Option<Content> {
        match self
            .loader
            .templates
            .add(format!("{}.{field}", self.job), source)
        {
            Ok(content) => Some(content),
            Err(e) => {
                // The message may quote the template, which may hold an expanded ${VAR}.
                let e = self.loader.scrubber.scrub(&e);
                self.error(field, e);
                None
            }
        }
    }

    fn check_json_templates(&mut self, value: Json, field: &str) -> Option<Json> {
        match self.loader.templates.check_json(&value) {
            Ok(()) => Some(value),
            Err(e) => {
                self.error(field, e);
                None
            }
        }
    }

    fn json(&mut self, value: Value, field: &str) -> Option<Json> {
        serde_json::to_value(value)
            .map_err(|e| self.error(field, format!("cannot be sent as JSON: {e}")))
            .ok()
    }

    fn budget(&mut self, raw: Option<&str>, default: &str, webhook: &str) -> Option<Budget> {
        match raw.unwrap_or(default).parse::<Rate>() {
            Ok(rate) => Some(Budget::new(rate, webhook)),
            Err(e) => {
                self.error("rate", e);
                None
            }
        }
    }

    /// A file named relative to jobs.toml that must exist now (it is read again at send time).
    fn existing_file(&mut self, path: &Path, field: &str) -> Option<PathBuf> {
        let full = self.config_dir.join(path);
        if full.is_file() {
            return Some(full);
        }
        self.error(field, format!("{}: no such file", full.display()));
        None
    }

    /// An http(s) URL; its text may hold a key, so the error never repeats it.
    fn url(&mut self, raw: &str, field: &str) -> Option<SecretUrl> {
        let problem = match Url::parse(raw) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => {
                let url = SecretUrl::new(url);
                for part in url.secret_parts() {
                    self.loader.scrubber.add(&part);
                }
                return Some(url);
            }
            Ok(url) => format!("scheme {:?} is not http or https", url.scheme()),
            Err(_) if !raw.contains('/') && !raw.contains(' ') && raw.len() >= 16 => {
                "not a URL; it looks like a key alone: write the full webhook URL \
                 (https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY)"
                    .to_owned()
            }
            Err(e) => format!("not a URL ({e})"),
        };
        self.error(field, problem);
        None
    }
}

/// Replaces each `NAME_file = "path"` in the action table by `NAME = <the file's contents>`
/// (the Docker and Kubernetes secrets convention), reading relative to jobs.toml.
pub(super) fn read_file_fields(
    loader: &mut Loader<'_>,
    action: &mut Value,
    section: &Section,
    config_dir: &Path,
) -> Option<()> {
    let Value::Table(table) = action else {
        return Some(());
    };
    let file_keys: Vec<String> = table
        .keys()
        .filter(|k| k.ends_with("_file"))
        .cloned()
        .collect();
    let mut ok = true;
    for key in file_keys {
        let name = key.trim_end_matches("_file").to_owned();
        let field = format!("action.{key}");
        let Some(Value::String(path)) = table.remove(&key) else {
            loader.errors.push(ConfigError::field(
                section.clone(),
                field,
                "must be a file path",
            ));
            ok = false;
            continue;
        };
        if table.contains_key(&name) {
            loader.errors.push(ConfigError::field(
                section.clone(),
                field,
                format!("give {name} or {key}, not both"),
            ));
            ok = false;
            continue;
        }
        let full = config_dir.join(&path);
        match std::fs::read_to_string(&full) {
            Ok(text) => {
                let text = text.trim_end_matches(['\n', '\r']).to_owned();
                if SECRET_FILE_FIELDS.contains(&name.as_str()) {
                    loader.scrubber.add(&text);
                }
                table.insert(name, Value::String(text));
            }
            Err(e) => {
                loader.errors.push(ConfigError::field(
                    section.clone(),
                    field,
                    format!("{}: {}", full.display(), super::read_error(&e)),
                ));
                ok = false;
            }
        }
    }
    ok.then_some(())
}

fn msgtype_name(t: RawMsgType) -> &'static str {
    match t {
        RawMsgType::Text => "text",
        RawMsgType::Markdown => "markdown",
        RawMsgType::MarkdownV2 => "markdown_v2",
        RawMsgType::Image => "image",
        RawMsgType::News => "news",
        RawMsgType::File => "file",
        RawMsgType::Voice => "voice",
        RawMsgType::TemplateCard => "template_card",
    }
}

fn dingtalk_name(t: RawDingTalkMsgType) -> &'static str {
    match t {
        RawDingTalkMsgType::Text => "text",
        RawDingTalkMsgType::Markdown => "markdown",
        RawDingTalkMsgType::Link => "link",
        RawDingTalkMsgType::ActionCard => "actionCard",
    }
}
