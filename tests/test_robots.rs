//! Every robot and action against a real local HTTP receiver: the exact JSON of each WeCom
//! message type, DingTalk and Feishu signatures recomputed from their documented algorithms,
//! Slack's answers, the generic http success rules, error codes and retries, command actions,
//! templates and secret files.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::Receiver;
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};
use serde_json::{json, Value};
use sha2::Sha256;
use slotcron::config;
use slotcron::race::{RaceContext, SlotResult};
use slotcron::schedule::{SharedClock, Slot, SystemClock};
use slotcron::scheduler::Replica;

/// Runs one slot of the only job in `action` (the lines of `[job.action]`), in `dir`.
async fn run_action(dir: &Path, action: &str, env: &[(&str, &str)]) -> (SlotResult, Slot) {
    let text = format!("[[job]]\nname = \"robot\"\nschedule = \"* * * * * *\"\ntimeout = \"5s\"\ntimezone = \"Asia/Shanghai\"\n[job.action]\n{action}\n");
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let config =
        config::parse(&dir.join("jobs.toml"), &text, &env).unwrap_or_else(|e| panic!("{e}"));
    let clock: SharedClock = Arc::new(SystemClock);
    let ctx: RaceContext = Replica::connect(&config, "replica-a".into(), clock)
        .await
        .unwrap()
        .context(&config);
    let slot = Slot::at(chrono::Utc::now());
    (ctx.run_slot(&config.jobs[0], slot).await, slot)
}

fn body(r: &wiremock::Request) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn wecom(receiver: &Receiver, rest: &str) -> String {
    format!(
        "type = \"wecom\"\nwebhook = \"{}/cgi-bin/webhook/send?key=ROBOTKEY123456\"\n{rest}",
        receiver.uri()
    )
}

#[tokio::test]
async fn wecom_text_markdown_and_markdown_v2_payloads() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (result, slot) = run_action(
        dir.path(),
        &wecom(&receiver, "msgtype = \"text\"\ncontent = \"{{ job }} {{ slot | date(\\\"%H:%M\\\") }} {{ env.TEAM }}\"\nmentioned_list = [\"@all\"]\nmentioned_mobile_list = [\"13800000000\"]"),
        &[("TEAM", "core")],
    )
    .await;
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
    let local = slot
        .instant()
        .with_timezone(&chrono_tz::Asia::Shanghai)
        .format("%H:%M")
        .to_string();
    assert_eq!(
        body(&receiver.received()[0]),
        json!({"msgtype": "text", "text": {"content": format!("robot {local} core"), "mentioned_list": ["@all"], "mentioned_mobile_list": ["13800000000"]}})
    );
    for msgtype in ["markdown", "markdown_v2"] {
        let receiver = Receiver::start();
        let (result, _) = run_action(dir.path(), &wecom(&receiver, &format!("msgtype = \"{msgtype}\"\ncontent = \"**bold** <font color=\\\"info\\\">ok</font>\"")), &[]).await;
        assert!(matches!(result, SlotResult::Done { .. }));
        assert_eq!(
            body(&receiver.received()[0]),
            json!({"msgtype": msgtype, msgtype: {"content": "**bold** <font color=\"info\">ok</font>"}})
        );
    }
}

#[tokio::test]
async fn wecom_image_is_base64_with_the_md5_of_the_raw_bytes() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n"
        .iter()
        .copied()
        .chain((0..5000u32).map(|i| (i % 251) as u8))
        .collect();
    std::fs::write(dir.path().join("chart.png"), &png).unwrap();
    let (result, _) = run_action(
        dir.path(),
        &wecom(&receiver, "msgtype = \"image\"\nimage_path = \"chart.png\""),
        &[],
    )
    .await;
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
    let sent = body(&receiver.received()[0]);
    assert_eq!(sent["msgtype"], "image");
    assert_eq!(
        sent["image"]["base64"],
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    assert_eq!(sent["image"]["md5"], hex::encode(Md5::digest(&png)));
}

