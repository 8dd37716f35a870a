//! Message templates (minijinja). Every template is compiled at load and rendered once against a
//! sample context, so a syntax error or an unknown variable fails at start, naming the job.

use std::sync::Arc;

use chrono_tz::Tz;
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use crate::time::schedule::{Fence, Slot};

/// The variables a template sees.
#[derive(Debug, Serialize)]
pub struct TemplateContext<'a> {
    /// The job's name.
    pub job: &'a str,
    /// The slot, RFC 3339 in the job's zone.
    pub slot: String,
    /// The slot, RFC 3339 in UTC.
    pub slot_utc: String,
    /// The slot as milliseconds since the epoch.
    pub slot_ms: i64,
    /// The replica that won the slot and sends.
    pub replica: &'a str,
    /// The run's fencing token (slot epoch ms plus its handoff number).
    pub fence: i64,
    /// In an alert: what it tells (`failed`, `missed`, `duplicate`, `deadline`, `recovered`);
    /// empty in a job's own action.
    pub outcome: &'a str,
    /// In an alert: its reason (why the slot failed, why it is late, what it recovered
    /// from); empty otherwise.
    pub error: &'a str,
    /// The job's schedule in words, in the replica's locale (`LANG`: `zh_CN.UTF-8` for
    /// Chinese): `工作日 09:30（Asia/Shanghai），法定节假日跳过，调休上班日照常执行`.
    pub schedule_words: &'a str,
}

impl<'a> TemplateContext<'a> {
    /// The context of one slot of `job` on `replica`.
    pub fn new(job: &'a str, slot: Slot, zone: Tz, replica: &'a str, fence: Fence) -> Self {
        TemplateContext {
            job,
            slot: slot.rfc3339_in(zone),
            slot_utc: slot.rfc3339_utc(),
            slot_ms: slot.epoch_ms(),
            replica,
            fence: fence.get(),
            outcome: "",
            error: "",
            schedule_words: "",
        }
    }

    /// The context with the job's schedule in words.
    pub fn in_words(mut self, schedule_words: &'a str) -> Self {
        self.schedule_words = schedule_words;
        self
    }

    /// The context of an alert about this slot.
    pub fn about(mut self, outcome: &'a str, error: &'a str) -> Self {
        self.outcome = outcome;
        self.error = error;
        self
    }

    /// The context templates are checked against at load.
    fn sample() -> Self {
        let slot = Slot::at(chrono::Utc::now());
        TemplateContext::new("job", slot, chrono_tz::UTC, "replica", Fence::new(slot, 0))
            .in_words("09:30 every day (UTC)")
    }
}

/// A text field that is either fixed at load or rendered per slot.
#[derive(Debug, Clone)]
pub enum Content {
    /// Plain text, checked at load and sent as it is.
    Static(String),
    /// A compiled template, rendered per slot.
    Template(TemplateRef),
}

/// A compiled template, by name, in the shared environment.
#[derive(Debug, Clone)]
pub struct TemplateRef {
    name: Arc<str>,
}

/// All templates of one configuration.
pub struct Templates {
    env: Environment<'static>,
}

/// Names only: the environment holds `env`, every variable of the process (secrets included).
impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.env.templates().map(|(name, _)| name).collect();
        f.debug_struct("Templates")
            .field("templates", &names)
            .finish_non_exhaustive()
    }
}

impl Default for Templates {
    fn default() -> Self {
        let mut env = Environment::new();
        // A misspelt variable is an error, not an empty string in a message sent to people.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.add_filter("date", date_filter);
        Templates { env }
    }
}

/// `{{ slot | date("%Y-%m-%d %H:%M") }}`: formats an RFC 3339 time in its own offset (for
/// `slot`, the job's zone) with chrono's strftime syntax.
fn date_filter(value: String, format: String) -> Result<String, minijinja::Error> {
    use std::fmt::Write as _;
    let bad = |what: String| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, what);
    let time = chrono::DateTime::parse_from_rfc3339(&value)
        .map_err(|e| bad(format!("date: {value:?} is not an RFC 3339 time: {e}")))?;
    let mut out = String::new();
    // An invalid strftime item makes chrono's Display fail; write! turns that into an error.
    write!(out, "{}", time.format(&format))
        .map_err(|_| bad(format!("date: invalid format {format:?}")))?;
    Ok(out)
}

/// True when `source` has template syntax; plain text is checked at load, templates at send.
pub fn has_template_syntax(source: &str) -> bool {
    ["{{", "{%", "{#"].iter().any(|t| source.contains(t))
}

impl Templates {
    /// Makes the process environment available to templates as `env` (`{{ env.HOSTNAME }}`).
    pub fn set_env(&mut self, vars: std::collections::BTreeMap<String, String>) {
        self.env
            .add_global("env", minijinja::Value::from_serialize(&vars));
    }

    /// Checks every string of `value` that has template syntax compiles and renders.
    pub fn check_json(&self, value: &serde_json::Value) -> Result<(), TemplateError> {
        self.render_json(value, &TemplateContext::sample())
            .map(drop)
    }

