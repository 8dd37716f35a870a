//! `[alert.NAME]` sections: actions (of any type) that tell someone a slot ended `failed`, was
//! found `missed` or run twice, passed its job's `deadline`, or that the job `recovered`; and
//! the `on_failure` key of a job or of `[scheduler]` that names one.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use toml::Value;

use super::Loader;
use super::actions::{self, ActionCheck};
use super::error::{ConfigError, Section};
use super::raw::RawAction;
use crate::action::Action;

/// The checked alerts by name, and the names whose section had errors (so a job naming one is
/// not reported a second time as naming an unknown alert).
#[derive(Debug, Default)]
pub(super) struct Alerts {
    pub checked: BTreeMap<String, Arc<Action>>,
    pub broken: HashSet<String>,
}

impl Loader<'_> {
    /// Checks every `[alert.NAME]` section.
    pub(super) fn alerts(&mut self, value: Option<Value>) {
        let Some(value) = value else { return };
        let Value::Table(tables) = value else {
            self.errors.push(ConfigError::field(
                Section::Top,
                "alert",
                "must be tables: write [alert.NAME] with an action's fields (type = \"wecom\", …)",
            ));
            return;
        };
        for (name, table) in tables {
            match self.alert(&name, table) {
                Some(action) => {
                    self.alerts.checked.insert(name, Arc::new(action));
                }
                None => {
                    self.alerts.broken.insert(name);
                }
            }
        }
    }

    fn alert(&mut self, name: &str, mut value: Value) -> Option<Action> {
        let section = Section::Alert(name.to_owned());
        let before = self.errors.len();
        // An unset variable or an unreadable file is the alert's error; its action, which
        // needs those values, is not checked on top of it.
        self.read_alert_values(&mut value, &section)?;
        let raw: RawAction = self.typed(value, &section)?;
        let config_dir = self.config_dir.clone();
        let action = ActionCheck {
            loader: self,
            job: name,
            section,
            config_dir,
            field_prefix: "",
        }
        .action(raw);
        (self.errors.len() == before).then_some(action).flatten()
    }

    /// `${VAR}` expanded and `NAME_file` read in an alert's table, as in a job's action (a
    /// loader that leaves secrets unresolved leaves the `NAME_file` paths in their values'
    /// place, unread). `None` when one could not be (each recorded).
    fn read_alert_values(&mut self, value: &mut Value, section: &Section) -> Option<()> {
        self.file_keys.clear();
        if !self.resolves() {
            actions::file_fields_unread(value);
            return Some(());
        }
        let mut expanded = true;
        if let Value::Table(table) = value {
            for (key, item) in table.iter_mut() {
                expanded &= self.expand_all(item, section, key).is_some();
            }
        }
        let dir = self.config_dir.clone();
        let read = actions::read_file_fields(self, value, section, &dir);
        expanded.then_some(()).and(read)
    }

    /// The alert `on_failure` names (a job's, else `[scheduler]`'s), checked to exist.
    pub(super) fn on_failure(
        &mut self,
        name: Option<&str>,
        section: &Section,
    ) -> Option<Option<String>> {
        let Some(name) = name else { return Some(None) };
        if self.alerts.checked.contains_key(name) {
            return Some(Some(name.to_owned()));
        }
        if !self.alerts.broken.contains(name) {
            let known: Vec<&str> = self.alerts.checked.keys().map(String::as_str).collect();
            let hint = match super::suggest::closest(name, known.iter().copied()) {
                Some(near) => format!("; did you mean {near:?}?"),
                None if known.is_empty() => " (defined: none)".to_owned(),
                None => format!(" (defined: {})", known.join(", ")),
            };
            self.errors.push(ConfigError::field(
                section.clone(),
                "on_failure",
                format!("{name:?} is not an [alert.NAME] section{hint}"),
            ));
        }
        None
    }
}
