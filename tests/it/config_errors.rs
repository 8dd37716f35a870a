//! Bad jobs.toml: a table of malformed configs, each with the error it must give (one line per
//! error starting with the file, naming the job and the exact field, or the line for syntax),
//! never a panic; the CLI's exit codes; valid configs (`${X:-default}`, disabled jobs, Redis
//! nodes with TLS and passwords); no secret (a Redis password, a webhook key, a value from the
//! environment) in any error or Debug output; and property tests of the loader over arbitrary,
//! TOML-like and near-valid input.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use proptest::prelude::*;
use slotcron::unstable::config::{self, ConfigErrors, Location};

/// The key in the test environment's webhook: it must never be printed.
const WEBHOOK_KEY: &str = "SECRETKEY-abc123";
/// A secret inside an environment value that is not a URL.
const ENV_SECRET: &str = "secretvalue123";
/// A Redis password.
const REDIS_PASSWORD: &str = "hunter2redispw";

const GOOD_JOB: &str = r#"
[[job]]
name = "standup"
schedule = "0 30 9 * * Mon-Fri"
[job.action]
type = "wecom"
webhook = "${WECOM_WEBHOOK}"
msgtype = "text"
content = "hi {{ slot }}"
"#;

fn env() -> HashMap<String, String> {
    HashMap::from([
        (
            "WECOM_WEBHOOK".to_owned(),
            format!("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key={WEBHOOK_KEY}"),
        ),
        ("NOT_A_URL".to_owned(), format!("not a url {ENV_SECRET}")),
    ])
}

fn parse(text: &str) -> Result<config::Config, ConfigErrors> {
    parse_with(text, &env())
}

fn parse_with(text: &str, env: &HashMap<String, String>) -> Result<config::Config, ConfigErrors> {
    config::parse(Path::new("jobs.toml"), text, env)
}

/// A job with `action` lines (after `[job.action]`) and extra job lines.
fn job(extra: &str, action: &str) -> String {
    format!("[[job]]\nname = \"j\"\nschedule = \"* * * * *\"\n{extra}\n[job.action]\n{action}\n")
}

const WECOM: &str =
    "type = \"wecom\"\nwebhook = \"${WECOM_WEBHOOK}\"\nmsgtype = \"text\"\ncontent = \"x\"";

/// An `[alert.oncall]` section, for jobs whose keys need an alert.
const ONCALL: &str = "[alert.oncall]\ntype = \"log\"\ncontent = \"x\"\n";

/// A `[calendar.cn]` section.
const CN: &str = "[calendar.cn]\nbuiltin = \"cn\"\n";

/// A file with a calendar `office` reading `tests/data/calendars/{name}.ics`, and a good job.
fn ics_calendar(name: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/calendars");
    format!("[calendar.office]\nics = \"{dir}/{name}.ics\"\n{GOOD_JOB}")
}

struct Case {
    name: &'static str,
    text: String,
    /// The job the error must name (None: a file-level or section error).
    job: Option<&'static str>,
    /// The field the error must be about (exactly), `line N` for syntax errors, or "" for the
    /// file as a whole.
    field: &'static str,
    /// Pieces of the message.
    says: &'static [&'static str],
}

fn case(
    name: &'static str,
    text: impl Into<String>,
    job: Option<&'static str>,
    field: &'static str,
    says: &'static [&'static str],
) -> Case {
    Case {
        name,
        text: text.into(),
        job,
        field,
        says,
    }
}

