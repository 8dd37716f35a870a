//! The actions in-process, standalone (no Redis), against real local HTTP receivers: the exact
//! WeCom text and markdown payloads, the headers every request carries, which answers are
//! retried and which are final, the job's timeout as the bound of every retry, misbehaving
//! receivers, the content limit after rendering, the generic http action with its success
//! rules, and the log action. WeCom's error codes and its other message types are in
//! it/robots.rs.

use crate::common;

use std::path::Path;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use common::{Receiver, fleet};
use serde_json::{Value, json};
use slotcron::unstable::action::rate::Budgets;
use slotcron::unstable::action::{Delivery, SendContext, http_client};
use slotcron::unstable::config::Config;
use slotcron::unstable::metrics::Metrics;
use slotcron::unstable::slot::SlotResult;
use slotcron::unstable::time::schedule::{Fence, Slot};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "SECRETKEY123456";
const REPLICA: &str = "replica-a";

/// The webhook path and query a WeCom robot is reached at.
const SEND_PATH: &str = "/cgi-bin/webhook/send";

/// `base` + the robot's send path with the key.
fn webhook(base: &str) -> String {
    format!("{base}{SEND_PATH}?key={KEY}")
}

/// One job `robot` (zone Asia/Shanghai, `timeout`) with `action` as the lines of its
/// `[job.action]`; `${WECOM_WEBHOOK}` is `webhook_url`.
fn config(action: &str, timeout: &str, webhook_url: &str) -> Config {
    config_with_env(action, timeout, &[("WECOM_WEBHOOK", webhook_url)])
}

/// [`config`] with `env` as the whole environment the file is read with.
fn config_with_env(action: &str, timeout: &str, env: &[(&str, &str)]) -> Config {
    let job = format!("timezone = \"Asia/Shanghai\"\ntimeout = \"{timeout}\"");
    let text = fleet::one_job("robot", &job, action);
    fleet::parse_with_env(Path::new("jobs.toml"), &text, env)
}

/// A WeCom action sending to `${WECOM_WEBHOOK}` with `rest` (msgtype, content, …).
fn wecom(rest: &str) -> String {
    format!("type = \"wecom\"\nwebhook = \"${{WECOM_WEBHOOK}}\"\n{rest}")
}

/// Races the current slot of the config's only job (standalone: always won) and runs it.
async fn run(config: &Config) -> (SlotResult, Slot) {
    fleet::run_current_slot(config, REPLICA).await
}

/// Runs the config's only job's action directly for `slot`, with a deadline of its timeout.
async fn execute(
    config: &Config,
    slot: Slot,
) -> Result<Delivery, slotcron::unstable::action::ActionError> {
    let job = &config.jobs[0];
    let client = http_client().unwrap();
    let budgets = Budgets::local();
    let metrics = Metrics::new();
    let ctx = SendContext {
        job: &job.name,
        slot,
        zone: job.zone(),
        replica: REPLICA,
        fence: Fence::new(slot, 0),
        trigger: None,
        deadline: tokio::time::Instant::now() + job.timeout,
        valid_until: tokio::time::Instant::now() + job.timeout,
        about: None,
        schedule_words: &job.schedule_words(),
        client: &client,
        templates: &config.templates,
        budgets: &budgets,
        metrics: &metrics,
    };
    job.action.execute(&ctx).await
}

/// 2026-11-22T09:05:45Z, 17:05:45 in the job's zone (Asia/Shanghai).
fn fixed_slot() -> Slot {
    Slot::at(Utc.with_ymd_and_hms(2026, 11, 22, 9, 5, 45).unwrap())
}

fn header_value<'a>(request: &'a wiremock::Request, name: &str) -> &'a str {
    request
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("no header {name}"))
        .to_str()
        .unwrap()
}

fn body_json(request: &wiremock::Request) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

/// The error and attempts of a failed slot; panics on any other result.
fn failed(result: SlotResult) -> (String, u32, Duration) {
    match result {
        SlotResult::Failed {
            error,
            attempts,
            duration,
            ..
        } => (error, attempts, duration),
        other => panic!("expected a failed slot, got {other:?}"),
    }
}

