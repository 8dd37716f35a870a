//! Bad jobs.toml: a table of malformed configs, each with the error it must give (naming the
//! file, the job and the field, or the line for syntax), never a panic; the CLI's exit codes;
//! and a property test of the loader over arbitrary input.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use proptest::prelude::*;
use slotcron::config::{self, ConfigErrors};

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
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=SECRETKEY-abc123".to_owned(),
        ),
        (
            "NOT_A_URL".to_owned(),
            "not a url secretvalue123".to_owned(),
        ),
    ])
}

fn parse(text: &str) -> Result<config::Config, ConfigErrors> {
    config::parse(Path::new("jobs.toml"), text, &env())
}

/// A job with `action` lines (after `[job.action]`) and extra job lines.
fn job(extra: &str, action: &str) -> String {
    format!("[[job]]\nname = \"j\"\nschedule = \"* * * * *\"\n{extra}\n[job.action]\n{action}\n")
}

const WECOM: &str =
    "type = \"wecom\"\nwebhook = \"${WECOM_WEBHOOK}\"\nmsgtype = \"text\"\ncontent = \"x\"";

struct Case {
    name: &'static str,
    text: String,
    /// The job the error must name (None: a file-level or section error).
    job: Option<&'static str>,
    /// The field the error must name, or `line N` for syntax errors.
    field: &'static str,
    /// A piece of the message.
    says: &'static str,
}

fn case(
    name: &'static str,
    text: impl Into<String>,
    job: Option<&'static str>,
    field: &'static str,
    says: &'static str,
) -> Case {
    Case {
        name,
        text: text.into(),
        job,
        field,
        says,
    }
}