// One case a line, a table to scan down: rustfmt's 2024 style would set each field on a line of
// its own.
#[rustfmt::skip]
fn cases() -> Vec<Case> {
    let j = Some("j");
    vec![
        case("syntax", "[[job]]\nname = \"j\"\nschedule = \"* * * * *\nx = 1\n", j, "line 3", &["TOML syntax"]),
        case("syntax in second job", format!("{GOOD_JOB}\n[[job]]\nname = \"second\"\nschedule = = 1\n"), Some("second"), "line 13", &["TOML syntax"]),
        case("unknown top-level key", format!("colour = \"red\"\n{GOOD_JOB}"), None, "colour", &["unknown"]),
        case("unknown scheduler field", format!("[scheduler]\ntimezon = \"UTC\"\n{GOOD_JOB}"), None, "timezon", &["[scheduler]", "unknown field"]),
        case("unknown job field", job("retries = 3", WECOM), j, "retries", &["unknown field"]),
        case("unknown action field", job("", &format!("{WECOM}\ncolor = 1")), j, "action.color", &["unknown field", "each also as NAME_file, such as webhook_file"]),
        case("schedule is a number", job("", WECOM).replace("\"* * * * *\"", "5"), j, "schedule", &["invalid type", "a string in quotes"]),
        case("timeout is a number", job("timeout = 30", WECOM), j, "timeout", &["invalid type"]),
        case("dst_repeat misspelled", job("dst_repeat = \"frist\"", WECOM), j, "dst_repeat", &["unknown value \"frist\"; did you mean \"first\"?"]),
        case("dst_gap misspelled in scheduler", format!("[scheduler]\ndst_gap = \"shfit\"\n{GOOD_JOB}"), None, "dst_gap", &["[scheduler]", "unknown value \"shfit\"; did you mean \"shift\"?"]),
        case("nodes is a string", format!("[redis]\nnodes = \"redis://x:6379\"\n{GOOD_JOB}"), None, "nodes", &["[redis]", "invalid type", "a list in brackets"]),
        case("cron with 3 fields", job("", WECOM).replace("* * * * *", "* * *"), j, "schedule", &["3 fields"]),
        case("cron value out of range", job("", WECOM).replace("* * * * *", "61 * * * *"), j, "schedule", &["invalid cron expression \"61 * * * *\""]),
        case("cron with 7 fields", job("", WECOM).replace("* * * * *", "0 0 0 * * * 2026"), j, "schedule", &["7 fields"]),
        case("cron that never fires", job("", WECOM).replace("* * * * *", "0 0 30 2 *"), j, "schedule", &["never fires"]),
        case("unknown zone in scheduler", format!("[scheduler]\ntimezone = \"Mars/Olympus\"\n{GOOD_JOB}"), None, "timezone", &["[scheduler]", "unknown time zone", "Mars/Olympus"]),
        case("unknown zone in a job", job("timezone = \"Asia/Shangai\"", WECOM), j, "timezone", &["unknown time zone", "Asia/Shangai"]),
        case("duplicate job names", format!("{GOOD_JOB}{GOOD_JOB}"), Some("standup"), "name", &["duplicate"]),
        case("job name with a colon", job("", WECOM).replace("name = \"j\"", "name = \"a:b\""), Some("a:b"), "name", &["characters", "A-Z a-z 0-9"]),
        case("job name with a space", job("", WECOM).replace("name = \"j\"", "name = \"daily report\""), Some("daily report"), "name", &["A-Z a-z 0-9"]),
        case("unset variable", job("", &WECOM.replace("WECOM_WEBHOOK", "MISSING_HOOK")), j, "action.webhook", &["environment variable MISSING_HOOK is not set"]),
        case("unterminated variable", job("", &WECOM.replace("${WECOM_WEBHOOK}", "${WECOM_WEBHOOK")), j, "action.webhook", &["unterminated"]),
        case("webhook not a URL", job("", &WECOM.replace("${WECOM_WEBHOOK}", "${NOT_A_URL}")), j, "action.webhook", &["not a URL"]),
        case("webhook is a key alone", job("", &WECOM.replace("${WECOM_WEBHOOK}", "693axxx6-7aoc-4bc4-97a0-0ec2sifa5aaa")), j, "action.webhook", &["key alone", "full webhook URL", "https://qyapi.weixin.qq.com"]),
        case("ftp webhook", job("", &WECOM.replace("${WECOM_WEBHOOK}", "ftp://example.com/x")), j, "action.webhook", &["\"ftp\"", "not http or https"]),
        case("unknown action type", job("", "type = \"pager\""), j, "action.type", &["unknown value \"pager\"", "wecom, dingtalk"]),
        case("unknown msgtype", job("", &WECOM.replace("\"text\"", "\"video\"")), j, "action.msgtype", &["unknown value \"video\"", "text, markdown"]),
        case("missing msgtype", job("", &WECOM.replace("msgtype = \"text\"\n", "")), j, "action.msgtype", &["missing field"]),
        case("missing content", job("", &WECOM.replace("content = \"x\"", "")), j, "action.content", &["required by msgtype \"text\""]),
        case("markdown with mentioned_list", job("", &format!("{}\nmentioned_list = [\"@all\"]", WECOM.replace("\"text\"", "\"markdown\""))), j, "action.mentioned_list", &["not used by msgtype \"markdown\""]),
        case("text over 2048 bytes", job("", &WECOM.replace("\"x\"", &format!("\"{}\"", "a".repeat(2049)))), j, "action.content", &["2048", "2049"]),
        // 2100 two-byte characters: 4200 bytes, under 4096 characters.
        case("markdown over 4096 bytes", job("", &WECOM.replace("\"text\"", "\"markdown\"").replace("\"x\"", &format!("\"{}\"", "é".repeat(2100)))), j, "action.content", &["4096", "4200"]),
        case("template syntax error on its line 2", job("", &WECOM.replace("\"x\"", "\"first\\nhello {{ slot \"")), j, "action.content", &["line 2"]),
        case("template unknown variable", job("", &WECOM.replace("\"x\"", "\"{{ slto }}\"")), j, "action.content", &["undefined", "slto"]),
        case("non-redis URL in nodes", format!("[redis]\nnodes = [\"http://127.0.0.1:6379\"]\n{GOOD_JOB}"), None, "nodes[0]", &["[redis]", "not a Redis URL"]),
        case("duplicate node", format!("[redis]\nnodes = [\"redis://a:6379\", \"redis://a:6379\"]\n{GOOD_JOB}"), None, "nodes[1]", &["twice"]),
        case("duplicate node, once with the default port", format!("[redis]\nnodes = [\"redis://10.0.0.1:6379\", \"redis://10.0.0.2\", \"redis://10.0.0.1\"]\n{GOOD_JOB}"), None, "nodes[2]", &["10.0.0.1:6379", "twice"]),
        case("no nodes", format!("[redis]\nnodes = []\n{GOOD_JOB}"), None, "nodes", &["at least one"]),
        case("zero timeout", job("timeout = \"0s\"", WECOM), j, "timeout", &["0s is out of range", "1ms to 1d"]),
        case("absurd timeout", job("timeout = \"300000000000y\"", WECOM), j, "timeout", &["300000000000years is out of range", "1ms to 1d"]),
        case("absurd catch_up", job("catch_up = \"300000000000y\"", WECOM), j, "catch_up", &["300000000000years is out of range", "1s to 7d"]),
        case("zero catch_up", job("catch_up = \"0s\"", WECOM), j, "catch_up", &["out of range", "1s to 7d", "leave catch_up out"]),
        case("catch_up all over its bound", job("schedule = \"* * * * * *\"\ncatch_up = \"1h\"\ncatch_up_policy = \"all\"", WECOM).replacen("schedule = \"* * * * *\"\n", "", 1), j, "catch_up", &["holds more than 1000 slots", "at least 1001", "1h"]),
        case("absurd max_clock_skew", format!("[scheduler]\nmax_clock_skew = \"2h\"\n{GOOD_JOB}"), None, "max_clock_skew", &["[scheduler]", "2h is out of range", "0s to 1h"]),
        case("zero node_timeout", format!("[redis]\nnodes = [\"redis://a:6379\"]\nnode_timeout = \"0s\"\n{GOOD_JOB}"), None, "node_timeout", &["[redis]", "0s is out of range", "1ms to 10s"]),
        case("absurd retry_delay", format!("[redis]\nnodes = [\"redis://a:6379\"]\nretry_delay = \"300000000000y\"\n{GOOD_JOB}"), None, "retry_delay", &["[redis]", "out of range", "0s to 1s"]),
        case("absurd rate window", job("", &format!("{WECOM}\nrate = \"1/300000000000y\"")), j, "action.rate", &["the window 300000000000years is out of range", "1ms to 1d"]),
        case("bad duration", job("timeout = \"soon\"", WECOM), j, "timeout", &["\"soon\" is not a duration", "\"30s\""]),
        case("http with a bad method", job("", "type = \"http\"\nurl = \"https://x.example/h\"\nmethod = \"FETCH\""), j, "action.method", &["unknown method \"FETCH\""]),
        case("http with a bad header name", job("", "type = \"http\"\nurl = \"https://x.example/h\"\nheaders = { \"Bad Header\" = \"v\" }"), j, "action.headers.Bad Header", &["not a valid HTTP header name"]),
        case("no jobs", "[scheduler]\ntimezone = \"UTC\"\n", None, "", &["no jobs"]),
        case("every job disabled", format!("{}{}", job("enabled = false", WECOM), GOOD_JOB.replace("[job.action]", "enabled = false\n[job.action]")), None, "", &["enabled = false", "nothing to run"]),
        case("empty file", "", None, "", &["no jobs"]),
        case("empty deployment", format!("[scheduler]\ndeployment = \"\"\n{GOOD_JOB}"), None, "deployment", &["[scheduler]", "non-empty"]),
        case("key_prefix with a space", format!("[scheduler]\nkey_prefix = \"my app\"\n{GOOD_JOB}"), None, "key_prefix", &["[scheduler]", "whitespace"]),
        case("bad rate", job("", &format!("{WECOM}\nrate = \"lots\"")), j, "action.rate", &["not a rate"]),
        case("missing secret file", job("", &WECOM.replace("webhook = \"${WECOM_WEBHOOK}\"", "webhook_file = \"/nonexistent/secret\"")), j, "action.webhook_file", &["no such file"]),
        case("bad [http] listen", format!("[http]\nlisten = \"everywhere\"\n{GOOD_JOB}"), None, "listen", &["address"]),
        case("bad [telemetry] otlp_endpoint", format!("[telemetry]\notlp_endpoint = \"collector:4318\"\n{GOOD_JOB}"), None, "otlp_endpoint", &["http(s) URL"]),
        case("zero deadline", format!("{ONCALL}{}", job("deadline = \"0s\"\non_failure = \"oncall\"", WECOM)), j, "deadline", &["out of range", "1s to 7d"]),
        case("deadline reaching the next slot", format!("{ONCALL}{}", job("deadline = \"1m\"\non_failure = \"oncall\"", WECOM)), j, "deadline", &["1m reaches the job's next slot", "before the next slot"]),
        case("deadline without an alert", job("deadline = \"30s\"", WECOM), j, "deadline", &["needs an alert", "on_failure"]),
        case("catch_up_policy without catch_up", job("catch_up_policy = \"all\"", WECOM), j, "catch_up_policy", &["needs catch_up"]),
        case("unknown calendar", job("calendar = \"nope\"\ndays = \"workdays\"", WECOM), j, "calendar", &["unknown calendar \"nope\"", "no [calendar.NAME] section"]),
        case("built-in calendar without its section", job("calendar = \"cn\"\ndays = \"workdays\"", WECOM), j, "calendar", &["unknown calendar \"cn\"", "[calendar.cn] with builtin = \"cn\""]),
        case("days without calendar", job("days = \"workdays\"", WECOM), j, "days", &["needs calendar"]),
        case("calendar without days", format!("{CN}{}", job("calendar = \"cn\"", WECOM)), j, "calendar", &["needs days"]),
        case("days neither workdays nor holidays", format!("{CN}{}", job("calendar = \"cn\"\ndays = \"weekends\"", WECOM)), j, "days", &["unknown value \"weekends\"", "workdays, holidays"]),
        case("calendar never matching the cron", format!("[calendar.plain]\n{}", job("calendar = \"plain\"\ndays = \"workdays\"", WECOM).replace("* * * * *", "0 9 * * Sat,Sun")), j, "days", &["never falls on workdays", "\"plain\""]),
        case("unknown built-in calendar", format!("[calendar.us]\nbuiltin = \"us\"\n{GOOD_JOB}"), None, "builtin", &["calendar \"us\"", "unknown built-in calendar \"us\"", "built in: cn"]),
        case("unknown calendar field", format!("[calendar.office]\ncolour = 1\n{GOOD_JOB}"), None, "colour", &["calendar \"office\"", "unknown field"]),
        case("calendar holiday not a date", format!("[calendar.office]\nholidays = [\"2026-12-24\", \"2026-13-01\"]\n{GOOD_JOB}"), None, "holidays[1]", &["calendar \"office\"", "\"2026-13-01\" is not a date"]),
        case("calendar workday a number", format!("[calendar.office]\nworkdays = [20261227]\n{GOOD_JOB}"), None, "workdays[0]", &["calendar \"office\"", "20261227 is not a date"]),
        case("calendar day in both lists", format!("[calendar.office]\nholidays = [2026-12-27]\nworkdays = [\"2026-12-27\"]\n{GOOD_JOB}"), None, "workdays[0]", &["in holidays too"]),
        case("calendar .ics missing", format!("[calendar.office]\nics = \"/nonexistent/office.ics\"\n{GOOD_JOB}"), None, "ics", &["calendar \"office\"", "/nonexistent/office.ics", "no such file"]),
        case("calendar .ics not iCalendar", ics_calendar("not-ics"), None, "ics", &["calendar \"office\"", "not-ics.ics", "does not start with BEGIN:VCALENDAR"]),
        case("calendar .ics truncated", ics_calendar("truncated"), None, "ics", &["truncated.ics", "not valid iCalendar", "line 4"]),
        case("calendar .ics DTSTART not a date", ics_calendar("bad-date"), None, "ics", &["bad-date.ics", "event \"Offsite\"", "DTSTART \"20261399\" is not a date"]),
        case("calendar .ics DTEND before DTSTART", ics_calendar("end-before-start"), None, "ics", &["event \"Retreat\"", "DTEND \"20261208\" is not after DTSTART"]),
        case("calendar .ics bad RRULE", ics_calendar("bad-rrule"), None, "ics", &["event \"Founders day\"", "RRULE \"FREQ=SOMETIMES\""]),
    ]
}