fn done(result: SlotResult) -> Delivery {
    match result {
        SlotResult::Done { delivery, .. } => delivery,
        other => panic!("expected a done slot, got {other:?}"),
    }
}

/// The robot was reached at its path with its key.
fn assert_reached_robot(request: &wiremock::Request) {
    assert_eq!(request.method, wiremock::http::Method::POST);
    assert_eq!(request.url.path(), SEND_PATH);
    let query: Vec<(String, String)> = request.url.query_pairs().into_owned().collect();
    assert_eq!(query, vec![("key".to_owned(), KEY.to_owned())]);
}

/// A product promise, not a speed: an action's sends end at its `timeout` (1 s in these
/// configs), retries included. 4 s is that promise with a margin that holds on a loaded
/// machine (a scheduler delay of seconds); a send that ignored the timeout (the receiver holds
/// its answer 10 s) fails it.
const TIMEOUT_BOUND: Duration = Duration::from_secs(4);

/// Each text and markdown message's exact JSON for a fixed slot (so the slot's words are
/// literal): the slot in the job's zone and in UTC, a `date` filter, `env`, the mentions; the
/// robot reached at its path with its key, as JSON, in one attempt. (Merged from actions'
/// text and markdown tests and robots' text/markdown/markdown_v2 test.)
#[tokio::test]
async fn wecom_text_markdown_and_markdown_v2_payloads_are_exact() {
    let text = json!({"msgtype": "text", "text": {
        "content": "robot at 2026-11-22T17:05:45+08:00 (2026-11-22T09:05:45Z) by replica-a, 17:05 core",
        "mentioned_list": ["wangqing", "@all"],
        "mentioned_mobile_list": ["13800001111"],
    }});
    let markdown =
        |msgtype: &str, content: &str| json!({"msgtype": msgtype, msgtype: {"content": content}});
    let cases = [
        (
            "msgtype = \"text\"\ncontent = '{{ job }} at {{ slot }} ({{ slot_utc }}) by {{ replica }}, \
             {{ slot | date(\"%H:%M\") }} {{ env.TEAM }}'\n\
             mentioned_list = [\"wangqing\", \"@all\"]\nmentioned_mobile_list = [\"13800001111\"]",
            text,
        ),
        (
            "msgtype = \"markdown\"\ncontent = '''# {{ job }}\n> <font color=\"info\">{{ slot }}</font> on {{ replica }}'''",
            markdown(
                "markdown",
                "# robot\n> <font color=\"info\">2026-11-22T17:05:45+08:00</font> on replica-a",
            ),
        ),
        (
            "msgtype = \"markdown\"\ncontent = \"**bold** <@wangqing> <font color=\\\"warning\\\">{{ job }}</font>\"",
            markdown(
                "markdown",
                "**bold** <@wangqing> <font color=\"warning\">robot</font>",
            ),
        ),
        (
            "msgtype = \"markdown_v2\"\ncontent = \"| a | b |\\n| :- | -: |\\n| `x` | {{ replica }} |\"",
            markdown("markdown_v2", "| a | b |\n| :- | -: |\n| `x` | replica-a |"),
        ),
    ];
    for (message, expected) in cases {
        let receiver = Receiver::start();
        let webhook_url = webhook(&receiver.uri());
        let env = [("WECOM_WEBHOOK", webhook_url.as_str()), ("TEAM", "core")];
        let config = config_with_env(&wecom(message), "5s", &env);
        let delivery = execute(&config, fixed_slot()).await.unwrap();
        assert_eq!(delivery.attempts, 1, "{message}");

        let requests = receiver.received();
        assert_eq!(requests.len(), 1, "{message}");
        assert_reached_robot(&requests[0]);
        assert_eq!(body_json(&requests[0]), expected, "{message}");
        assert_eq!(
            header_value(&requests[0], "content-type"),
            "application/json"
        );
    }
}