#[tokio::test]
async fn wecom_news_and_template_cards() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let news = "msgtype = \"news\"\n[[job.action.articles]]\ntitle = \"Release {{ job }}\"\ndescription = \"notes\"\nurl = \"https://example.com/r\"\npicurl = \"https://example.com/p.png\"";
    let (result, _) = run_action(dir.path(), &wecom(&receiver, news), &[]).await;
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
    assert_eq!(
        body(&receiver.received()[0]),
        json!({"msgtype": "news", "news": {"articles": [{"title": "Release robot", "description": "notes", "url": "https://example.com/r", "picurl": "https://example.com/p.png"}]}})
    );
    for card_type in ["text_notice", "news_notice"] {
        let receiver = Receiver::start();
        let card = format!(
            "msgtype = \"template_card\"\n[job.action.template_card]\ncard_type = \"{card_type}\"\nmain_title = {{ title = \"On call: {{{{ replica }}}}\" }}\ncard_action = {{ type = 1, url = \"https://example.com\" }}"
        );
        let (result, _) = run_action(dir.path(), &wecom(&receiver, &card), &[]).await;
        assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
        assert_eq!(
            body(&receiver.received()[0]),
            json!({"msgtype": "template_card", "template_card": {"card_type": card_type, "main_title": {"title": "On call: replica-a"}, "card_action": {"type": 1, "url": "https://example.com"}}})
        );
    }
}

#[tokio::test]
async fn wecom_file_and_voice_are_uploaded_then_sent_by_media_id() {
    for kind in ["file", "voice"] {
        let receiver =
            Receiver::start_with_body(json!({"errcode": 0, "errmsg": "ok", "media_id": "m-123"}));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("report.amr"), b"#!AMR\nsome audio bytes").unwrap();
        let (result, _) = run_action(
            dir.path(),
            &wecom(
                &receiver,
                &format!("msgtype = \"{kind}\"\nmedia_path = \"report.amr\""),
            ),
            &[],
        )
        .await;
        assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
        let requests = receiver.received();
        assert_eq!(requests.len(), 2);
        let upload = &requests[0];
        assert_eq!(upload.url.path(), "/cgi-bin/webhook/upload_media");
        let query: HashMap<_, _> = upload.url.query_pairs().into_owned().collect();
        assert_eq!(
            (query["key"].as_str(), query["type"].as_str()),
            ("ROBOTKEY123456", kind)
        );
        let multipart = String::from_utf8_lossy(&upload.body);
        assert!(
            multipart.contains("name=\"media\"") && multipart.contains("filename=\"report.amr\""),
            "{multipart}"
        );
        assert_eq!(
            body(&requests[1]),
            json!({"msgtype": kind, kind: {"media_id": "m-123"}})
        );
    }
}

#[tokio::test]
async fn wecom_errcodes_45009_retried_93000_final_5xx_retried_with_one_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = "msgtype = \"text\"\ncontent = \"x\"";

    let receiver = Receiver::start();
    receiver.push_response(
        200,
        json!({"errcode": 45009, "errmsg": "api freq out of limit"}),
    );
    receiver.push_response(503, json!({}));
    let (result, _) = run_action(dir.path(), &wecom(&receiver, text), &[]).await;
    let SlotResult::Done { delivery, .. } = result else {
        panic!("{result:?}")
    };
    assert_eq!(delivery.attempts, 3);
    let keys: Vec<_> = receiver
        .received()
        .iter()
        .map(|r| common::idempotency_key(r).unwrap())
        .collect();
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");

    let receiver =
        Receiver::start_with_body(json!({"errcode": 93000, "errmsg": "invalid webhook url"}));
    let (result, _) = run_action(dir.path(), &wecom(&receiver, text), &[]).await;
    let SlotResult::Failed {
        error, attempts, ..
    } = result
    else {
        panic!("{result:?}")
    };
    assert_eq!((attempts, receiver.count()), (1, 1));
    assert!(
        error.contains("93000") && error.contains("full URL") && !error.contains("ROBOTKEY123456"),
        "{error}"
    );
}

