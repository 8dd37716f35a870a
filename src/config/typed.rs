//! Typing a section with serde, reporting every key it refuses. serde stops at the first
//! problem of a table; the loader reports it, leaves the key out and tries again, so every
//! independent mistake of a section shows in one run, each said with its fix
//! ([`super::suggest`]).

use serde::de::DeserializeOwned;
use toml::Value;

use super::{ConfigError, Loader, Section, suggest};

impl Loader<'_> {
    /// Deserializes a section, naming the field on error. serde stops at the first problem, so
    /// each refused key is reported, left out, and the rest tried again: every independent
    /// mistake of the section shows in one run. The keys left out are in `self.rejected`; a
    /// required one stops the section (its absence is not a second mistake).
    pub(super) fn typed<T: DeserializeOwned>(
        &mut self,
        value: Value,
        section: &Section,
    ) -> Option<T> {
        self.typed_at(value, section, "")
    }

    /// [`Loader::typed`] for a table below the section (`action.`), `prefix` naming its fields.
    pub(super) fn typed_at<T: DeserializeOwned>(
        &mut self,
        mut value: Value,
        section: &Section,
        prefix: &str,
    ) -> Option<T> {
        self.rejected.clear();
        // Each round leaves one key out, so the rounds end; the bound guards against a path
        // that cannot be found in the table (it would repeat the same error).
        for _ in 0..=MAX_REFUSED_KEYS {
            let e = match serde_path_to_error::deserialize(value.clone()) {
                Ok(typed) => return Some(typed),
                Err(e) => e,
            };
            let path = e.path().to_string();
            let message = first_line(&e.inner().to_string());
            // The table is searched for an unknown variant: serde's path stops at a tagged enum.
            let field =
                variant_field(&value, &path, &message).unwrap_or_else(|| field_of(&path, &message));
            let missing = message.starts_with("missing field");
            if missing && self.explains_missing(&field) {
                return None;
            }
            let (shown, message) = self.as_written(format!("{prefix}{field}"), message);
            let message = suggest::plain_serde_message(&message, &file_forms(&shown, &message));
            self.errors
                .push(ConfigError::field(section.clone(), shown, message));
            if missing || !remove_field(&mut value, &field) {
                return None;
            }
            self.rejected.push(field);
        }
        None
    }

    /// An unknown field set from `NAME_file`, named (with its message) as the file has it.
    fn as_written(&self, field: String, message: String) -> (String, String) {
        let key = field.rsplit('.').next().unwrap_or_default();
        let unknown = format!("unknown field `{key}`");
        if !message.starts_with(&unknown) || !self.file_keys.iter().any(|k| k == key) {
            return (field, message);
        }
        let message = message.replacen(&unknown, &format!("unknown field `{key}_file`"), 1);
        (format!("{field}_file"), message)
    }

    /// Whether a missing `field` is already explained: by a key refused before (the field
    /// itself, or a misspelling of it: `webhok_file` for `webhook`), or by its `NAME_file`.
    fn explains_missing(&self, field: &str) -> bool {
        let key = field.rsplit('.').next().unwrap_or(field);
        if self.file_keys.iter().any(|k| k == key) {
            return true;
        }
        let forms = [field.to_owned(), format!("{field}_file")];
        self.rejected
            .iter()
            .any(|r| suggest::closest(r, forms.iter().map(String::as_str)).is_some())
    }

    /// Whether the last [`Loader::typed`] refused `field` (reported already).
    pub(super) fn was_rejected(&self, field: &str) -> bool {
        self.rejected.iter().any(|r| r == field)
    }
}

/// Most refused keys reported in one section: past this the file is likely not a jobs.toml.
const MAX_REFUSED_KEYS: usize = 32;

/// The `NAME_file` forms an unknown key of an action might have meant: every key of serde's
/// list (`action.x` fields only; `NAME_file` is read before serde sees the table).
fn file_forms(field: &str, message: &str) -> Vec<String> {
    if !field.starts_with("action.") || !message.starts_with("unknown field") {
        return Vec::new();
    }
    let (_, expected) = message.split_once(", expected").unwrap_or_default();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|k| *k != "type")
        .map(|k| format!("{k}_file"))
        .collect()
}

/// Takes the key at `field` (dotted, up to its first `[index]`) out of `value`; false if there
/// is none.
fn remove_field(value: &mut Value, field: &str) -> bool {
    let field = field.split('[').next().unwrap_or(field);
    let mut keys: Vec<&str> = field.split('.').collect();
    let Some(last) = keys.pop() else { return false };
    let table = keys
        .iter()
        .try_fold(value, |v, key| v.get_mut(*key))
        .and_then(Value::as_table_mut);
    table.is_some_and(|t| t.remove(last).is_some())
}

/// The first line of a message (toml appends "in `table`" on the next).
fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or_default().trim().to_owned()
}

/// For "unknown variant `x`" under `path`: the key of the table at `path` whose value is `x`
/// (`action.msgtype` rather than just `action`).
fn variant_field(raw: &Value, path: &str, message: &str) -> Option<String> {
    let (_, rest) = message.split_once("unknown variant `")?;
    let (variant, _) = rest.split_once('`')?;
    let table = if path == "." {
        Some(raw)
    } else {
        path.split('.').try_fold(raw, |v, key| v.get(key))
    }?;
    let (key, _) = table
        .as_table()?
        .iter()
        .find(|(_, v)| v.as_str() == Some(variant))?;
    Some(if path == "." {
        key.clone()
    } else {
        format!("{path}.{key}")
    })
}

/// The field an error is about: serde's path, plus the field named in "unknown/missing field `x`".
fn field_of(path: &str, message: &str) -> String {
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|p| message.split_once(p))
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(name, _)| name);
    let base = if path == "." { "" } else { path };
    // serde_path_to_error's path already ends at an unknown field outside a tagged enum.
    let named = named.filter(|name| base.rsplit('.').next() != Some(*name));
    match (base, named) {
        ("", Some(name)) => name.to_owned(),
        ("", None) => "(table)".to_owned(),
        (base, Some(name)) => format!("{base}.{name}"),
        (base, None) => base.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_of_paths() {
        assert_eq!(field_of(".", "missing field `name`"), "name");
        assert_eq!(
            field_of("action", "unknown field `x`, expected one of"),
            "action.x"
        );
        assert_eq!(field_of("timeout", "invalid type"), "timeout");
        assert_eq!(
            field_of("retries", "unknown field `retries`, expected one of"),
            "retries"
        );
    }
}
