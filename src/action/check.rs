//! What an action's parser needs from whoever loads the configuration: a place to record an
//! error on one of its fields, and the checks every action shares (required and unused
//! fields, templates, URLs, files, rate budgets). Each action parses its own table against
//! this trait, so the configuration loader (the `config` module) depends on the actions and
//! never the other way round.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::action::rate::Budget;
use crate::action::template::Content;
use crate::secret::SecretUrl;

/// The checks of one action's table; every error names the job (or alert) and the field.
pub trait Check {
    /// Records an error on `field` of this action.
    fn error(&mut self, field: &str, message: impl Into<String>);

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

    /// `value`, or an error that `what` requires `field`.
    fn required<T>(&mut self, what: &str, field: &str, value: Option<T>) -> Option<T> {
        if value.is_none() {
            self.error(field, format!("required by {what}"));
        }
        value
    }

    /// The template `source` of `field`, compiled.
    fn content(&mut self, field: &str, source: String) -> Option<Content>;

    /// `value` if every template string inside it compiles.
    fn check_json_templates(&mut self, value: Json, field: &str) -> Option<Json>;

    /// A TOML value as the JSON it will be sent as.
    fn json(&mut self, value: toml::Value, field: &str) -> Option<Json> {
        serde_json::to_value(value)
            .map_err(|e| self.error(field, format!("cannot be sent as JSON: {e}")))
            .ok()
    }

    /// The rate budget of `webhook`: `raw` (`"20/min"`) or the action's `default`.
    fn budget(&mut self, raw: Option<&str>, default: &str, webhook: &str) -> Option<Budget>;

    /// A file named relative to jobs.toml that must exist now (it is read again at send time).
    fn existing_file(&mut self, path: &Path, field: &str) -> Option<PathBuf>;

    /// An http(s) URL; its text may hold a key, so an error never repeats it.
    fn url(&mut self, raw: &str, field: &str) -> Option<SecretUrl>;
}