#[tokio::test]
async fn headers_name_job_slot_replica_and_idempotency_key() {
    // The exact strings, for a fixed slot.
    let receiver = Receiver::start();
    let config = config(
        &wecom("msgtype = \"text\"\ncontent = \"hello\""),
        "5s",
        &webhook(&receiver.uri()),
    );
    execute(&config, fixed_slot()).await.unwrap();
    let requests = receiver.received();
    assert_eq!(requests.len(), 1);
    assert_eq!(header_value(&requests[0], "x-slotcron-job"), "robot");
    assert_eq!(
        header_value(&requests[0], "x-slotcron-slot"),
        "2026-11-22T09:05:45Z"
    );
    assert_eq!(header_value(&requests[0], "x-slotcron-replica"), REPLICA);
    assert_eq!(
        header_value(&requests[0], "idempotency-key"),
        "robot/2026-11-22T09:05:45Z"
    );

    // Through the race, with a retry: every attempt carries the same headers.
    receiver.clear();
    receiver.push_response(503, json!({"error": "busy"}));
    let (result, slot) = run(&config).await;
    assert_eq!(done(result).attempts, 2);
    let requests = receiver.received();
    assert_eq!(requests.len(), 2);
    let expected_slot = slot.rfc3339_utc();
    assert!(expected_slot.ends_with('Z') && !expected_slot.contains('.'));
    for request in &requests {
        assert_eq!(header_value(request, "x-slotcron-job"), "robot");
        assert_eq!(header_value(request, "x-slotcron-slot"), expected_slot);
        assert_eq!(header_value(request, "x-slotcron-replica"), REPLICA);
        assert_eq!(
            header_value(request, "idempotency-key"),
            format!("robot/{expected_slot}")
        );
    }
}

#[tokio::test]
async fn server_errors_are_retried_and_client_errors_are_not() {
    let receiver = Receiver::start();
    let config = config(
        &wecom("msgtype = \"text\"\ncontent = \"hello\""),
        "10s",
        &webhook(&receiver.uri()),
    );

    receiver.push_response(503, json!({"error": "unavailable"}));
    let (result, _) = run(&config).await;
    assert_eq!(done(result).attempts, 2);
    assert_eq!(receiver.count(), 2);

    receiver.clear();
    receiver.set_response(400, json!({"error": "bad request"}));
    let (result, _) = run(&config).await;
    let (error, attempts, _) = failed(result);
    assert_eq!(attempts, 1);
    assert_eq!(receiver.count(), 1);
    assert!(error.contains("400"), "{error}");
    assert!(!error.contains(KEY), "{error}");
}

#[tokio::test]
async fn retries_stop_at_the_job_timeout() {
    let receiver = Receiver::start();
    receiver.set_response(503, json!({"error": "unavailable"}));
    let config = config(
        &wecom("msgtype = \"text\"\ncontent = \"hello\""),
        "1s",
        &webhook(&receiver.uri()),
    );
    let (result, _) = run(&config).await;
    let (error, attempts, duration) = failed(result);
    assert!(error.contains("gave up"), "{error}");
    assert!(error.contains("503"), "{error}");
    assert!(attempts >= 2, "{attempts} attempt(s): {error}");
    assert_eq!(receiver.count(), attempts as usize);
    assert!(duration < TIMEOUT_BOUND, "{duration:?}");
}

#[tokio::test]
async fn a_webhook_that_never_answers_fails_at_the_timeout() {
    let receiver = Receiver::start();
    receiver.set_delay(Duration::from_secs(10));
    let config = config(
        &wecom("msgtype = \"text\"\ncontent = \"hello\""),
        "1s",
        &webhook(&receiver.uri()),
    );
    let (result, _) = run(&config).await;
    let (error, attempts, duration) = failed(result);
    assert!(error.contains("timed out"), "{error}");
    assert_eq!(attempts, 1, "{error}");
    assert!(!error.contains(KEY), "{error}");
    assert!(duration < TIMEOUT_BOUND, "{duration:?}");
    assert_eq!(receiver.count(), 1);
}