fn hmac_b64(key: &[u8], message: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

#[tokio::test]
async fn dingtalk_messages_and_signature() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("msgtype = \"text\"\ncontent = \"hi\"\nat_all = true", json!({"msgtype": "text", "text": {"content": "hi"}, "at": {"atMobiles": [], "atUserIds": [], "isAtAll": true}})),
        ("msgtype = \"markdown\"\ntitle = \"T\"\ntext = \"# h\"", json!({"msgtype": "markdown", "markdown": {"title": "T", "text": "# h"}, "at": {"atMobiles": [], "atUserIds": [], "isAtAll": false}})),
        ("msgtype = \"link\"\ntitle = \"T\"\ntext = \"x\"\nmessage_url = \"https://e.com\"", json!({"msgtype": "link", "link": {"title": "T", "text": "x", "messageUrl": "https://e.com"}})),
        ("msgtype = \"actionCard\"\ntitle = \"T\"\ntext = \"x\"\nsingle_title = \"Open\"\nsingle_url = \"https://e.com\"", json!({"msgtype": "actionCard", "actionCard": {"title": "T", "text": "x", "singleTitle": "Open", "singleURL": "https://e.com"}})),
    ];
    for (fields, expected) in cases {
        let receiver = Receiver::start();
        let action = format!("type = \"dingtalk\"\nwebhook = \"{}/robot/send?access_token=TOKEN123456\"\nsecret_file = \"ding.secret\"\n{fields}", receiver.uri());
        std::fs::write(dir.path().join("ding.secret"), "SECdingtalk0123456789\n").unwrap();
        let (result, _) = run_action(dir.path(), &action, &[]).await;
        assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
        let request = &receiver.received()[0];
        assert_eq!(body(request), expected);
        let query: HashMap<_, _> = request.url.query_pairs().into_owned().collect();
        let ts: i64 = query["timestamp"].parse().unwrap();
        assert!(
            (chrono::Utc::now().timestamp_millis() - ts).abs() < 60_000,
            "stale timestamp"
        );
        let expected_sign = hmac_b64(
            b"SECdingtalk0123456789",
            format!("{ts}\nSECdingtalk0123456789").as_bytes(),
        );
        assert_eq!(query["sign"], expected_sign);
    }
    let receiver =
        Receiver::start_with_body(json!({"errcode": 310000, "errmsg": "sign not match"}));
    let action = format!("type = \"dingtalk\"\nwebhook = \"{}/robot/send?access_token=T\"\nmsgtype = \"text\"\ncontent = \"x\"", receiver.uri());
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("310000")),
        "{result:?}"
    );
}

#[tokio::test]
async fn feishu_messages_and_signature() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start_with_body(json!({"code": 0, "msg": "success"}));
    let action = format!("type = \"feishu\"\nwebhook = \"{}/open-apis/bot/v2/hook/abcdef0123456789\"\nsecret = \"${{FEISHU_SECRET}}\"\nmsg_type = \"text\"\ntext = \"hello {{{{ job }}}}\"", receiver.uri());
    let (result, _) = run_action(
        dir.path(),
        &action,
        &[("FEISHU_SECRET", "feishu-secret-xyz")],
    )
    .await;
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
    let sent = body(&receiver.received()[0]);
    assert_eq!(sent["msg_type"], "text");
    assert_eq!(sent["content"], json!({"text": "hello robot"}));
    let ts = sent["timestamp"].as_str().unwrap();
    assert_eq!(
        sent["sign"],
        hmac_b64(format!("{ts}\nfeishu-secret-xyz").as_bytes(), b"")
    );

    for (fields, key) in [("msg_type = \"post\"\n[job.action.post.zh_cn]\ntitle = \"T\"", "content"), ("msg_type = \"interactive\"\n[job.action.card]\nheader = { title = { tag = \"plain_text\", content = \"T\" } }", "card")] {
        let receiver = Receiver::start_with_body(json!({"code": 0}));
        let action = format!("type = \"feishu\"\nwebhook = \"{}/hook/x\"\n{fields}", receiver.uri());
        let (result, _) = run_action(dir.path(), &action, &[]).await;
        assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
        assert!(body(&receiver.received()[0])[key].is_object());
    }
    let receiver = Receiver::start_with_body(json!({"code": 19021, "msg": "sign match fail"}));
    let action = format!(
        "type = \"feishu\"\nwebhook = \"{}/hook/x\"\nmsg_type = \"text\"\ntext = \"x\"",
        receiver.uri()
    );
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("19021")),
        "{result:?}"
    );
}

/// A receiver that answers Slack's way: plain text bodies.
async fn slack_receiver(responses: Vec<wiremock::ResponseTemplate>) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    for response in responses {
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .respond_with(response)
            .up_to_n_times(1)
            .mount(&server)
            .await;
    }
    server
}

