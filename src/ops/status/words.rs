//! The page's words for what happened to a slot: each fate explained (a badge's title, the
//! legend), who ran it, and a failure said in one plain sentence (what failed, where, which
//! replicas tried), the raw error chain kept for the folded details. Pure, so every sentence is
//! unit-tested.

use crate::record::history::RunRecord;

/// The `trigger` a run started by `slotcron trigger` records.
const MANUAL: &str = "trigger";

/// What a fate means, in words: the badge's title and the legend's text.
pub fn meaning(outcome: &str) -> &'static str {
    match outcome {
        "done" => "done: a replica ran the slot and the action succeeded",
        "failed" => "failed: the slot ran and its action did not succeed",
        "missed" => {
            "missed: no replica recorded running this slot and no pause covered it \
             (every replica down, or Redis unreachable for all of them)"
        }
        "handed_off" => {
            "handed off: nothing left the winner, so it offered the slot to another replica"
        }
        "skipped" => "skipped: the previous run of the job was still going (overlap)",
        "paused" => "paused: the job was paused fleet-wide at this slot",
        "running" => "running: a replica won the slot and its run has not ended yet",
        "pending" => "pending: too recent to judge; its run may not be recorded yet",
        _ => "",
    }
}

/// Whether `run` was started from the command line (`slotcron trigger`), not by the schedule.
pub fn from_cli(run: &RunRecord) -> bool {
    run.trigger == MANUAL
}

/// Who ran `run`: its replica, after the one that handed it off, and how it was started when
/// that was not the schedule.
pub fn ran_by(run: &RunRecord) -> String {
    let mut by = tried_by(run).join(", then ");
    match run.trigger.as_str() {
        MANUAL => by.push_str(" (started from the CLI: slotcron trigger)"),
        "catch_up" => by.push_str(" (a catch-up run)"),
        _ => {}
    }
    by
}

/// The replicas that tried `run`'s slot, in order.
fn tried_by(run: &RunRecord) -> Vec<&str> {
    run.previous_winner
        .iter()
        .map(String::as_str)
        .chain([run.replica.as_str()])
        .collect()
}