#[tokio::test]
async fn a_10mb_body_and_invalid_json_are_handled() {
    for body in ["x".repeat(10 * 1024 * 1024), "{\"errcode\": 0".to_owned()] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(SEND_PATH))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(&server)
            .await;
        let config = config(
            &wecom("msgtype = \"text\"\ncontent = \"hello\""),
            "5s",
            &webhook(&server.uri()),
        );
        let (result, _) = run(&config).await;
        let (error, attempts, _) = failed(result);
        assert_eq!(attempts, 1, "{error}");
        assert!(error.contains("not the robot's JSON"), "{error}");
        assert!(error.len() < 1024, "{} bytes: {error}", error.len());
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn text_over_limit_after_render_fails_naming_limit_and_size() {
    let receiver = Receiver::start();
    // 1100 × "ab" + the job's name: 2205 bytes, only known once rendered.
    let config = config(
        &wecom("msgtype = \"text\"\ncontent = '{% for i in range(1100) %}ab{% endfor %}{{ job }}'"),
        "5s",
        &webhook(&receiver.uri()),
    );
    let (result, _) = run(&config).await;
    let (error, attempts, _) = failed(result);
    assert_eq!(attempts, 0);
    assert!(error.contains("2048"), "{error}");
    assert!(error.contains("2205"), "{error}");
    assert_eq!(receiver.count(), 0);
}

/// The generic http action: method, headers (a secret from the environment), the rendered body
/// sent as written, the idempotency key; a 204 without a body a success; a 4xx final in one
/// attempt without the secret in the error; `success_status` (a code or a range; a 2xx outside
/// it is a final failure) and `success_json` (the field must exist and equal the value).
/// (Merged from actions' generic_http_action and robots'
/// generic_http_success_status_and_success_json.)
#[tokio::test]
async fn generic_http_action_with_its_success_status_and_success_json() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .and(path("/hooks/deploy"))
        .and(header("authorization", "Bearer tok-abcdef"))
        .and(header("content-type", "application/json"))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!({"status": "ok", "data": {"items": [{"code": 0}]}})),
        )
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/empty"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/missing"))
        .respond_with(ResponseTemplate::new(404).set_body_string("no such hook"))
        .mount(&server)
        .await;
    let action = |path: &str, rules: &str| {
        format!(
            "type = \"http\"\nurl = \"{}{path}\"\nmethod = \"PUT\"\n\
             headers = {{ Authorization = \"Bearer ${{TOKEN}}\", Content-Type = \"application/json\" }}\n\
             body = '{{\"job\": \"{{{{ job }}}}\", \"slot\": \"{{{{ slot_utc }}}}\", \"by\": \"{{{{ replica }}}}\"}}'\n\
             {rules}",
            server.uri()
        )
    };
    let token = [("TOKEN", "tok-abcdef")];

    let rule = "success_json = { field = \"data.items.0.code\", equals = 0 }";
    let config_ok = config_with_env(&action("/hooks/deploy", rule), "5s", &token);
    let (result, slot) = run(&config_ok).await;
    assert_eq!(done(result).attempts, 1);
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, wiremock::http::Method::PUT);
    assert_eq!(header_value(request, "authorization"), "Bearer tok-abcdef");
    assert_eq!(header_value(request, "content-type"), "application/json");
    assert_eq!(
        header_value(request, "idempotency-key"),
        format!("robot/{}", slot.rfc3339_utc())
    );
    assert_eq!(
        String::from_utf8(request.body.clone()).unwrap(),
        format!(
            "{{\"job\": \"robot\", \"slot\": \"{}\", \"by\": \"{REPLICA}\"}}",
            slot.rfc3339_utc()
        )
    );

    // A 2xx without a body is a success when no success_json rule asks for one.
    let config_empty = config_with_env(&action("/empty", ""), "5s", &token);
    assert_eq!(done(run(&config_empty).await.0).attempts, 1);

    let config_missing = config_with_env(&action("/missing", ""), "5s", &token);
    let (result, _) = run(&config_missing).await;
    let (error, attempts, _) = failed(result);
    assert_eq!(attempts, 1);
    assert!(error.contains("404"), "{error}");
    assert!(!error.contains("tok-abcdef"), "{error}");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);

    let http = |receiver: &Receiver, rules: &str| {
        let action = format!("type = \"http\"\nurl = \"{}/r\"\n{rules}", receiver.uri());
        config_with_env(&action, "5s", &[])
    };
    // success_status: a single code, or a range; outside it a 2xx is a final failure.
    let receiver = Receiver::start();
    receiver.set_response(202, json!({}));
    done(run(&http(&receiver, "success_status = \"202\"")).await.0);
    let (error, _, _) = failed(run(&http(&receiver, "success_status = \"200\"")).await.0);
    assert!(
        error.contains("202") && error.contains("200-200"),
        "{error}"
    );
    receiver.set_response(404, json!({}));
    done(
        run(&http(&receiver, "success_status = \"200-404\""))
            .await
            .0,
    );
    receiver.clear();
    let (error, _, _) = failed(run(&http(&receiver, "")).await.0);
    assert!(error.contains("404"), "{error}");
    assert_eq!(receiver.count(), 1, "a 4xx is not retried");

    // success_json: the field must exist and equal the value (a string here).
    let receiver = Receiver::start_with_body(json!({"status": "queued"}));
    let rule = "success_json = { field = \"status\", equals = \"ok\" }";
    let (error, _, _) = failed(run(&http(&receiver, rule)).await.0);
    assert!(
        error.contains("status") && error.contains("queued"),
        "{error}"
    );
    receiver.set_response(200, json!({"other": 1}));
    let (error, _, _) = failed(run(&http(&receiver, rule)).await.0);
    assert!(error.contains("no JSON field status"), "{error}");
    receiver.set_response(200, json!({"status": "ok"}));
    done(run(&http(&receiver, rule)).await.0);
}