#[test]
fn each_malformed_config_names_the_file_job_and_field() {
    let cases = cases();
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for c in &cases {
        let outcome = std::panic::catch_unwind(|| parse(&c.text));
        let Ok(result) = outcome else {
            failures.push(format!("{}: panicked", c.name));
            continue;
        };
        match result {
            Ok(_) => failures.push(format!("{}: accepted", c.name)),
            Err(errors) => {
                if let Err(why) = check_case(c, &errors) {
                    failures.push(format!("{}: {why}\n    got: {errors}", c.name));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn check_case(c: &Case, errors: &ConfigErrors) -> Result<(), String> {
    let shown = errors.to_string();
    if errors.errors.is_empty() {
        return Err("an Err with no errors".into());
    }
    // Each error is one line starting with the file.
    if shown.lines().count() != errors.errors.len()
        || !shown.lines().all(|l| l.starts_with("jobs.toml"))
    {
        return Err("not one line per error, each starting with jobs.toml".into());
    }
    for piece in c.says {
        if !shown.contains(piece) {
            return Err(format!("the text does not say {piece:?}"));
        }
    }
    // The errors about the case's job (for None: about no job); the first is the one checked
    // for a line or the whole file.
    let matching: Vec<_> = errors.errors.iter().filter(|e| e.job() == c.job).collect();
    let Some(first) = matching.first() else {
        return Err(format!("no error names job {:?}", c.job));
    };
    if let Some(job) = c.job
        && !shown.contains(&format!("job {job:?}"))
    {
        return Err(format!("the text does not name job {job:?}"));
    }
    if let Some(line) = c.field.strip_prefix("line ") {
        let line: usize = line.parse().unwrap();
        if !matches!(first.location, Location::Line { line: l, .. } if l == line) {
            return Err(format!("location {:?} is not line {line}", first.location));
        }
        if !shown.starts_with(&format!("jobs.toml:{line}:")) {
            return Err(format!("the text does not start with jobs.toml:{line}:"));
        }
    } else if c.field.is_empty() {
        if first.location != Location::File {
            return Err(format!("location {:?} is not the file", first.location));
        }
    } else {
        if !matching.iter().any(|e| e.field_name() == Some(c.field)) {
            let fields: Vec<_> = errors.errors.iter().map(|e| e.field_name()).collect();
            return Err(format!(
                "no error of job {:?} is about field {:?} (fields: {fields:?})",
                c.job, c.field
            ));
        }
        if !shown.contains(&format!("field {:?}", c.field)) {
            return Err(format!("the text does not name field {:?}", c.field));
        }
    }
    for secret in [WEBHOOK_KEY, ENV_SECRET] {
        if shown.contains(secret) {
            return Err(format!("the text leaks {secret:?}"));
        }
    }
    Ok(())
}

#[test]
fn unreadable_files_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let missing = config::load(&dir.path().join("nope.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("nope.toml") && missing.contains("no such file"),
        "{missing}"
    );
    let is_dir = config::load(dir.path()).unwrap_err().to_string();
    assert!(is_dir.contains("cannot read"), "{is_dir}");
    let garbage = dir.path().join("garbage.toml");
    std::fs::write(&garbage, [0xff, 0xfe, 0x00, 0x9c, 0x80, b'[', b'[']).unwrap();
    let not_utf8 = config::load(&garbage).unwrap_err().to_string();
    assert!(
        not_utf8.contains("garbage.toml") && not_utf8.contains("not UTF-8"),
        "{not_utf8}"
    );
    // Each is one error about the file as a whole, its text starting with the path.
    for path in [dir.path().join("nope.toml"), dir.path().to_owned(), garbage] {
        let errors = config::load(&path).unwrap_err();
        assert_eq!(errors.errors.len(), 1, "{errors}");
        assert_eq!(errors.errors[0].location, Location::File, "{errors}");
        assert!(
            errors.to_string().starts_with(&path.display().to_string()),
            "{errors}"
        );
    }
}

#[test]
fn all_errors_of_a_file_are_reported_at_once() {
    // A section error and an error in each of two jobs: all three are reported.
    let text = format!(
        "[scheduler]\nkey_prefix = \"a b\"\n{}\n{}",
        job("timeout = \"0s\"", WECOM),
        job("", WECOM)
            .replace("name = \"j\"", "name = \"k\"")
            .replace("* * * * *", "* *")
    );
    let errors = parse(&text).unwrap_err();
    assert!(errors.errors.len() >= 3, "{errors}");
    let jobs: Vec<Option<&str>> = errors.errors.iter().map(|e| e.job()).collect();
    for job in [None, Some("j"), Some("k")] {
        assert!(jobs.contains(&job), "no error about {job:?}: {errors}");
    }
}

#[test]
fn defaults_and_secrets_in_a_valid_config() {
    let text = format!(
        "[redis]\nnodes = [\"redis://:hunter2pw@10.0.0.1:6379\", \"rediss://u:hunter2pw@10.0.0.2:6380\", \"redis://10.0.0.3\"]\n{}",
        job(
            "",
            &WECOM.replace(
                "${WECOM_WEBHOOK}",
                "${HOOK:-https://example.com/send?key=defaultkey}"
            )
        )
    );
    let config = parse(&text).unwrap();
    assert_eq!(config.redis.as_ref().unwrap().nodes.len(), 3);
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2pw"), "{shown}");
    assert!(!shown.contains("defaultkey"), "{shown}");
}

#[test]
fn a_disabled_jobs_unset_variable_is_not_an_error() {
    let text = format!(
        "{}{}",
        job("", "type = \"log\"\ncontent = \"tick\"").replace("name = \"j\"", "name = \"on\""),
        job(
            "enabled = false",
            &WECOM.replace("${WECOM_WEBHOOK}", "${NEVER_SET_HOOK}")
        )
        .replace("name = \"j\"", "name = \"off\""),
    );
    let config = parse_with(&text, &HashMap::new()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config
            .jobs
            .iter()
            .map(|j| j.name.as_str())
            .collect::<Vec<_>>(),
        ["on"]
    );
    assert_eq!(config.disabled, ["off"]);

    // The same job enabled: the variable is required, and named.
    let enabled = text.replace("enabled = false", "enabled = true");
    let errors = parse_with(&enabled, &HashMap::new()).unwrap_err();
    let error = errors
        .errors
        .iter()
        .find(|e| e.job() == Some("off"))
        .unwrap_or_else(|| panic!("{errors}"));
    assert_eq!(error.field_name(), Some("action.webhook"));
    assert!(
        errors.to_string().contains("NEVER_SET_HOOK is not set"),
        "{errors}"
    );
}

#[test]
fn a_variable_default_is_used_when_the_variable_is_unset_or_empty() {
    let text = format!(
        "[redis]\nnodes = [\"${{REDIS_A:-redis://10.1.1.1:6390}}\"]\n{}",
        job("", "type = \"log\"\ncontent = \"tick\"")
    );
    for env in [
        HashMap::new(),
        HashMap::from([("REDIS_A".to_owned(), String::new())]),
    ] {
        let config = parse_with(&text, &env).unwrap_or_else(|e| panic!("{e}"));
        let nodes = &config.redis.as_ref().unwrap().nodes;
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].address(), "10.1.1.1:6390");
    }
    // Set: the variable wins over the default.
    let env = HashMap::from([("REDIS_A".to_owned(), "redis://10.2.2.2:6391".to_owned())]);
    let config = parse_with(&text, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.redis.as_ref().unwrap().nodes[0].address(),
        "10.2.2.2:6391"
    );
}

/// A `[redis]` section of three nodes, two with `REDIS_PASSWORD` (one over TLS).
fn three_nodes() -> String {
    format!(
        "[redis]\nnodes = [\n  \"redis://:{REDIS_PASSWORD}@10.0.0.1:6379\",\n  \"rediss://default:{REDIS_PASSWORD}@10.0.0.2:6380\",\n  \"redis://10.0.0.3\",\n]\nnode_timeout = \"80ms\"\n"
    )
}

#[test]
fn three_nodes_with_tls_and_passwords_parse_and_never_print_the_password() {
    let text = format!(
        "{}{}",
        three_nodes(),
        job("timezone = \"Asia/Shanghai\"", WECOM)
    );
    let config = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let redis = config.redis.as_ref().unwrap();
    let addresses: Vec<String> = redis.nodes.iter().map(|n| n.address()).collect();
    assert_eq!(
        addresses,
        ["10.0.0.1:6379", "10.0.0.2:6380", "10.0.0.3:6379"]
    );
    assert_eq!(redis.nodes[1].expose().scheme(), "rediss");
    assert_eq!(redis.nodes[0].expose().password(), Some(REDIS_PASSWORD));
    assert_eq!(
        redis.lock.node_timeout,
        std::time::Duration::from_millis(80)
    );
    assert_eq!(config.jobs.len(), 1);
    assert_eq!(
        config.jobs[0].zone(),
        "Asia/Shanghai".parse::<chrono_tz::Tz>().unwrap()
    );

    let debug = format!("{config:?}");
    for secret in [REDIS_PASSWORD, WEBHOOK_KEY] {
        assert!(!debug.contains(secret), "Debug shows {secret}: {debug}");
    }
    let shown: Vec<String> = redis.nodes.iter().map(ToString::to_string).collect();
    assert!(
        shown.iter().all(|s| !s.contains(REDIS_PASSWORD)),
        "{shown:?}"
    );
}

#[test]
fn errors_beside_node_passwords_never_print_them() {
    let texts = [
        // Another field is bad.
        format!("{}{}", three_nodes(), job("timeout = \"0s\"", WECOM)),
        format!("{}node_timeout = \"1h\"\n{GOOD_JOB}", three_nodes()),
        // The node itself is bad.
        format!("[redis]\nnodes = [\"http://:{REDIS_PASSWORD}@10.0.0.1:6379\"]\n{GOOD_JOB}"),
        format!(
            "[redis]\nnodes = [\"redis://:{REDIS_PASSWORD}@10.0.0.1\", \"redis://:{REDIS_PASSWORD}@10.0.0.1:6379\"]\n{GOOD_JOB}"
        ),
        format!("[redis]\nnodes = [\"redis://:{REDIS_PASSWORD}@\"]\n{GOOD_JOB}"),
    ];
    for text in &texts {
        let errors = parse(text).expect_err(text);
        // The one-line form and the one with the source line under each error.
        let shown = format!("{errors}\n{errors:#}");
        assert!(!shown.contains(REDIS_PASSWORD), "{shown}");
        assert!(
            !format!("{errors:?}").contains(REDIS_PASSWORD),
            "{errors:?}"
        );
    }
}

#[test]
fn secrets_from_the_environment_never_appear_in_errors() {
    // Each text reads variable W, set to the value beside it.
    let from_w = || job("", &WECOM.replace("${WECOM_WEBHOOK}", "${W}"));
    let cases = [
        // Not a URL.
        (from_w(), format!("not a url {ENV_SECRET}")),
        // A key alone.
        (from_w(), format!("{ENV_SECRET}-7aoc-4bc4-97a0-0ec2")),
        // A URL with another scheme, the secret in its password and query.
        (
            from_w(),
            format!("ftp://u:{ENV_SECRET}@example.com/send?key={ENV_SECRET}"),
        ),
        // A valid webhook, beside a bad field.
        (
            job(
                "timeout = \"0s\"",
                &WECOM.replace("${WECOM_WEBHOOK}", "https://example.com/send?key=${W}"),
            ),
            ENV_SECRET.to_owned(),
        ),
        // A Redis URL of another scheme.
        (
            format!("[redis]\nnodes = [\"${{W}}\"]\n{GOOD_JOB}"),
            format!("http://:{ENV_SECRET}@10.0.0.1:6379"),
        ),
        // A header value that is not a valid header value.
        (
            job(
                "",
                "type = \"http\"\nurl = \"https://example.com/h\"\nheaders = { Authorization = \"${W}\" }",
            ),
            format!("Bearer {ENV_SECRET}\n"),
        ),
        // A URL with spaces in the host.
        (
            job("", "type = \"http\"\nurl = \"${W}\""),
            format!("https://{ENV_SECRET} host/x"),
        ),
    ];
    for (text, value) in &cases {
        let mut vars = env();
        vars.insert("W".to_owned(), value.clone());
        let errors = match parse_with(text, &vars) {
            Ok(_) => panic!("accepted with W={value:?}:\n{text}"),
            Err(errors) => errors,
        };
        let shown = format!("{errors}\n{errors:#}");
        assert!(
            !shown.contains(ENV_SECRET),
            "W={value:?} leaks into: {shown}"
        );
        assert!(
            !format!("{errors:?}").contains(ENV_SECRET),
            "W={value:?} leaks into Debug: {errors:?}"
        );
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_slotcron"))
}

#[test]
fn cli_exits_2_on_a_bad_config_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, job("", WECOM).replace("* * * * *", "61 * * * *")).unwrap();
    for verb in ["check", "run"] {
        let out = bin()
            .args([verb, "--config", path.to_str().unwrap()])
            .env("WECOM_WEBHOOK", "https://x.example/s?key=k")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{verb}: {stderr}");
        assert!(
            stderr.contains("jobs.toml")
                && stderr.contains("job \"j\"")
                && stderr.contains("schedule"),
            "{stderr}"
        );
        assert!(
            !stdout.contains("slotcron started") && !stderr.contains("panicked"),
            "{stdout}{stderr}"
        );
    }
    let out = bin()
        .args(["run", "--config", path.to_str().unwrap()])
        .env_remove("WECOM_WEBHOOK")
        .output()
        .unwrap();
    let _ = out;
    std::fs::write(&path, job("", WECOM)).unwrap();
    let unset = bin()
        .args(["run", "--config", path.to_str().unwrap()])
        .env_remove("WECOM_WEBHOOK")
        .output()
        .unwrap();
    assert_eq!(unset.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unset.stderr).contains("WECOM_WEBHOOK"));
}

/// The absurd and the zero durations of issue 11: config errors from both `check` and `run`,
/// exit 2, and `run` starts nothing (no "slotcron started", no request to the webhook).
#[test]
fn cli_exits_2_on_out_of_range_durations_from_check_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    let cases = [
        (
            "timeout = \"300000000000y\"",
            "timeout",
            "300000000000years",
        ),
        (
            "catch_up = \"300000000000y\"",
            "catch_up",
            "300000000000years",
        ),
        ("timeout = \"0s\"", "timeout", "0s"),
        ("catch_up = \"0ms\"", "catch_up", "0s"),
    ];
    for (line, field, value) in cases {
        std::fs::write(&path, job(line, "type = \"log\"\ncontent = \"x\"")).unwrap();
        for verb in ["check", "run"] {
            let out = bin()
                .args([verb, "--config", path.to_str().unwrap()])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(2), "{verb} {line}: {stderr}");
            let expected = format!("job \"j\", field \"{field}\": {value} is out of range");
            assert!(stderr.contains(&expected), "{verb} {line}: {stderr}");
            assert!(
                !stdout.contains("slotcron started") && !stderr.contains("slotcron started"),
                "{verb} {line} started: {stdout}{stderr}"
            );
        }
    }
}

