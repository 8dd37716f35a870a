//! Which deployment a replica belongs to: what tells production from staging when both share
//! the Redis nodes and a `key_prefix` (`fleet::destinations` compares it between replicas).
//!
//! Two deployments of one jobs.toml often differ only by their environment (`DEPLOY_ENV`, a
//! database URL a `command` reads): the file and every job's destination are the same text. So
//! unless it is named (`[scheduler] deployment`, or `SLOTCRON_DEPLOYMENT`), a deployment is
//! known by a fingerprint of each environment variable the file names (`${VAR}`, `$VAR` in a
//! command, `{{ env.VAR }}` in a template), except those that differ between the replicas of
//! one deployment by design (`PER_REPLICA`); a fleet built in code is also known by its
//! program's name (two services embedding the library are two deployments).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Env;

/// The environment variable that names the deployment when the file does not.
pub const DEPLOYMENT_VAR: &str = "SLOTCRON_DEPLOYMENT";

/// Variables that differ between the replicas of one deployment (the pod's or host's own
/// names, and slotcron's per-replica and per-run ones): never part of the identity.
const PER_REPLICA: &[&str] = &["HOSTNAME", "HOST", "POD_NAME", "POD_IP", "NODE_NAME"];

/// What tells this deployment from another on the same prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Deployment {
    /// Named by the operator: `[scheduler] deployment` or `SLOTCRON_DEPLOYMENT`.
    Named(String),
    /// Known by what makes it distinct.
    Derived {
        /// A fleet built in code: its program's file name.
        program: Option<String>,
        /// Each environment variable the configuration names: a fingerprint of its value
        /// (never the value: it may be a secret), or `unset`.
        env: BTreeMap<String, String>,
    },
}

impl Deployment {
    /// The deployment of a configuration `text` loaded under `env`: `named` (the file's key),
    /// else `SLOTCRON_DEPLOYMENT`, else derived from the variables the text names.
    pub(super) fn of(named: Option<String>, text: &str, env: &dyn Env) -> Self {
        let named = named.or_else(|| env.var(DEPLOYMENT_VAR).filter(|n| !n.is_empty()));
        if let Some(name) = named {
            return Deployment::Named(name);
        }
        let env = names_in(text)
            .into_iter()
            .map(|name| {
                let value = env
                    .var(&name)
                    .map_or("unset".to_owned(), |v| fingerprint(&v));
                (name, value)
            })
            .collect();
        Deployment::Derived { program: None, env }
    }

    /// A fleet built in code, known by `program` too, unless it is named.
    pub fn with_program(self, program: String) -> Self {
        match self {
            Deployment::Derived { env, .. } => Deployment::Derived {
                program: Some(program),
                env,
            },
            named @ Deployment::Named(_) => named,
        }
    }

    /// How `self` and `other` differ, for an operator: the names, the program, or the
    /// variables whose values differ.
    pub fn difference(&self, other: &Deployment) -> String {
        match (self, other) {
            (Deployment::Named(a), Deployment::Named(b)) => format!("named {a:?} and {b:?}"),
            (Deployment::Named(a), Deployment::Derived { .. })
            | (Deployment::Derived { .. }, Deployment::Named(a)) => {
                format!("one named {a:?}, the other unnamed")
            }
            (
                Deployment::Derived { program: p, env: a },
                Deployment::Derived { program: q, env: b },
            ) => {
                let shown = |p: &Option<String>| p.clone().unwrap_or_else(|| "slotcron".into());
                let programs = (p != q).then(|| format!("programs {} and {}", shown(p), shown(q)));
                let parts: Vec<String> = programs.into_iter().chain(env_difference(a, b)).collect();
                match parts.is_empty() {
                    true => "nothing visible".to_owned(),
                    false => parts.join(", "),
                }
            }
        }
    }
}

impl fmt::Display for Deployment {
    /// The name, or `derived:`, a fingerprint of the whole identity and what it is derived
    /// from (`slotcron check` prints it: run it with each deployment's environment to compare).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Deployment::Named(name) => f.write_str(name),
            Deployment::Derived { program, env } => {
                let text = serde_json::to_string(self).unwrap_or_default();
                let from: Vec<&str> = program
                    .iter()
                    .chain(env.keys())
                    .map(String::as_str)
                    .collect();
                write!(
                    f,
                    "derived:{} (from: {})",
                    fingerprint(&text),
                    from.join(", ")
                )
            }
        }
    }
}

