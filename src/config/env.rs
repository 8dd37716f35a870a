//! `${VAR}` references in jobs.toml, read from the environment once at start.
//!
//! `${VAR}` must be set (an unset variable is an error naming it); `${VAR:-default}` falls back;
//! `$${` is a literal `${`. Expanded values are remembered so they can be scrubbed from any text
//! that might print them.

/// Where expansion needs the environment: the process's own, or a map in tests.
pub trait Env {
    /// The variable `name`, if set.
    fn var(&self, name: &str) -> Option<String>;
    /// Every variable, for templates' `env`.
    fn vars(&self) -> std::collections::BTreeMap<String, String>;
}

/// The process environment.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn vars(&self) -> std::collections::BTreeMap<String, String> {
        std::env::vars().collect()
    }
}

impl Env for std::collections::HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }

    fn vars(&self) -> std::collections::BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
/// A `${VAR}` that cannot be expanded.
pub enum EnvError {
    #[error("environment variable {0} is not set")]
    /// The variable is not set.
    Unset(String),
    #[error("unterminated `${{` (write `$${{` for a literal `${{`)")]
    /// `${` without its `}`.
    Unterminated,
    #[error("invalid variable name {0:?} inside `${{…}}`")]
    /// `${…}` holds no valid variable name.
    BadName(String),
}

/// The result of expanding one string: the text and the names of the variables used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    /// The expanded text.
    pub text: String,
    /// Values taken from the environment (not defaults): secrets to scrub.
    pub values: Vec<String>,
    /// The variables used, so their values can be scrubbed from errors.
    pub names: Vec<String>,
}

/// Expands every `${…}` in `input`.
pub fn expand(input: &str, env: &dyn Env) -> Result<Expanded, EnvError> {
    let mut out = Expanded {
        text: String::with_capacity(input.len()),
        values: Vec::new(),
        names: Vec::new(),
    };
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.text.push_str(&rest[..pos]);
        let after = &rest[pos..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.text.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail.find('}').ok_or(EnvError::Unterminated)?;
            substitute(&tail[..end], env, &mut out)?;
            rest = &tail[end + 1..];
        } else {
            out.text.push('$');
            rest = &after[1..];
        }
    }
    out.text.push_str(rest);
    Ok(out)
}

fn substitute(reference: &str, env: &dyn Env, out: &mut Expanded) -> Result<(), EnvError> {
    let (name, default) = match reference.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (reference, None),
    };
    if !valid_name(name) {
        return Err(EnvError::BadName(name.to_owned()));
    }
    out.names.push(name.to_owned());
    match (env.var(name), default) {
        // `:-` also covers a variable set to the empty string, as in the shell.
        (Some(value), Some(default)) if value.is_empty() => out.text.push_str(default),
        (Some(value), _) => {
            out.text.push_str(&value);
            out.values.push(value);
        }
        (None, Some(default)) => out.text.push_str(default),
        (None, None) => return Err(EnvError::Unset(name.to_owned())),
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env() -> HashMap<String, String> {
        HashMap::from([
            ("KEY".to_owned(), "abc".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ])
    }

    #[test]
    fn expands_set_variables() {
        let e = expand("https://x/send?key=${KEY}", &env()).unwrap();
        assert_eq!(e.text, "https://x/send?key=abc");
        assert_eq!(e.values, ["abc"]);
    }

    #[test]
    fn unset_is_an_error_naming_the_variable() {
        assert_eq!(
            expand("${NOPE}", &env()),
            Err(EnvError::Unset("NOPE".into()))
        );
    }

    #[test]
    fn defaults_and_literals() {
        assert_eq!(expand("${NOPE:-d}", &env()).unwrap().text, "d");
        assert_eq!(expand("${EMPTY:-d}", &env()).unwrap().text, "d");
        assert_eq!(
            expand("$${KEY} costs $5", &env()).unwrap().text,
            "${KEY} costs $5"
        );
    }

    #[test]
    fn malformed_references() {
        assert_eq!(expand("${KEY", &env()), Err(EnvError::Unterminated));
        assert!(matches!(expand("${1X}", &env()), Err(EnvError::BadName(_))));
    }
}