#[test]
fn check_prints_next_slots_in_the_job_zone_without_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, job("timezone = \"Asia/Shanghai\"", WECOM)).unwrap();
    let out = bin()
        .args(["check", "--next", "3"])
        .env("SLOTCRON_CONFIG", &path)
        .env(
            "WECOM_WEBHOOK",
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=SECRETKEY123",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("+08:00").count(), 3, "{stdout}");
    assert!(
        stdout.contains("key=***") && !stdout.contains("SECRETKEY123"),
        "{stdout}"
    );
}

// --- The loader never panics. ---

/// A TOML value of a random kind, biased to the shapes the real fields take.
fn toml_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        "[a-zA-Z0-9 */,:?=@.${}-]{0,24}".prop_map(|s| format!("{s:?}")),
        prop::sample::select(vec![
            "\"* * * * *\"",
            "\"0 30 9 * * Mon-Fri\"",
            "\"0 0 30 2 *\"",
            "\"30s\"",
            "\"0s\"",
            "\"300000000000y\"",
            "\"8d\"",
            "\"1ns\"",
            "\"1/300000000000y\"",
            "\"Asia/Shanghai\"",
            "\"Nowhere/City\"",
            "\"wecom\"",
            "\"http\"",
            "\"log\"",
            "\"text\"",
            "\"markdown\"",
            "\"GET\"",
            "\"redis://127.0.0.1:6379\"",
            "\"rediss://:pw@h:1\"",
            "\"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k\"",
            "\"${UNSET}\"",
            "\"${X:-d}\"",
            "\"{{ slot }}\"",
            "\"{{ nope\"",
            "\"\"",
        ])
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| format!("{n:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec((toml_key(), inner), 0..3).prop_map(|kv| {
                let body: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{ {} }}", body.join(", "))
            }),
        ]
    })
}

