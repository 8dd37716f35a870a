//! A running replica's reload: the new file read as its start read it, and what differs from
//! the running configuration that the reload does not apply (the nodes, the prefix, `[http]`,
//! all candidates or some), which would split the fleet if it did; and the config hash change
//! as the audit trail words it.

use super::{Candidates, Config, ConfigErrors, RedisConfig, load_guarded};

/// A running replica's reload of `old`'s file ([`load_guarded`]), keeping the command line's
/// overrides of `old` (`run --http-listen`): the file's `[http]` does not replace them.
pub async fn reload(old: &Config) -> Result<Config, ConfigErrors> {
    let new = load_guarded(&old.path).await?;
    Ok(new.with_overrides_of(old))
}

/// The warnings for the changes from `old` to `new` that a reload does not apply: they take
/// effect at the next restart (applied mid-flight they would split the fleet).
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let nodes = |c: &Config| {
        let nodes =
            |r: &RedisConfig| -> Vec<String> { r.nodes.iter().map(ToString::to_string).collect() };
        c.redis.as_ref().map(|r| (nodes(r), r.topology()))
    };
    let all = |c: &Config| c.scheduler.candidates == Candidates::All;
    let mut warnings = Vec::new();
    if nodes(old) != nodes(new) || old.scheduler.key_prefix != new.scheduler.key_prefix {
        warnings.push(
            "[redis] nodes, mode or key_prefix changed: this takes effect at the next restart, and \
            while a rollout restarts replicas one by one, the replicas on the old nodes or prefix \
            and those on the new one race apart, so every slot runs twice until the rollout \
            ends; to avoid it, stop every replica, then start them all with the new file",
        );
    }
    if old.http != new.http || all(old) != all(new) {
        warnings.push(
            "changes to [http] and between candidates = \"all\" and a count take effect at the next restart",
        );
    }
    warnings
}

/// A config hash change as the audit trail words it.
pub fn hash_change(old: &str, new: &str) -> String {
    if old == new {
        format!("config hash {new} unchanged")
    } else {
        format!("config hash {old} -> {new}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;

    /// A jobs.toml on `nodes` under `prefix`, with `scheduler` lines and one log job.
    fn config(nodes: &str, prefix: &str, scheduler: &str) -> Config {
        let text = format!(
            "[scheduler]\nkey_prefix = \"{prefix}\"\n{scheduler}\n[redis]\nnodes = [{nodes}]\n\
             [[job]]\nname = \"j\"\nschedule = \"* * * * *\"\n\
             [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
        );
        crate::config::parse(Path::new("jobs.toml"), &text, &HashMap::new()).unwrap()
    }

    const A: &str = "\"redis://127.0.0.1:7000\"";
    const B: &str = "\"redis://127.0.0.1:7001\"";

    #[test]
    fn a_reload_that_changes_only_jobs_warns_of_nothing() {
        let old = config(A, "p", "");
        assert_eq!(restart_only_changes(&old, &config(A, "p", "")), [""; 0]);
    }

    #[test]
    fn new_nodes_or_a_new_prefix_take_effect_at_the_next_restart() {
        let old = config(A, "p", "");
        for new in [config(B, "p", ""), config(A, "q", "")] {
            let warnings = restart_only_changes(&old, &new);
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].starts_with("[redis] nodes, mode or key_prefix changed"));
        }
    }

    #[test]
    fn all_candidates_or_a_count_take_effect_at_the_next_restart() {
        let old = config(A, "p", "candidates = \"all\"");
        let warnings = restart_only_changes(&old, &config(A, "p", "candidates = 2"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("changes to [http] and between candidates"));
        let counts = (
            config(A, "p", "candidates = 2"),
            config(A, "p", "candidates = 3"),
        );
        assert_eq!(restart_only_changes(&counts.0, &counts.1), [""; 0]);
    }

    #[test]
    fn the_hash_change_says_unchanged_or_old_to_new() {
        assert_eq!(hash_change("a1", "a1"), "config hash a1 unchanged");
        assert_eq!(hash_change("a1", "b2"), "config hash a1 -> b2");
    }
}