#[tokio::test]
async fn slack_ok_not_ok_and_429_retry_after() {
    use wiremock::ResponseTemplate as T;
    let dir = tempfile::tempdir().unwrap();
    let server = slack_receiver(vec![
        T::new(429)
            .insert_header("Retry-After", "1")
            .set_body_string("rate_limited"),
        T::new(200).set_body_string("ok"),
    ])
    .await;
    let action = format!("type = \"slack\"\nwebhook = \"{}/services/T0/B0/XXXXXXXXXXXXXXXXXXXXXXXX\"\ntext = \"hi\"\n[[job.action.blocks]]\ntype = \"section\"\ntext = {{ type = \"mrkdwn\", text = \"*{{{{ job }}}}*\" }}", server.uri());
    let started = std::time::Instant::now();
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    assert!(
        matches!(result, SlotResult::Done { delivery, .. } if delivery.attempts == 2),
        "{result:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After not honoured"
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        body(&requests[1]),
        json!({"text": "hi", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*robot*"}}]})
    );

    let server = slack_receiver(vec![T::new(200).set_body_string("invalid_payload")]).await;
    let action = format!(
        "type = \"slack\"\nwebhook = \"{}/services/x\"\ntext = \"hi\"",
        server.uri()
    );
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("invalid_payload")),
        "{result:?}"
    );
}

#[tokio::test]
async fn generic_http_success_rules() {
    let dir = tempfile::tempdir().unwrap();
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("PUT"))
        .respond_with(
            wiremock::ResponseTemplate::new(201)
                .set_body_json(json!({"status": "ok", "data": {"code": 0}})),
        )
        .mount(&server)
        .await;
    let action = format!(
        "type = \"http\"\nurl = \"{}/report\"\nmethod = \"PUT\"\nheaders = {{ Authorization = \"Bearer ${{TOKEN}}\" }}\nbody = '{{\"job\": \"{{{{ job }}}}\"}}'\nsuccess_json = {{ field = \"data.code\", equals = 0 }}",
        server.uri()
    );
    let (result, _) = run_action(dir.path(), &action, &[("TOKEN", "tok-abcdef")]).await;
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
    let requests = server.received_requests().await.unwrap();
    let request = &requests[0];
    assert_eq!(request.method.as_str(), "PUT");
    assert_eq!(
        request.headers.get("authorization").unwrap(),
        "Bearer tok-abcdef"
    );
    assert_eq!(body(request), json!({"job": "robot"}));

    let receiver = Receiver::start_with_body(json!({"data": {"code": 7}}));
    let action = format!(
        "type = \"http\"\nurl = \"{}/r\"\nsuccess_json = {{ field = \"data.code\", equals = 0 }}",
        receiver.uri()
    );
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("data.code")),
        "{result:?}"
    );
}

#[tokio::test]
async fn command_exit_codes_environment_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env.txt");
    let script = format!(
        "echo \\\"$SLOTCRON_JOB $SLOTCRON_SLOT $SLOTCRON_REPLICA\\\" > {}; echo done-output",
        out.display()
    );
    let (result, slot) = run_action(
        dir.path(),
        &format!("type = \"command\"\nshell = \"{script}\""),
        &[],
    )
    .await;
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
    let env = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        env.trim(),
        format!("robot {} replica-a", slot.rfc3339_utc())
    );

    let (result, _) = run_action(
        dir.path(),
        "type = \"command\"\nargv = [\"sh\", \"-c\", \"exit 3\"]",
        &[],
    )
    .await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("exit status: 3")),
        "{result:?}"
    );
}

#[tokio::test]
async fn command_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!("sleep 30 & echo $! > {}; sleep 30", pids.display());
    let text = format!("[[job]]\nname = \"slow\"\nschedule = \"* * * * * *\"\ntimeout = \"1s\"\n[job.action]\ntype = \"command\"\nshell = \"{script}\"\n");
    let config = config::parse(
        &dir.path().join("jobs.toml"),
        &text,
        &HashMap::<String, String>::new(),
    )
    .unwrap();
    let ctx = Replica::connect(&config, "r".into(), Arc::new(SystemClock))
        .await
        .unwrap()
        .context(&config);
    let result = ctx
        .run_slot(&config.jobs[0], Slot::at(chrono::Utc::now()))
        .await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("killed its process group")),
        "{result:?}"
    );
    let child: i32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z"),
        "the background sleep survived: {stat}"
    );
}