fn toml_key() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec![
            "name", "schedule", "timezone", "timeout", "enabled", "overlap", "catch_up",
            "catch_up_policy", "action", "type", "webhook", "msgtype", "content", "mentioned_list",
            "mentioned_mobile_list", "url", "method", "headers", "body", "argv", "articles",
            "nodes", "node_timeout", "retry_count", "retry_delay", "key_prefix", "max_clock_skew",
            "clock", "listen", "rate", "webhook_file", "ca_file", "job", "scheduler", "redis",
        ])
        .prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
    ]
}

fn toml_document() -> impl Strategy<Value = String> {
    let header = prop::sample::select(vec![
        "[[job]]",
        "[job.action]",
        "[scheduler]",
        "[redis]",
        "[http]",
        "[telemetry]",
        "[job]",
        "",
    ]);
    let line = (toml_key(), toml_value()).prop_map(|(k, v)| format!("{k} = {v}"));
    prop::collection::vec((header, prop::collection::vec(line, 0..6)), 0..6).prop_map(|tables| {
        tables
            .into_iter()
            .map(|(h, lines)| format!("{h}\n{}\n", lines.join("\n")))
            .collect()
    })
}

/// `env()` with X set but empty (`${X:-d}` takes its default).
fn env_for_proptest() -> HashMap<String, String> {
    let mut env = env();
    env.insert("X".to_owned(), String::new());
    env
}

/// A valid file with something in every section a near-valid edit can break.
fn edit_base() -> String {
    format!(
        "{}{GOOD_JOB}{}",
        three_nodes(),
        job(
            "timezone = \"Asia/Shanghai\"\ntimeout = \"30s\"",
            &format!("{WECOM}\nmentioned_list = [\"@all\"]")
        )
    )
}

/// A duration field: its name in errors, a file with a value placed in it, and its range.
type DurationField = (
    &'static str,
    fn(&str) -> String,
    config::durations::DurationRange,
);