/// A failed run in one sentence: what failed (the action's `kind`), where (`place`, the host
/// it sends to), why in plain words, and which replicas tried. `None` without an error.
pub fn failure_sentence(run: &RunRecord, kind: &str, place: Option<&str>) -> Option<String> {
    let error = run.error.as_deref()?;
    let what = match place {
        Some(place) => format!("The {kind} action to {place}"),
        None => format!("The {kind} action"),
    };
    let mut attempts = match run.attempts {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    // The record counts the last replica's attempts only.
    if run.previous_winner.is_some() {
        attempts.push_str(&format!(" on {}", run.replica));
    }
    let tried = tried_by(run).join(", then ");
    let mut sentence = format!(
        "{what} failed: {}. Tried by {tried} ({attempts})",
        cause(error)
    );
    if nobody_took_it(error) {
        sentence.push_str("; no other replica took it over");
    }
    sentence.push('.');
    Some(sentence)
}

/// Why a run failed, in words, from its error chain (the first cause that matches).
fn cause(error: &str) -> String {
    let lower = error.to_lowercase();
    if let Some(status) = http_status(error) {
        return format!("the receiver answered HTTP {status}");
    }
    let plain = [
        (
            "connection refused",
            "could not connect (connection refused)",
        ),
        ("dns error", "the host name did not resolve"),
        ("failed to lookup address", "the host name did not resolve"),
        ("certificate", "the TLS handshake failed"),
        (
            "may have been delivered",
            "it was sent but no answer came back",
        ),
        ("timed out", "it timed out"),
        ("timeout", "it timed out"),
        ("tcp connect error", "could not connect"),
        ("connect", "could not connect"),
    ];
    plain
        .iter()
        .find(|(needle, _)| lower.contains(needle))
        .map_or_else(
            || innermost(error).to_owned(),
            |(_, says)| (*says).to_owned(),
        )
}

/// The status of an `HTTP 500: …` answer in the chain.
fn http_status(error: &str) -> Option<&str> {
    let at = error.find("HTTP ")? + "HTTP ".len();
    let code = error[at..].split(|c: char| !c.is_ascii_digit()).next()?;
    (code.len() == 3).then_some(code)
}

/// The chain's last link (`a: b: c` gives `c`), without the handoff's note.
fn innermost(error: &str) -> &str {
    let first = error.split("; no replica").next().unwrap_or(error);
    first.rsplit(": ").next().unwrap_or(first).trim()
}

/// Whether the chain says the handoff found no taker.
fn nobody_took_it(error: &str) -> bool {
    error.contains("heard the handoff offer") || error.contains("took the handoff offer")
}

/// Where an action sends, for the sentence: the host (and port) of the first URL in its
/// scrubbed target, or the command's program.
pub fn place(kind: &str, target: &str) -> Option<String> {
    if kind == "command" {
        return target.split_whitespace().next().map(str::to_owned);
    }
    target
        .split_whitespace()
        .filter_map(|word| url::Url::parse(word).ok())
        .find_map(|url| {
            let host = url.host_str()?.to_owned();
            Some(match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::RunState;
    use crate::time::schedule::Slot;

    const ROBOT_CHAIN: &str = "not delivered: nothing left this replica after 1 attempt(s): \
        connection failed: client error (Connect): tcp connect error: Connection refused \
        (os error 111); no replica that has not had the slot heard the handoff offer";

    fn failed(replica: &str, error: &str) -> RunRecord {
        let slot = Slot::at(chrono::DateTime::from_timestamp(60, 0).unwrap());
        RunRecord {
            error: Some(error.into()),
            attempts: 1,
            ..RunRecord::test("j", slot, replica, RunState::Failed)
        }
    }

    #[test]
    fn a_robot_that_cannot_be_reached_reads_as_one_plain_sentence() {
        let run = failed("a", ROBOT_CHAIN);
        let sentence = failure_sentence(&run, "wecom", Some("qyapi.weixin.qq.com"));
        assert_eq!(
            sentence.as_deref(),
            Some(
                "The wecom action to qyapi.weixin.qq.com failed: could not connect \
                 (connection refused). Tried by a (1 attempt); no other replica took it over."
            )
        );
    }

    #[test]
    fn a_handed_off_failure_names_both_replicas_and_the_http_status() {
        let mut run = failed(
            "b",
            "rejected after 3 attempt(s): HTTP 500: {\"error\":\"down\"}",
        );
        run.previous_winner = Some("a".into());
        run.attempts = 3;
        let sentence = failure_sentence(&run, "http", Some("127.0.0.1:8080")).unwrap();
        assert_eq!(
            sentence,
            "The http action to 127.0.0.1:8080 failed: the receiver answered HTTP 500. \
             Tried by a, then b (3 attempts on b)."
        );
        assert_eq!(ran_by(&run), "a, then b");
    }

    #[test]
    fn an_unknown_cause_is_the_chain_s_last_link() {
        let run = failed("a", "exited with status 3: disk full");
        let sentence = failure_sentence(&run, "command", None).unwrap();
        assert!(sentence.starts_with("The command action failed: disk full."));
    }

    #[test]
    fn runs_started_from_the_cli_say_so() {
        let mut run = failed("ops-laptop", "x");
        run.trigger = "trigger".into();
        assert!(from_cli(&run));
        assert_eq!(
            ran_by(&run),
            "ops-laptop (started from the CLI: slotcron trigger)"
        );
    }

    #[test]
    fn every_fate_of_the_legend_has_words() {
        for outcome in super::super::page::OUTCOMES {
            assert!(meaning(outcome).starts_with(&outcome.replace('_', " ")[..4]));
        }
        assert!(meaning("missed").contains("no replica"));
    }

    #[test]
    fn the_place_is_the_host_of_the_target_or_the_program() {
        let http = place("http", "POST http://127.0.0.1:9/hook");
        assert_eq!(http.as_deref(), Some("127.0.0.1:9"));
        let robot = place(
            "wecom",
            "text https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=***",
        );
        assert_eq!(robot.as_deref(), Some("qyapi.weixin.qq.com"));
        let command = place("command", "/usr/bin/backup --all");
        assert_eq!(command.as_deref(), Some("/usr/bin/backup"));
    }
}