#[test]
fn rate_budget_is_shared_by_the_fleet() {
    // The issue's case: 3 replicas, one robot with WeCom's budget of 20 a minute, 30 slots
    // inside a minute: the receiver never sees more than 20 in any 60 s, and every slot is
    // either sent or logged as skipped for the budget.
    let cluster = common::RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<String> = cluster.urls().iter().map(|n| format!("{n:?}")).collect();
    let text = format!(
        "[scheduler]\nkey_prefix = \"budget\"\nmax_clock_skew = \"1s\"\n[redis]\nnodes = [{}]\n[[job]]\nname = \"chatty\"\nschedule = \"* * * * * *\"\ntimeout = \"3s\"\noverlap = \"allow\"\n[job.action]\ntype = \"wecom\"\nwebhook = \"{}/cgi-bin/webhook/send?key=K\"\nmsgtype = \"text\"\ncontent = \"x\"\nrate = \"20/min\"\n",
        nodes.join(", "),
        receiver.uri()
    );
    let path = common::write_config(dir.path(), &text);
    let replicas: Vec<common::Replica> = (0..3)
        .map(|i| {
            common::Replica::spawn(
                env!("CARGO_BIN_EXE_slotcron"),
                &[
                    "run",
                    "--log-format",
                    "json",
                    "--replica-id",
                    &format!("r{i}"),
                    "--config",
                    path.to_str().unwrap(),
                ],
                &[],
            )
        })
        .collect();
    // Stamp arrivals as they come.
    let mut arrivals: Vec<std::time::Instant> = Vec::new();
    let end = std::time::Instant::now() + Duration::from_secs(31);
    while std::time::Instant::now() < end {
        let n = receiver.count();
        while arrivals.len() < n {
            arrivals.push(std::time::Instant::now());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for r in &replicas {
        r.terminate();
    }
    std::thread::sleep(Duration::from_secs(4));
    // Every send fell inside one minute, so at most 20 may have gone out.
    assert!(
        (15..=20).contains(&arrivals.len()),
        "{} sends in 31 s",
        arrivals.len()
    );
    assert!(arrivals.last().unwrap().duration_since(arrivals[0]) < Duration::from_secs(60));
    let lines: Vec<Value> = replicas.iter().flat_map(|r| r.json_lines()).collect();
    let won: Vec<&str> = lines
        .iter()
        .filter(|l| l["outcome"] == "won")
        .filter_map(|l| l["slot"].as_str())
        .collect();
    let sent = receiver.counts_by_idempotency_key();
    for slot in won {
        let delivered = sent.contains_key(&format!("chatty/{slot}"));
        let skipped = lines.iter().any(|l| {
            l["slot"] == slot
                && l["outcome"] == "failed"
                && l["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("rate budget"))
        });
        assert!(
            delivered || skipped,
            "slot {slot} neither sent nor skipped for the budget"
        );
    }
    assert!(lines.iter().any(|l| l["message"]
        .as_str()
        .is_some_and(|m| m.contains("skipped for the rate budget"))));
}

#[tokio::test]
async fn bad_receivers_fail_the_slot_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let text = "msgtype = \"text\"\ncontent = \"x\"";
    // A webhook that never answers: failed at the job's timeout (5 s here, cut to 1 s below).
    let silent = Receiver::start();
    silent.set_delay(Duration::from_secs(30));
    let action = wecom(&silent, text);
    let text_job = format!("[[job]]\nname = \"robot\"\nschedule = \"* * * * * *\"\ntimeout = \"1s\"\n[job.action]\n{action}\n");
    let config = config::parse(
        &dir.path().join("jobs.toml"),
        &text_job,
        &HashMap::<String, String>::new(),
    )
    .unwrap();
    let ctx = Replica::connect(&config, "r".into(), Arc::new(SystemClock))
        .await
        .unwrap()
        .context(&config);
    let result = ctx
        .run_slot(&config.jobs[0], Slot::at(chrono::Utc::now()))
        .await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("timed out") || error.contains("gave up")),
        "{result:?}"
    );

    // A closed port.
    let port = common::free_port();
    let action = format!("type = \"wecom\"\nwebhook = \"http://127.0.0.1:{port}/cgi-bin/webhook/send?key=CLOSEDKEY123\"\n{text}");
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    let SlotResult::Failed { error, .. } = result else {
        panic!("{result:?}")
    };
    assert!(
        error.contains("connection") && !error.contains("CLOSEDKEY123"),
        "{error}"
    );

    // A 10 MB answer that is not JSON, and a short one that is not JSON either.
    for body in ["x".repeat(10 * 1024 * 1024), "{not json".to_owned()] {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_string(body))
            .mount(&server)
            .await;
        let action = format!(
            "type = \"wecom\"\nwebhook = \"{}/send?key=K\"\n{text}",
            server.uri()
        );
        let (result, _) = run_action(dir.path(), &action, &[]).await;
        let SlotResult::Failed { error, .. } = result else {
            panic!("{result:?}")
        };
        assert!(
            error.contains("not the robot's JSON") && error.len() < 1024,
            "{error}"
        );
    }
}