/// Each duration field of jobs.toml.
fn duration_fields() -> Vec<DurationField> {
    use config::durations as d;
    vec![
        (
            "timeout",
            |v| job(&format!("timeout = {v:?}"), WECOM),
            d::TIMEOUT,
        ),
        (
            "catch_up",
            |v| job(&format!("catch_up = {v:?}"), WECOM),
            d::CATCH_UP,
        ),
        (
            "max_clock_skew",
            |v| format!("[scheduler]\nmax_clock_skew = {v:?}\n{GOOD_JOB}"),
            d::MAX_CLOCK_SKEW,
        ),
        (
            "node_timeout",
            |v| format!("[redis]\nnodes = [\"redis://a:6379\"]\nnode_timeout = {v:?}\n{GOOD_JOB}"),
            d::NODE_TIMEOUT,
        ),
        (
            "retry_delay",
            |v| format!("[redis]\nnodes = [\"redis://a:6379\"]\nretry_delay = {v:?}\n{GOOD_JOB}"),
            d::RETRY_DELAY,
        ),
        (
            "action.rate",
            |v| job("", &format!("{WECOM}\nrate = \"1/{v}\"")),
            d::RATE_WINDOW,
        ),
    ]
}

/// A duration as users write it: a count (zero, small or absurd) and a unit.
fn duration_text() -> impl Strategy<Value = String> {
    let count = prop_oneof![
        Just(0u64),
        1u64..100,
        100u64..100_000,
        Just(300_000_000_000),
        any::<u64>(),
    ];
    let unit = prop::sample::select(vec!["ns", "us", "ms", "s", "m", "min", "h", "d", "w", "y"]);
    (count, unit).prop_map(|(n, u)| format!("{n}{u}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_duration_field_is_accepted_exactly_inside_its_range(
        field in 0usize..6,
        value in duration_text(),
    ) {
        let (name, place, range) = duration_fields()[field];
        let result = parse(&place(&value));
        match humantime::parse_duration(&value) {
            // Not a duration at all (a count too large for its unit): an error on the field.
            Err(_) => {
                let errors = result.expect_err("an unparseable duration was accepted");
                prop_assert!(errors.errors.iter().any(|e| e.field_name() == Some(name)), "{}", errors);
            }
            Ok(parsed) if range.contains(parsed) => {
                prop_assert!(result.is_ok(), "{} = {:?} is inside {} but refused: {}", name, value, range, result.unwrap_err());
            }
            Ok(_) => {
                let errors = result.expect_err("an out-of-range duration was accepted");
                let shown = errors.to_string();
                prop_assert!(errors.errors.iter().any(|e| e.field_name() == Some(name)), "{}", shown);
                // A rate's zero window is refused by the rate's own parser, before the range.
                let zero_rate = name == "action.rate" && shown.contains("must be greater than 0");
                prop_assert!(zero_rate || (shown.contains("is out of range") && shown.contains(&range.to_string())), "{}", shown);
            }
        }
    }

    #[test]
    fn config_loader_never_panics_on_arbitrary_text(text in ".{0,400}") {
        if let Err(errors) = parse_with(&text, &env_for_proptest()) {
            prop_assert!(!errors.errors.is_empty());
            prop_assert!(errors.to_string().starts_with("jobs.toml"));
        }
    }

    #[test]
    fn config_loader_never_panics_on_generated_documents(text in toml_document()) {
        if let Err(errors) = parse_with(&text, &env_for_proptest()) {
            prop_assert!(!errors.errors.is_empty());
            prop_assert!(errors.to_string().starts_with("jobs.toml"));
        }
    }

    #[test]
    fn config_loader_never_panics_on_edited_valid_configs(
        cut in 0usize..1000,
        insert in "[\\[\\]{}=\"'\\n#$ a-z0-9]{0,6}",
    ) {
        // A valid file with a few characters spliced in somewhere: mostly near-valid input.
        let base = edit_base();
        prop_assert!(parse(&base).is_ok(), "the base is valid");
        let mut at = cut % (base.len() + 1);
        while !base.is_char_boundary(at) {
            at -= 1;
        }
        let text = format!("{}{insert}{}", &base[..at], &base[at..]);
        if let Err(errors) = parse_with(&text, &env_for_proptest()) {
            prop_assert!(!errors.errors.is_empty());
            let shown = errors.to_string();
            prop_assert!(shown.starts_with("jobs.toml"));
            prop_assert!(!shown.contains(WEBHOOK_KEY), "{}", shown);
        }
    }
}

// --- Errors as cargo shows them: the place, the line, a caret, and the word meant. ---

/// One mistake as a person makes it, and where the error must point: `marked` is the text the
/// caret underlines, on the line of the file that holds `marked` after `after` (the first such
/// line if `after` is empty); `meant` is the word a "did you mean" must offer, where one fits.
/// A value that may be a secret (a webhook, a node) is shown masked: `"***"` under the caret.
struct Mistake {
    name: &'static str,
    text: String,
    after: &'static str,
    marked: &'static str,
    meant: Option<&'static str>,
    masked: bool,
}

fn mistake(
    name: &'static str,
    text: impl Into<String>,
    marked: &'static str,
    meant: Option<&'static str>,
) -> Mistake {
    Mistake {
        name,
        text: text.into(),
        after: "",
        marked,
        meant,
        masked: false,
    }
}

/// A `log` job `j` with `extra` job lines.
fn log_job(extra: &str) -> String {
    job(extra, "type = \"log\"\ncontent = \"x\"")
}

/// A secret file for the `NAME_file` mistakes (its path is absolute, so the test's directory
/// does not matter).
fn secret_file() -> &'static str {
    static FILE: std::sync::OnceLock<tempfile::NamedTempFile> = std::sync::OnceLock::new();
    let file = FILE.get_or_init(|| {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "https://x.example/send?key=k\n").unwrap();
        file
    });
    file.path().to_str().unwrap()
}