fn cases() -> Vec<Case> {
    let j = Some("j");
    vec![
        case("syntax", "[[job]]\nname = \"j\"\nschedule = \"* * * * *\nx = 1\n", j, "line 3", "TOML syntax"),
        case("syntax in second job", format!("{GOOD_JOB}\n[[job]]\nname = \"second\"\nschedule = = 1\n"), Some("second"), "line 13", "TOML syntax"),
        case("unknown top-level key", format!("colour = \"red\"\n{GOOD_JOB}"), None, "colour", "unknown"),
        case("unknown scheduler field", format!("[scheduler]\ntimezon = \"UTC\"\n{GOOD_JOB}"), None, "timezon", "unknown field"),
        case("unknown job field", job("retries = 3", WECOM), j, "retries", "unknown field"),
        case("unknown action field", job("", &format!("{WECOM}\ncolor = 1")), j, "action.color", "unknown field"),
        case("schedule is a number", job("", WECOM).replace("\"* * * * *\"", "5"), j, "schedule", "invalid type"),
        case("timeout is a number", job("timeout = 30", WECOM), j, "timeout", "invalid type"),
        case("nodes is a string", format!("[redis]\nnodes = \"redis://x:6379\"\n{GOOD_JOB}"), None, "nodes", "invalid type"),
        case("cron with 3 fields", job("", WECOM).replace("* * * * *", "* * *"), j, "schedule", "3 fields"),
        case("cron value out of range", job("", WECOM).replace("* * * * *", "61 * * * *"), j, "schedule", "invalid cron"),
        case("cron with 7 fields", job("", WECOM).replace("* * * * *", "0 0 0 * * * 2026"), j, "schedule", "7 fields"),
        case("cron that never fires", job("", WECOM).replace("* * * * *", "0 0 30 2 *"), j, "schedule", "never fires"),
        case("unknown zone in scheduler", format!("[scheduler]\ntimezone = \"Mars/Olympus\"\n{GOOD_JOB}"), None, "timezone", "unknown time zone"),
        case("unknown zone in a job", job("timezone = \"Asia/Shangai\"", WECOM), j, "timezone", "unknown time zone"),
        case("duplicate job names", format!("{GOOD_JOB}{GOOD_JOB}"), Some("standup"), "name", "duplicate"),
        case("job name with a colon", job("", WECOM).replace("name = \"j\"", "name = \"a:b\""), Some("a:b"), "name", "characters"),
        case("unset variable", job("", &WECOM.replace("WECOM_WEBHOOK", "MISSING_HOOK")), j, "action.webhook", "MISSING_HOOK is not set"),
        case("unterminated variable", job("", &WECOM.replace("${WECOM_WEBHOOK}", "${WECOM_WEBHOOK")), j, "action.webhook", "unterminated"),
        case("webhook not a URL", job("", &WECOM.replace("${WECOM_WEBHOOK}", "${NOT_A_URL}")), j, "action.webhook", "not a URL"),
        case("webhook is a key alone", job("", &WECOM.replace("${WECOM_WEBHOOK}", "693axxx6-7aoc-4bc4-97a0-0ec2sifa5aaa")), j, "action.webhook", "key alone"),
        case("ftp webhook", job("", &WECOM.replace("${WECOM_WEBHOOK}", "ftp://example.com/x")), j, "action.webhook", "not http"),
        case("unknown action type", job("", "type = \"pager\""), j, "action", "unknown variant"),
        case("unknown msgtype", job("", &WECOM.replace("\"text\"", "\"video\"")), j, "action.msgtype", "unknown variant"),
        case("missing msgtype", job("", &WECOM.replace("msgtype = \"text\"\n", "")), j, "action.msgtype", "missing field"),
        case("missing content", job("", &WECOM.replace("content = \"x\"", "")), j, "action.content", "required"),
        case("markdown with mentioned_list", job("", &format!("{}\nmentioned_list = [\"@all\"]", WECOM.replace("\"text\"", "\"markdown\""))), j, "action.mentioned_list", "not used"),
        case("text over 2048 bytes", job("", &WECOM.replace("\"x\"", &format!("\"{}\"", "a".repeat(2049)))), j, "action.content", "2048"),
        case("markdown over 4096 bytes", job("", &WECOM.replace("\"text\"", "\"markdown\"").replace("\"x\"", &format!("\"{}\"", "é".repeat(2100)))), j, "action.content", "4096"),
        case("template syntax error", job("", &WECOM.replace("\"x\"", "\"hello {{ slot \"")), j, "action.content", "line 1"),
        case("template unknown variable", job("", &WECOM.replace("\"x\"", "\"{{ slto }}\"")), j, "action.content", "undefined"),
        case("non-redis URL in nodes", format!("[redis]\nnodes = [\"http://127.0.0.1:6379\"]\n{GOOD_JOB}"), None, "nodes[0]", "not a Redis URL"),
        case("duplicate node", format!("[redis]\nnodes = [\"redis://a:6379\", \"redis://a:6379\"]\n{GOOD_JOB}"), None, "nodes[1]", "twice"),
        case("no nodes", format!("[redis]\nnodes = []\n{GOOD_JOB}"), None, "nodes", "at least one"),
        case("zero timeout", job("timeout = \"0s\"", WECOM), j, "timeout", "greater than 0"),
        case("bad duration", job("timeout = \"soon\"", WECOM), j, "timeout", "invalid"),
        case("http with a bad method", job("", "type = \"http\"\nurl = \"https://x.example/h\"\nmethod = \"FETCH\""), j, "action.method", "unknown method"),
        case("http with a bad header name", job("", "type = \"http\"\nurl = \"https://x.example/h\"\nheaders = { \"Bad Header\" = \"v\" }"), j, "action.headers.Bad Header", "header name"),
        case("no jobs", "[scheduler]\ntimezone = \"UTC\"\n", None, "", "no jobs"),
        case("every job disabled", job("enabled = false", WECOM), None, "", "enabled = false"),
        case("empty file", "", None, "", "no jobs"),
        case("key_prefix with a space", format!("[scheduler]\nkey_prefix = \"my app\"\n{GOOD_JOB}"), None, "key_prefix", "whitespace"),
        case("bad rate", job("", &format!("{WECOM}\nrate = \"lots\"")), j, "action.rate", "not a rate"),
        case("missing secret file", job("", &WECOM.replace("webhook = \"${WECOM_WEBHOOK}\"", "webhook_file = \"/nonexistent/secret\"")), j, "action.webhook_file", "no such file"),
        case("bad [http] listen", format!("[http]\nlisten = \"everywhere\"\n{GOOD_JOB}"), None, "listen", "address"),
        case("catch_up_policy without catch_up", job("catch_up_policy = \"all\"", WECOM), j, "catch_up_policy", "needs catch_up"),
    ]
}