    /// `value` with every string that has template syntax rendered (cards, blocks, posts).
    pub fn render_json(
        &self,
        value: &serde_json::Value,
        ctx: &TemplateContext<'_>,
    ) -> Result<serde_json::Value, TemplateError> {
        use serde_json::Value as J;
        Ok(match value {
            J::String(s) if has_template_syntax(s) => {
                J::String(self.env.render_str(s, ctx).map_err(describe)?)
            }
            J::Array(items) => J::Array(
                items
                    .iter()
                    .map(|v| self.render_json(v, ctx))
                    .collect::<Result<_, _>>()?,
            ),
            J::Object(map) => J::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.render_json(v, ctx)?)))
                    .collect::<Result<_, TemplateError>>()?,
            ),
            other => other.clone(),
        })
    }

    /// Compiles `source` under `name` and checks it renders; plain text stays static.
    pub fn add(&mut self, name: String, source: String) -> Result<Content, TemplateError> {
        if !has_template_syntax(&source) {
            return Ok(Content::Static(source));
        }
        self.env
            .add_template_owned(name.clone(), source.clone())
            .map_err(describe)?;
        self.env
            .get_template(&name)
            .and_then(|tpl| tpl.render(TemplateContext::sample()))
            .map_err(|e| describe_in(e, &source))?;
        Ok(Content::Template(TemplateRef { name: name.into() }))
    }

    /// The text of `content` for one slot.
    pub fn render(
        &self,
        content: &Content,
        ctx: &TemplateContext<'_>,
    ) -> Result<String, TemplateError> {
        match content {
            Content::Static(text) => Ok(text.clone()),
            Content::Template(t) => self
                .env
                .get_template(&t.name)
                .and_then(|tpl| tpl.render(ctx))
                .map_err(describe),
        }
    }
}

/// A template that does not compile or render; the message is minijinja's, with its line and
/// the undefined name, without the full debug dump.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(String);

/// minijinja's error with its line, without the full debug dump.
fn describe(err: minijinja::Error) -> TemplateError {
    TemplateError(describe_text(&err))
}

fn describe_text(err: &minijinja::Error) -> String {
    match err.line() {
        Some(line) => format!(
            "template line {line}: {}",
            err.detail().unwrap_or(&err.kind().to_string())
        ),
        None => err.to_string(),
    }
}

/// [`describe`], naming the undefined expression (`{{ slto }}`) from the template's source.
fn describe_in(err: minijinja::Error, source: &str) -> TemplateError {
    let undefined = (err.kind() == minijinja::ErrorKind::UndefinedError)
        .then(|| err.range().and_then(|r| source.get(r)))
        .flatten()
        .map(str::to_owned);
    let text = describe_text(&err);
    TemplateError(match undefined {
        Some(what) => format!(
            "{text}: `{what}` (templates see job, slot, slot_utc, slot_ms, replica and env)"
        ),
        None => text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> TemplateContext<'static> {
        let slot = Slot::at(
            chrono::DateTime::parse_from_rfc3339("2026-11-23T01:30:00Z")
                .unwrap()
                .into(),
        );
        TemplateContext::new(
            "standup",
            slot,
            chrono_tz::Asia::Shanghai,
            "replica-1",
            Fence::new(slot, 1),
        )
    }

    #[test]
    fn renders_job_slot_and_replica() {
        let mut t = Templates::default();
        let c = t
            .add(
                "a".into(),
                "{{ job }} at {{ slot }} by {{ replica }} fence {{ fence }}".into(),
            )
            .unwrap();
        assert_eq!(
            t.render(&c, &ctx()).unwrap(),
            "standup at 2026-11-23T09:30:00+08:00 by replica-1 fence 1795397400001"
        );
    }

    #[test]
    fn date_filter_formats_in_the_job_zone() {
        let mut t = Templates::default();
        let c = t
            .add("a".into(), "{{ slot | date(\"%Y-%m-%d %H:%M\") }}".into())
            .unwrap();
        assert_eq!(t.render(&c, &ctx()).unwrap(), "2026-11-23 09:30");
        assert!(
            t.add("b".into(), "{{ slot | date(\"%Q\") }}".into())
                .is_err()
        );
    }

    #[test]
    fn env_is_available() {
        let mut t = Templates::default();
        t.set_env([("TEAM".to_owned(), "core".to_owned())].into());
        let c = t.add("a".into(), "{{ env.TEAM }}".into()).unwrap();
        assert_eq!(t.render(&c, &ctx()).unwrap(), "core");
    }

    #[test]
    fn json_strings_are_rendered() {
        let t = Templates::default();
        let v = serde_json::json!({"a": ["{{ job }}", 1], "b": "plain"});
        assert_eq!(
            t.render_json(&v, &ctx()).unwrap(),
            serde_json::json!({"a": ["standup", 1], "b": "plain"})
        );
    }

    #[test]
    fn plain_text_is_static() {
        let mut t = Templates::default();
        assert!(matches!(
            t.add("a".into(), "hello".into()).unwrap(),
            Content::Static(_)
        ));
    }

    #[test]
    fn unknown_variable_fails_at_load() {
        let mut t = Templates::default();
        let err = t
            .add("a".into(), "x\n{{ jbo }}".into())
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn syntax_error_names_the_line() {
        let mut t = Templates::default();
        let err = t
            .add("a".into(), "ok\n{{ job ".into())
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