fn mistakes() -> Vec<Mistake> {
    let alert = "[alert.oncall]\ntype = \"log\"\ncontent = \"x\"\n";
    vec![
        mistake(
            "misspelled job key",
            log_job("timout = \"30s\""),
            "timout",
            Some("timeout"),
        ),
        mistake(
            "misspelled scheduler key",
            format!("[scheduler]\ntimezon = \"UTC\"\n{GOOD_JOB}"),
            "timezon",
            Some("timezone"),
        ),
        mistake(
            "misspelled section",
            format!("[shceduler]\ntimezone = \"UTC\"\n{GOOD_JOB}"),
            "shceduler",
            Some("[scheduler]"),
        ),
        mistake(
            "misspelled job array",
            "[[jobs]]\nname = \"j\"\n",
            "jobs",
            Some("[[job]]"),
        ),
        mistake(
            "misspelled action key",
            job("", &format!("{WECOM}\nmentioned_lst = [\"@all\"]")),
            "mentioned_lst",
            Some("mentioned_list"),
        ),
        mistake(
            "misspelled NAME_file key",
            job(
                "",
                &format!(
                    "type = \"wecom\"\nwebhok_file = \"{}\"\nmsgtype = \"text\"\ncontent = \"x\"",
                    secret_file()
                ),
            ),
            "webhok_file",
            Some("webhook_file"),
        ),
        mistake(
            "misspelled redis key",
            format!("[redis]\nnodes = [\"redis://a:6379\"]\nnode_timout = \"1s\"\n{GOOD_JOB}"),
            "node_timout",
            Some("node_timeout"),
        ),
        mistake(
            "misspelled calendar key",
            format!("[calendar.office]\nholiday = [\"2026-12-24\"]\n{GOOD_JOB}"),
            "holiday",
            Some("holidays"),
        ),
        mistake(
            "misspelled zone in a job",
            log_job("timezone = \"Asia/Shangai\""),
            "\"Asia/Shangai\"",
            Some("Asia/Shanghai"),
        ),
        mistake(
            "misspelled zone in scheduler",
            format!("[scheduler]\ntimezone = \"Europe/Londn\"\n{GOOD_JOB}"),
            "\"Europe/Londn\"",
            Some("Europe/London"),
        ),
        mistake(
            "misspelled overlap",
            log_job("overlap = \"alow\""),
            "\"alow\"",
            Some("allow"),
        ),
        mistake(
            "misspelled dst_repeat",
            log_job("dst_repeat = \"boht\""),
            "\"boht\"",
            Some("both"),
        ),
        mistake(
            "misspelled dst_gap",
            log_job("dst_gap = \"skpi\""),
            "\"skpi\"",
            Some("skip"),
        ),
        mistake(
            "misspelled catch_up_policy",
            log_job("catch_up = \"1h\"\ncatch_up_policy = \"lastest\""),
            "\"lastest\"",
            Some("latest"),
        ),
        mistake(
            "misspelled action type",
            job("", "type = \"wecon\""),
            "\"wecon\"",
            Some("wecom"),
        ),
        mistake(
            "misspelled msgtype",
            job("", &WECOM.replace("\"text\"", "\"txt\"")),
            "\"txt\"",
            Some("text"),
        ),
        mistake(
            "misspelled days",
            format!("{CN}{}", log_job("calendar = \"cn\"\ndays = \"workday\"")),
            "\"workday\"",
            Some("workdays"),
        ),
        mistake(
            "misspelled clock",
            format!("[scheduler]\nclock = \"redsi\"\n{GOOD_JOB}"),
            "\"redsi\"",
            Some("redis"),
        ),
        mistake(
            "misspelled redis mode",
            format!("[redis]\nnodes = [\"redis://a:6379\"]\nmode = \"sentinal\"\n{GOOD_JOB}"),
            "\"sentinal\"",
            Some("sentinel"),
        ),
        mistake(
            "misspelled calendar name",
            format!(
                "[calendar.office]\n{}",
                log_job("calendar = \"ofice\"\ndays = \"workdays\"")
            ),
            "\"ofice\"",
            Some("office"),
        ),
        mistake(
            "misspelled alert name",
            format!("{alert}{}", log_job("on_failure = \"oncal\"")),
            "\"oncal\"",
            Some("oncall"),
        ),
        mistake(
            "cron minute 61",
            log_job("").replace("* * * * *", "61 * * * *"),
            "\"61 * * * *\"",
            None,
        ),
        mistake(
            "unset variable",
            job("", &WECOM.replace("WECOM_WEBHOOK", "MISSING_HOOK")),
            "\"${MISSING_HOOK}\"",
            None,
        ),
        mistake("duration as a number", log_job("timeout = 30"), "30", None),
        mistake(
            "duration without a unit",
            log_job("timeout = \"soon\""),
            "\"soon\"",
            None,
        ),
        Mistake {
            masked: true,
            ..mistake(
                "webhook without its scheme",
                job(
                    "",
                    &WECOM.replace(
                        "${WECOM_WEBHOOK}",
                        "qyapi.weixin.qq.com/cgi-bin/webhook/send",
                    ),
                ),
                "\"qyapi.weixin.qq.com/cgi-bin/webhook/send\"",
                None,
            )
        },
        Mistake {
            masked: true,
            ..mistake(
                "redis node without its scheme",
                format!("[redis]\nnodes = [\"10.0.0.1:6379\"]\n{GOOD_JOB}"),
                "\"10.0.0.1:6379\"",
                None,
            )
        },
        Mistake {
            after: "name = \"standup\"\n",
            ..mistake(
                "duplicate job name",
                format!("{GOOD_JOB}{GOOD_JOB}"),
                "\"standup\"",
                None,
            )
        },
        mistake("zero timeout", log_job("timeout = \"0s\""), "\"0s\"", None),
        mistake(
            "missing schedule",
            log_job("").replace("schedule = \"* * * * *\"\n", ""),
            "[[job]]",
            None,
        ),
    ]
}

/// Where `m.marked` is in `m.text`: its line, column (both from 1) and the line itself.
fn expected_place(m: &Mistake) -> (usize, usize, &str) {
    let from = m.text.find(m.after).unwrap() + m.after.len();
    let at = from + m.text[from..].find(m.marked).unwrap();
    let line_start = m.text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = m.text[..at].matches('\n').count() + 1;
    let column = m.text[line_start..at].chars().count() + 1;
    let text = m.text[line_start..].lines().next().unwrap();
    (line, column, text)
}

/// The error of `m` as printed for a person (`{:#}`): the file, line and column, the source
/// line, a caret under the marked text, and the word meant.
fn check_mistake(m: &Mistake, shown: &str) -> Result<(), String> {
    let (line, column, text) = expected_place(m);
    let (text, marked) = match m.masked {
        true => (text.replace(m.marked, "\"***\""), "\"***\""),
        false => (text.to_owned(), m.marked),
    };
    let head = format!("jobs.toml:{line}:{column}: ");
    let Some(start) = shown.find(&head) else {
        return Err(format!("no error at {head:?}"));
    };
    let block: Vec<&str> = shown[start..].lines().take(4).collect();
    let number = line.to_string();
    let gutter = " ".repeat(number.len());
    let caret = format!(
        "{gutter} | {}{}",
        " ".repeat(column - 1),
        "^".repeat(marked.chars().count())
    );
    let expected = [format!("{gutter} |"), format!("{number} | {text}"), caret];
    if block.len() != 4 || block[1..] != expected {
        return Err(format!("not the line and a caret: expected {expected:#?}"));
    }
    if let Some(meant) = m.meant {
        let said = format!("did you mean {meant:?}?");
        let said_bare = format!("did you mean {meant}?");
        if !block[0].contains(&said) && !block[0].contains(&said_bare) {
            return Err(format!("does not say {said:?}"));
        }
    }
    Ok(())
}

