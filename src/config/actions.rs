//! Checking a job's `[job.action]` into an [`Action`]: the dispatcher to each action's own
//! `parse` (in `crate::action::*`), and the checks they share ([`ActionCheck`]): required and
//! unused fields, templates, URLs, files next to jobs.toml and rate budgets.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use toml::Value;
use url::Url;

use super::raw::RawAction;
use super::{ConfigError, Loader, Section};
use crate::action::check::Check;
use crate::action::rate::{Budget, Rate};
use crate::action::template::Content;
use crate::action::{Action, command, http, log, slack};
#[cfg(feature = "robots")]
use crate::action::{dingtalk, feishu, wecom};
use crate::secret::SecretUrl;

/// `*_file` fields whose contents are secrets (scrubbed from logs and errors).
const SECRET_FILE_FIELDS: [&str; 4] = ["webhook", "secret", "url", "token"];

/// Who checks one action: the loader, plus the job and file it belongs to.
pub(crate) struct ActionCheck<'l, 'e> {
    pub(super) loader: &'l mut Loader<'e>,
    pub(super) job: &'l str,
    pub(super) section: Section,
    pub(super) config_dir: PathBuf,
    /// Prefixed to the fields errors name: `action.` in a job, nothing in `[alert.NAME]`.
    pub(super) field_prefix: &'static str,
}

impl ActionCheck<'_, '_> {
    /// The checked action of a raw `[job.action]` (or `[alert.NAME]`) table.
    pub fn action(&mut self, raw: RawAction) -> Option<Action> {
        match raw {
            #[cfg(feature = "robots")]
            RawAction::Wecom(a) => wecom::parse(self, a).map(Action::Wecom),
            #[cfg(feature = "robots")]
            RawAction::DingTalk(a) => dingtalk::parse(self, a).map(Action::DingTalk),
            #[cfg(feature = "robots")]
            RawAction::Feishu(a) => feishu::parse(self, a).map(Action::Feishu),
            #[cfg(not(feature = "robots"))]
            RawAction::Wecom(_) => self.robots_compiled_out("wecom"),
            #[cfg(not(feature = "robots"))]
            RawAction::DingTalk(_) => self.robots_compiled_out("dingtalk"),
            #[cfg(not(feature = "robots"))]
            RawAction::Feishu(_) => self.robots_compiled_out("feishu"),
            RawAction::Slack(a) => slack::parse(self, a).map(Action::Slack),
            RawAction::Http(a) => http::parse(self, a).map(Action::Http),
            RawAction::Command(a) => command::parse(self, a).map(Action::Command),
            RawAction::Log(a) => log::parse(self, a).map(Action::Log),
        }
    }
}

impl ActionCheck<'_, '_> {
    /// Without the `robots` feature a robot's table cannot be sent: said as its `type`'s
    /// error, so that a jobs.toml is never run with a robot it names left silent.
    #[cfg(not(feature = "robots"))]
    fn robots_compiled_out(&mut self, kind: &str) -> Option<Action> {
        let message = format!(
            "{kind:?}: the WeCom, DingTalk and Feishu robots are compiled out of this build of \
             slotcron: enable its `robots` feature"
        );
        self.error("type", message);
        None
    }
}

