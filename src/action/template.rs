//! Message templates (minijinja). Every template is compiled at load and rendered once against a
//! sample context, so a syntax error or an unknown variable fails at start, naming the job.

use std::sync::Arc;

use chrono_tz::Tz;
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use crate::schedule::Slot;

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
}

impl<'a> TemplateContext<'a> {
    pub fn new(job: &'a str, slot: Slot, zone: Tz, replica: &'a str) -> Self {
        TemplateContext {
            job,
            slot: slot.rfc3339_in(zone),
            slot_utc: slot.rfc3339_utc(),
            slot_ms: slot.epoch_ms(),
            replica,
        }
    }
}

/// A text field that is either fixed at load or rendered per slot.
#[derive(Debug, Clone)]
pub enum Content {
    Static(String),
    Template(TemplateRef),
}

/// A compiled template, by name, in the shared environment.
#[derive(Debug, Clone)]
pub struct TemplateRef {
    name: Arc<str>,
}

/// All templates of one configuration.
#[derive(Debug)]
pub struct Templates {
    env: Environment<'static>,
}

impl Default for Templates {
    fn default() -> Self {
        let mut env = Environment::new();
        // A misspelt variable is an error, not an empty string in a message sent to people.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        Templates { env }
    }
}

/// True when `source` has template syntax; plain text is checked at load, templates at send.
pub fn has_template_syntax(source: &str) -> bool {
    ["{{", "{%", "{#"].iter().any(|t| source.contains(t))
}

impl Templates {
    /// Compiles `source` under `name` and checks it renders; plain text stays static.
    pub fn add(&mut self, name: String, source: String) -> Result<Content, String> {
        if !has_template_syntax(&source) {
            return Ok(Content::Static(source));
        }
        self.env
            .add_template_owned(name.clone(), source)
            .map_err(describe)?;
        let template = TemplateRef { name: name.into() };
        let sample = TemplateContext::new("job", Slot::at(chrono::Utc::now()), chrono_tz::UTC, "replica");
        self.render(&Content::Template(template.clone()), &sample)?;
        Ok(Content::Template(template))
    }

    /// The text of `content` for one slot.
    pub fn render(&self, content: &Content, ctx: &TemplateContext<'_>) -> Result<String, String> {
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

/// minijinja's error with its line, without the full debug dump.
fn describe(err: minijinja::Error) -> String {
    match err.line() {
        Some(line) => format!("template line {line}: {}", err.detail().unwrap_or(&err.kind().to_string())),
        None => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> TemplateContext<'static> {
        let slot = Slot::at(chrono::DateTime::parse_from_rfc3339("2026-11-23T01:30:00Z").unwrap().into());
        TemplateContext::new("standup", slot, chrono_tz::Asia::Shanghai, "replica-1")
    }

    #[test]
    fn renders_job_slot_and_replica() {
        let mut t = Templates::default();
        let c = t.add("a".into(), "{{ job }} at {{ slot }} by {{ replica }}".into()).unwrap();
        assert_eq!(
            t.render(&c, &ctx()).unwrap(),
            "standup at 2026-11-23T09:30:00+08:00 by replica-1"
        );
    }

    #[test]
    fn plain_text_is_static() {
        let mut t = Templates::default();
        assert!(matches!(t.add("a".into(), "hello".into()).unwrap(), Content::Static(_)));
    }

    #[test]
    fn unknown_variable_fails_at_load() {
        let mut t = Templates::default();
        let err = t.add("a".into(), "x\n{{ jbo }}".into()).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn syntax_error_names_the_line() {
        let mut t = Templates::default();
        let err = t.add("a".into(), "ok\n{{ job ".into()).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }
}