/// "environment variable(s) A, B differ(s)", naming the variables whose fingerprints differ
/// or that only one side names; `None` when none does.
fn env_difference(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Option<String> {
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let differ: Vec<&str> = names
        .into_iter()
        .filter(|name| a.get(*name) != b.get(*name))
        .map(String::as_str)
        .collect();
    (!differ.is_empty()).then(|| format!("environment variable(s) {} differ", differ.join(", ")))
}

/// The first 16 hex digits of the value's SHA-256.
fn fingerprint(value: &str) -> String {
    hex::encode(Sha256::digest(value.as_bytes()))[..16].to_owned()
}

/// The environment variables `text` names as `${VAR}`, `$VAR` or `env.VAR`, less
/// [`PER_REPLICA`] and slotcron's own `SLOTCRON_*`.
fn names_in(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for (i, _) in text.match_indices(['$', '.']) {
        let rest = &text[i..];
        let after = if let Some(rest) = rest.strip_prefix("${") {
            rest
        } else if let Some(rest) = rest.strip_prefix('$') {
            rest
        } else if text[..i].ends_with("env") {
            &rest[1..]
        } else {
            continue;
        };
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let starts_well = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if starts_well && !PER_REPLICA.contains(&name.as_str()) && !name.starts_with("SLOTCRON_") {
            names.insert(name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_variables_a_file_names_in_any_form_except_per_replica_ones() {
        let text = r#"argv = ["sh", "-c", "backup --to $DEPLOY_ENV/$HOSTNAME $SLOTCRON_SLOT"]
            url = "${DB_URL:-x}" content = "{{ env.REGION }} $$ $1 a.b""#;
        let names: Vec<String> = names_in(text).into_iter().collect();
        assert_eq!(names, ["DB_URL", "DEPLOY_ENV", "REGION"]);
    }

    #[test]
    fn two_environments_differing_in_a_named_variable_are_two_deployments() {
        let text = "argv = [\"sh\", \"-c\", \"backup $DEPLOY_ENV\"]";
        let prod = Deployment::of(None, text, &env(&[("DEPLOY_ENV", "production")]));
        let staging = Deployment::of(None, text, &env(&[("DEPLOY_ENV", "staging")]));
        let other_pod = env(&[("DEPLOY_ENV", "production"), ("HOSTNAME", "prod-2")]);
        assert_ne!(prod, staging);
        assert_eq!(prod, Deployment::of(None, text, &other_pod));
        assert_eq!(
            prod.difference(&staging),
            "environment variable(s) DEPLOY_ENV differ"
        );
    }

    #[test]
    fn a_name_wins_over_the_environment_and_the_file_over_the_variable() {
        let text = "x = \"$DEPLOY_ENV\"";
        let named = env(&[(DEPLOYMENT_VAR, "staging"), ("DEPLOY_ENV", "a")]);
        assert_eq!(
            Deployment::of(None, text, &named),
            Deployment::Named("staging".into())
        );
        assert_eq!(
            Deployment::of(Some("prod".into()), text, &named),
            Deployment::Named("prod".into())
        );
    }

    #[test]
    fn a_derived_deployment_shows_what_it_is_derived_from() {
        let text = "x = \"$DEPLOY_ENV {{ env.REGION }}\"";
        let shown = Deployment::of(None, text, &env(&[])).to_string();
        assert!(shown.starts_with("derived:"), "{shown}");
        assert!(shown.ends_with(" (from: DEPLOY_ENV, REGION)"), "{shown}");
        assert_eq!(Deployment::Named("prod".into()).to_string(), "prod");
    }

    #[test]
    fn two_programs_built_in_code_are_two_deployments() {
        let none = env(&[]);
        let billing = Deployment::of(None, "", &none).with_program("billing".into());
        let reports = Deployment::of(None, "", &none).with_program("reports".into());
        assert_ne!(billing, reports);
        assert_eq!(billing.difference(&reports), "programs billing and reports");
    }
}