/// The log action, through the real binary (`slotcron --log-format json trigger`), so the lines
/// checked are the ones a container writes. In a process of its own, no other test's thread can
/// race this one's subscriber for tracing's per-call-site interest cache (the in-process version
/// of this test lost the `done` line that way once in CI).
#[test]
fn log_action_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_config(
        dir.path(),
        "[[job]]\nname = \"robot\"\nschedule = \"* * * * * *\"\ntimezone = \"Asia/Shanghai\"\n\
         [job.action]\ntype = \"log\"\n\
         content = 'log of {{ job }} at {{ slot_utc }} by {{ replica }}'\n",
    );
    let out = common::slotcron_cli_output(
        &path,
        &[
            "--log-format",
            "json",
            "-v",
            "trigger",
            "robot",
            "--replica-id",
            REPLICA,
        ],
    );
    assert!(out.status.success(), "{out:?}");

    // The log lines (`-v`) are JSON objects on stderr; trigger's result is stdout's one line.
    let (output, logs) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        matches!(output.lines().collect::<Vec<_>>().as_slice(), [line] if line.starts_with("robot: done")),
        "{output}"
    );
    // (stderr also says, in plain text, that a standalone trigger is not coordinated.)
    let json_lines: Vec<&str> = logs.lines().filter(|l| l.starts_with('{')).collect();
    let lines: Vec<Value> = json_lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let done = lines
        .iter()
        .find(|l| l["outcome"] == "done")
        .unwrap_or_else(|| panic!("no done line in {output}"));
    assert_eq!(done["job"], "robot");
    assert_eq!(done["replica"], REPLICA);
    let slot = done["slot"].as_str().unwrap();
    let message = format!("log of robot at {slot} by {REPLICA}");
    let line = lines
        .iter()
        .find(|l| l["message"] == json!(message))
        .unwrap_or_else(|| panic!("no line {message:?} in {output}"));
    assert_eq!(line["action"], "log");
    assert_eq!(line["job"], "robot");
    assert_eq!(line["replica"], REPLICA);
    assert_eq!(
        line["slot"], slot,
        "the action's line and the outcome name one slot"
    );
}