#[test]
fn each_malformed_config_names_the_file_job_and_field() {
    let cases = cases();
    assert!(cases.len() >= 30);
    for c in &cases {
        let outcome = std::panic::catch_unwind(|| parse(&c.text));
        let result = outcome.unwrap_or_else(|_| panic!("case {:?} panicked", c.name));
        let errors = match result {
            Ok(_) => panic!("case {:?} was accepted", c.name),
            Err(errors) => errors,
        };
        let shown = errors.to_string();
        assert!(shown.starts_with("jobs.toml"), "case {:?}: {shown}", c.name);
        assert!(
            shown.contains(c.says),
            "case {:?}: {shown:?} does not say {:?}",
            c.name,
            c.says
        );
        if let Some(job) = c.job {
            assert!(
                errors.errors.iter().any(|e| e.job() == Some(job)),
                "case {:?}: no error names job {job:?}: {shown}",
                c.name
            );
            assert!(
                shown.contains(&format!("job \"{job}\"")),
                "case {:?}: {shown}",
                c.name
            );
        }
        if let Some(line) = c.field.strip_prefix("line ") {
            assert!(
                shown.contains(&format!("jobs.toml:{line}:")),
                "case {:?}: {shown}",
                c.name
            );
        } else if !c.field.is_empty() {
            let named = errors
                .errors
                .iter()
                .any(|e| e.field_name().is_some_and(|f| f.contains(c.field)));
            assert!(
                named,
                "case {:?}: no error names field {:?}: {shown}",
                c.name, c.field
            );
        }
        for secret in ["SECRETKEY-abc123", "secretvalue123"] {
            assert!(
                !shown.contains(secret),
                "case {:?} leaks a secret: {shown}",
                c.name
            );
        }
    }
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
        not_utf8.contains("garbage.toml") && not_utf8.contains("UTF-8"),
        "{not_utf8}"
    );
}

#[test]
fn all_errors_of_a_file_are_reported_at_once() {
    let text = format!(
        "{}\n{}",
        job("timeout = \"0s\"", WECOM),
        job("", WECOM)
            .replace("name = \"j\"", "name = \"k\"")
            .replace("* * * * *", "* *")
    );
    let errors = parse(&text).unwrap_err();
    assert!(errors.errors.len() >= 2, "{errors}");
}

#[test]
fn the_shipped_jobs_toml_loads_without_any_variable() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let config = config::parse(Path::new(path), &text, &HashMap::<String, String>::new()).unwrap();
    assert!(!config.jobs.is_empty());
    assert_eq!(
        config.disabled,
        ["standup"],
        "the WeCom job ships disabled, never silently skipped"
    );
}

#[test]
fn defaults_and_secrets_in_a_valid_config() {
    let text = format!(
        "[redis]\nnodes = [\"redis://:hunter2pw@10.0.0.1:6379\", \"rediss://u:hunter2pw@10.0.0.2:6380\", \"redis://10.0.0.3\"]\n{}",
        job("", &WECOM.replace("${WECOM_WEBHOOK}", "${HOOK:-https://example.com/send?key=defaultkey}"))
    );
    let config = parse(&text).unwrap();
    assert_eq!(config.redis.as_ref().unwrap().nodes.len(), 3);
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2pw"), "{shown}");
    assert!(!shown.contains("defaultkey"), "{shown}");
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

#[test]
fn check_accepts_the_shipped_jobs_toml() {
    let out = bin()
        .args([
            "check",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.toml"),
        ])
        .env_remove("WECOM_WEBHOOK")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("standup\": disabled"));
}

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 */,-]{0,20}".prop_map(|s| format!("{s:?}")),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        "[a-z ]{0,10}".prop_map(|s| format!("[{s:?}]")),
    ]
}

fn toml_document() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "name", "schedule", "timezone", "timeout", "enabled", "overlap", "catch_up", "type",
        "webhook", "msgtype", "content", "url", "method", "argv", "nodes", "rate", "articles",
    ]);
    let line = (keys, toml_value()).prop_map(|(k, v)| format!("{k} = {v}"));
    let header = prop::sample::select(vec![
        "[[job]]",
        "[job.action]",
        "[scheduler]",
        "[redis]",
        "[http]",
        "",
    ]);
    prop::collection::vec((header, prop::collection::vec(line, 0..5)), 0..5).prop_map(|tables| {
        tables
            .into_iter()
            .map(|(h, lines)| format!("{h}\n{}\n", lines.join("\n")))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn config_loader_never_panics_on_arbitrary_text(text in ".{0,400}") {
        let _ = parse(&text);
    }

    #[test]
    fn config_loader_never_panics_on_generated_documents(text in toml_document()) {
        let _ = parse(&text);
    }
}