#[test]
fn each_config_mistake_shows_its_line_and_a_caret_and_the_word_meant() {
    let mistakes = mistakes();
    assert!(mistakes.len() >= 20);
    let mut failures = Vec::new();
    for m in &mistakes {
        let shown = match parse(&m.text) {
            Ok(_) => {
                failures.push(format!("{}: accepted", m.name));
                continue;
            }
            Err(errors) => format!("{errors:#}"),
        };
        if let Err(why) = check_mistake(m, &shown) {
            failures.push(format!("{}: {why}\n    got:\n{shown}", m.name));
        }
        for secret in [WEBHOOK_KEY, ENV_SECRET] {
            if shown.contains(secret) {
                failures.push(format!("{}: shows {secret}", m.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} mistakes failed:\n{}",
        failures.len(),
        mistakes.len(),
        failures.join("\n")
    );
}

/// The job of issue 32: an unset variable, a misspelled key, an unknown zone and a cron with
/// minute 61, each independent of the others.
const FOUR_MISTAKES: &str = r#"[[job]]
name = "report"
schedule = "61 * * * *"
timezone = "Europe/Londn"
timout = "30s"
[job.action]
type = "wecom"
webhook = "${REPORT_WEBHOOK}"
msgtype = "text"
content = "x"
"#;

#[test]
fn four_independent_mistakes_in_one_job_are_reported_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, FOUR_MISTAKES).unwrap();
    let out = bin()
        .args(["check", "--config", path.to_str().unwrap()])
        .env_remove("REPORT_WEBHOOK")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let file = path.display();
    for (place, says) in [
        ("3:12", "minute field"),
        ("4:12", "did you mean \"Europe/London\"?"),
        ("5:1", "did you mean \"timeout\"?"),
        ("8:11", "REPORT_WEBHOOK is not set"),
    ] {
        let head = format!("{file}:{place}: job \"report\", field ");
        let line = stderr.lines().find(|l| l.starts_with(&head));
        assert!(
            line.is_some_and(|l| l.contains(says)),
            "no {head}...{says}:\n{stderr}"
        );
    }
    assert!(stderr.contains("4 error(s)"), "{stderr}");
}

#[test]
fn a_mistake_is_reported_once_not_with_the_errors_that_follow_from_it() {
    let cases = [
        // The file of a NAME_file cannot be read: not also "missing webhook".
        job(
            "",
            &WECOM.replace(
                "webhook = \"${WECOM_WEBHOOK}\"",
                "webhook_file = \"/nonexistent/secret\"",
            ),
        ),
        // A misspelled NAME_file: not also "missing webhook".
        job(
            "",
            &format!(
                "type = \"wecom\"\nwebhok_file = \"{}\"\nmsgtype = \"text\"\ncontent = \"x\"",
                secret_file()
            ),
        ),
        // A misspelled days: not also "calendar needs days".
        format!("{CN}{}", log_job("calendar = \"cn\"\ndays = \"workday\"")),
        // A catch_up that is no duration: not also "catch_up_policy needs catch_up".
        log_job("catch_up = 5\ncatch_up_policy = \"all\""),
        // A misspelled msgtype: not also "missing msgtype".
        job("", &WECOM.replace("\"text\"", "\"txt\"")),
    ];
    for text in &cases {
        let errors = parse(text).expect_err(text);
        assert_eq!(errors.errors.len(), 1, "{errors}\n---\n{text}");
    }
}

#[test]
fn a_secret_on_the_line_shown_is_masked() {
    let texts = [
        // A literal key in a webhook of the wrong scheme: the URL is shown without it.
        job(
            "",
            &WECOM.replace(
                "${WECOM_WEBHOOK}",
                &format!("ftp://x.example/send?key={WEBHOOK_KEY}"),
            ),
        ),
        // A key alone where the URL belongs: not shown at all.
        job(
            "",
            &WECOM.replace("${WECOM_WEBHOOK}", &format!("{WEBHOOK_KEY}-7aoc-4bc4-97a0")),
        ),
        // A header value on the line of a bad header name.
        job(
            "",
            &format!(
                "type = \"http\"\nurl = \"https://x.example/h\"\nheaders = {{ \"Bad Header\" = \"{WEBHOOK_KEY}\" }}"
            ),
        ),
        // Passwords in the other URLs of the line of a duplicate node.
        format!(
            "[redis]\nnodes = [\"redis://:{WEBHOOK_KEY}@a:6379\", \"redis://:{WEBHOOK_KEY}@a\"]\n{GOOD_JOB}"
        ),
    ];
    for text in &texts {
        let errors = parse(text).expect_err(text);
        let shown = format!("{errors:#}");
        assert!(shown.contains(" | "), "no source line: {shown}");
        assert!(!shown.contains(WEBHOOK_KEY), "{shown}");
    }
}

#[test]
fn every_syntax_error_is_reported_once_a_line_in_one_run() {
    let text = "[[job]]\nname = \"a\"\nschedule = \"* * * * *\ntimeout = \"1s\"\n\
        [[job]]\nname = \"b\"\nx = = 1\ny = 2\n[job.action]\ntype = \"log\"\ncontent = [1,\n";
    let errors = parse(text).unwrap_err();
    let places: Vec<(usize, Option<&str>)> = errors
        .errors
        .iter()
        .map(|e| match e.location {
            Location::Line { line, .. } => (line, e.job()),
            _ => panic!("not a syntax error: {errors}"),
        })
        .collect();
    assert_eq!(
        places,
        [(3, Some("a")), (7, Some("b")), (11, Some("b"))],
        "{errors}"
    );
    let shown = format!("{errors:#}");
    assert!(shown.contains("7 | x = = 1\n  |     ^"), "{shown}");
}

#[test]
fn an_unknown_alert_is_reported_beside_the_jobs_other_mistakes() {
    let text = format!(
        "[alert.oncall]\ntype = \"log\"\ncontent = \"x\"\n{}",
        log_job("on_failure = \"oncal\"\ntimeout = \"0s\"")
    );
    let errors = parse(&text).unwrap_err();
    let fields: Vec<Option<&str>> = errors.errors.iter().map(|e| e.field_name()).collect();
    // In file order: on_failure is on the line before timeout.
    assert_eq!(fields, [Some("on_failure"), Some("timeout")], "{errors}");
}

#[test]
fn a_duplicate_jobs_other_mistakes_are_reported_too() {
    let text = format!(
        "{GOOD_JOB}{}",
        GOOD_JOB.replace("[job.action]", "timout = \"1s\"\n[job.action]")
    );
    let errors = parse(&text).unwrap_err();
    let fields: Vec<Option<&str>> = errors.errors.iter().map(|e| e.field_name()).collect();
    assert_eq!(fields, [Some("name"), Some("timout")], "{errors}");
    // Both point into the second job.
    let lines: Vec<usize> = errors
        .errors
        .iter()
        .map(|e| e.source.as_ref().unwrap().line)
        .collect();
    assert_eq!(lines, [12, 14], "{errors:#}");
}

#[test]
fn every_mistake_of_the_scheduler_section_is_reported() {
    let text = format!(
        "[scheduler]\ntimezone = \"Mars/Base\"\nkey_prefix = \"a b\"\nmax_clock_skew = \"2h\"\ncandidates = 0\n{GOOD_JOB}"
    );
    let errors = parse(&text).unwrap_err();
    let fields: Vec<Option<&str>> = errors.errors.iter().map(|e| e.field_name()).collect();
    assert_eq!(
        fields,
        [
            Some("timezone"),
            Some("key_prefix"),
            Some("max_clock_skew"),
            Some("candidates")
        ],
        "{errors}"
    );
}

/// An `[alert.NAME]` takes `${VAR}` and `NAME_file` as a job's action does: the README's own
/// alert (`webhook = "${ONCALL_WEBHOOK}"`) failed `check` with "not a URL", and `webhook_file`
/// was an unknown field.
#[test]
fn an_alerts_variables_and_secret_files_are_read_as_a_jobs_are() {
    let dir = tempfile::tempdir().unwrap();
    let hook = dir.path().join("oncall-hook");
    std::fs::write(
        &hook,
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=filekey\n",
    )
    .unwrap();
    let alert = |webhook: &str| {
        format!(
            "[alert.oncall]\ntype = \"wecom\"\n{webhook}\nmsgtype = \"text\"\ncontent = \"x\"\n"
        )
    };
    let text = format!(
        "{}{}",
        alert("webhook = \"${WECOM_WEBHOOK}\""),
        job("on_failure = \"oncall\"", WECOM)
    );
    let config = parse(&text).unwrap_or_else(|e| panic!("a ${{VAR}} webhook: {e}"));
    assert!(
        !format!("{config:?}").contains(WEBHOOK_KEY),
        "the key stays secret"
    );
    let text = format!(
        "{}{}",
        alert(&format!("webhook_file = {:?}", hook.display().to_string())),
        job("on_failure = \"oncall\"", WECOM)
    );
    parse(&text).unwrap_or_else(|e| panic!("a webhook_file: {e}"));
    let mut unset = env();
    unset.remove("WECOM_WEBHOOK");
    let text = format!(
        "{}{}",
        alert("webhook = \"${ONCALL_HOOK}\""),
        job("", "type = \"log\"\ncontent = \"x\"")
    );
    let errors = parse_with(&text, &unset).unwrap_err().to_string();
    assert!(
        errors.contains("alert \"oncall\"") && errors.contains("ONCALL_HOOK is not set"),
        "{errors}"
    );
    assert!(
        !errors.contains("not a URL"),
        "one error, not a second about the value: {errors}"
    );
}