impl Check for ActionCheck<'_, '_> {
    fn error(&mut self, field: &str, message: impl Into<String>) {
        self.loader.errors.push(ConfigError::field(
            self.section.clone(),
            format!("{}{field}", self.field_prefix),
            message,
        ));
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
                let e = self.loader.scrubber.scrub(&e.to_string());
                self.error(field, e);
                None
            }
        }
    }

    fn check_json_templates(&mut self, value: Json, field: &str) -> Option<Json> {
        match self.loader.templates.check_json(&value) {
            Ok(()) => Some(value),
            Err(e) => {
                self.error(field, e.to_string());
                None
            }
        }
    }

    fn budget(&mut self, raw: Option<&str>, default: &str, webhook: &str) -> Option<Budget> {
        let text = raw.unwrap_or(default);
        let checked = text
            .parse::<Rate>()
            .map_err(|e| e.to_string())
            .and_then(|rate| {
                super::durations::RATE_WINDOW
                    .check(rate.window)
                    .map(|_| rate)
                    .map_err(|e| format!("{text:?}: the window {e}"))
            });
        match checked {
            Ok(rate) => Some(Budget::new(rate, webhook)),
            Err(e) => {
                self.error("rate", e);
                None
            }
        }
    }

    fn existing_file(&mut self, path: &Path, field: &str) -> Option<PathBuf> {
        let full = self.config_dir.join(path);
        if full.is_file() {
            return Some(full);
        }
        self.error(field, format!("{}: no such file", full.display()));
        None
    }

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
            Err(e) => format!(
                "not a URL ({}): write it in full, starting with https://",
                crate::secret::url_parse_problem(e)
            ),
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
    let mut ok = true;
    for key in file_keys(table) {
        ok &= read_file_field(loader, table, &key, section, config_dir);
    }
    ok.then_some(())
}

/// The action's `NAME_file` keys.
fn file_keys(table: &toml::Table) -> Vec<String> {
    let keys = table.keys().filter(|k| k.ends_with("_file"));
    keys.cloned().collect()
}

/// Each `NAME_file = "path"` of a disabled job's action as `NAME = "path"`, the file unread:
/// typing then checks the action's keys as for an enabled job (a secret file may be absent
/// until the job is enabled, as in deploy/kubernetes/jobs.toml).
pub(super) fn file_fields_unread(action: &mut Value) {
    let Value::Table(table) = action else {
        return;
    };
    for key in file_keys(table) {
        let path = table.remove(&key).expect("a key just listed");
        let name = key.trim_end_matches("_file").to_owned();
        table.entry(name).or_insert(path);
    }
}

/// One `NAME_file` of [`read_file_fields`]; false when it is in error (recorded).
fn read_file_field(
    loader: &mut Loader<'_>,
    table: &mut toml::Table,
    key: &str,
    section: &Section,
    config_dir: &Path,
) -> bool {
    let name = key.trim_end_matches("_file").to_owned();
    let field = format!("action.{key}");
    loader.file_keys.push(name.clone());
    let Some(Value::String(path)) = table.remove(key) else {
        loader.errors.push(ConfigError::field(
            section.clone(),
            field,
            "must be a file path",
        ));
        return false;
    };
    if table.contains_key(&name) {
        loader.errors.push(ConfigError::field(
            section.clone(),
            field,
            format!("give {name} or {key}, not both"),
        ));
        return false;
    }
    let full = config_dir.join(&path);
    match std::fs::read_to_string(&full) {
        Ok(text) => {
            let text = text.trim_end_matches(['\n', '\r']).to_owned();
            if SECRET_FILE_FIELDS.contains(&name.as_str()) {
                loader.scrubber.add(&text);
            }
            table.insert(name, Value::String(text));
            true
        }
        Err(e) => {
            loader.errors.push(ConfigError::field(
                section.clone(),
                field,
                format!("{}: {}", full.display(), super::read_error(&e)),
            ));
            false
        }
    }
}

/// A build without the robots (`cargo test --no-default-features --lib compiled_out`): a
/// jobs.toml that names one is refused by file, job, field and feature.
#[cfg(all(test, not(feature = "robots")))]
mod compiled_out {
    use std::collections::HashMap;
    use std::path::Path;

    #[test]
    fn a_robot_in_a_build_without_the_robots_feature_names_the_feature_to_enable() {
        let text = "[[job]]\nname = \"standup\"\nschedule = \"* * * * *\"\n\
            [job.action]\ntype = \"dingtalk\"\ncontent = \"hi\"\n\
            webhook = \"https://oapi.dingtalk.com/robot/send?access_token=t\"\n";
        let no_env = HashMap::<String, String>::new();
        let errors =
            super::super::parse(Path::new("jobs.toml"), text, &no_env).expect_err("refused");
        let error = &errors.errors[0];
        assert_eq!(
            (error.job(), error.field_name()),
            (Some("standup"), Some("action.type")),
            "{errors}"
        );
        assert!(error.message.contains("`robots` feature"), "{errors}");
    }
}
