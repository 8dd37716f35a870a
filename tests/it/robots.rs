//! Every robot against a real local HTTP receiver: the exact JSON of each WeCom message type
//! beyond text and markdown (image base64 and MD5, news, file and voice through
//! `upload_media`, template cards), DingTalk and Feishu messages with their signatures
//! recomputed from the documented algorithms, Slack's answers, WeCom's error codes; secrets
//! from files, defaults and the environment, none of them in any log line, error or `check`
//! output; templates (`env`, `date`, `content_file`) and template errors that name the job and
//! the line.
//!
//! The WeCom text and markdown payloads and the core behaviour (headers, retries to the
//! timeout, misbehaving receivers), and the generic http action with its success rules, are in
//! it/actions.rs; command actions in it/command.rs; the fleet-wide rate budget in
//! it/rate_budget.rs.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::{Receiver, fleet};
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};
use serde_json::{Value, json};
use sha2::Sha256;
use slotcron::unstable::config;
use slotcron::unstable::replica::Replica;
use slotcron::unstable::slot::SlotResult;
use slotcron::unstable::time::schedule::{Slot, SystemClock};

/// Runs one slot of the only job (`robot`, Asia/Shanghai, 5 s) whose `[job.action]` is `action`;
/// jobs.toml is taken to be in `dir` (files it names are relative to it).
async fn run_action(dir: &Path, action: &str, env: &[(&str, &str)]) -> (SlotResult, Slot) {
    // Boxed: a test awaits many of these, and the futures of a debug build are large.
    Box::pin(run_action_inner(dir, action, env)).await
}

async fn run_action_inner(dir: &Path, action: &str, env: &[(&str, &str)]) -> (SlotResult, Slot) {
    let job = "timeout = \"5s\"\ntimezone = \"Asia/Shanghai\"";
    let text = fleet::one_job("robot", job, action);
    let config = fleet::parse_with_env(&dir.join("jobs.toml"), &text, env);
    fleet::run_current_slot(&config, "replica-a").await
}

fn body(r: &wiremock::Request) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn query(r: &wiremock::Request) -> Vec<(String, String)> {
    r.url.query_pairs().into_owned().collect()
}

fn assert_done(result: &SlotResult) {
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
}

fn failed_error(result: SlotResult) -> String {
    match result {
        SlotResult::Failed { error, .. } => error,
        other => panic!("expected a failed slot, got {other:?}"),
    }
}

/// `slot` formatted with `format` in Asia/Shanghai (the job's zone).
fn local(slot: Slot, format: &str) -> String {
    slot.instant()
        .with_timezone(&chrono_tz::Asia::Shanghai)
        .format(format)
        .to_string()
}

fn wecom(receiver: &Receiver, rest: &str) -> String {
    format!(
        "type = \"wecom\"\nwebhook = \"{}/cgi-bin/webhook/send?key=ROBOTKEY123456\"\n{rest}",
        receiver.uri()
    )
}

// ---------------------------------------------------------------------------------------------
// WeCom
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn wecom_image_from_a_file_and_from_a_url_is_base64_with_the_md5_of_the_raw_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n"
        .iter()
        .copied()
        .chain((0..5000u32).map(|i| (i % 251) as u8))
        .collect();
    std::fs::write(dir.path().join("chart.png"), &png).unwrap();
    let receiver = Receiver::start();
    let (result, _) = run_action(
        dir.path(),
        &wecom(&receiver, "msgtype = \"image\"\nimage_path = \"chart.png\""),
        &[],
    )
    .await;
    assert_done(&result);
    assert_eq!(
        body(&receiver.received()[0]),
        json!({"msgtype": "image", "image": {
            "base64": base64::engine::general_purpose::STANDARD.encode(&png),
            "md5": hex::encode(Md5::digest(&png)),
        }})
    );

    // From a URL, fetched at send time.
    let jpg: Vec<u8> = [0xFF, 0xD8, 0xFF, 0xE0]
        .into_iter()
        .chain((0..3000u32).map(|i| (i * 7 % 256) as u8))
        .collect();
    let images = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .and(wiremock::matchers::path("/daily.jpg"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_bytes(jpg.clone()))
        .mount(&images)
        .await;
    let receiver = Receiver::start();
    let (result, _) = run_action(
        dir.path(),
        &wecom(
            &receiver,
            &format!(
                "msgtype = \"image\"\nimage_url = \"{}/daily.jpg\"",
                images.uri()
            ),
        ),
        &[],
    )
    .await;
    assert_done(&result);
    assert_eq!(
        body(&receiver.received()[0]),
        json!({"msgtype": "image", "image": {
            "base64": base64::engine::general_purpose::STANDARD.encode(&jpg),
            "md5": hex::encode(Md5::digest(&jpg)),
        }})
    );
}

#[tokio::test]
async fn wecom_news_and_both_template_cards() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let news = "msgtype = \"news\"\n\
        [[job.action.articles]]\ntitle = \"Release {{ job }}\"\ndescription = \"notes for {{ replica }}\"\nurl = \"https://example.com/r\"\npicurl = \"https://example.com/p.png\"\n\
        [[job.action.articles]]\ntitle = \"Second\"\nurl = \"https://example.com/2\"";
    let (result, _) = run_action(dir.path(), &wecom(&receiver, news), &[]).await;
    assert_done(&result);
    assert_eq!(
        body(&receiver.received()[0]),
        json!({"msgtype": "news", "news": {"articles": [
            {"title": "Release robot", "description": "notes for replica-a", "url": "https://example.com/r", "picurl": "https://example.com/p.png"},
            {"title": "Second", "url": "https://example.com/2"},
        ]}})
    );

    let text_notice = r#"msgtype = "template_card"
[job.action.template_card]
card_type = "text_notice"
source = { icon_url = "https://example.com/i.png", desc = "slotcron", desc_color = 0 }
main_title = { title = "On call: {{ replica }}", desc = "{{ slot | date(\"%Y-%m-%d\") }}" }
emphasis_content = { title = "99.9", desc = "uptime" }
sub_title_text = "Job {{ job }}"
horizontal_content_list = [{ keyname = "owner", value = "ops" }, { keyname = "docs", value = "runbook", type = 1, url = "https://example.com/rb" }]
jump_list = [{ type = 1, url = "https://example.com", title = "Open" }]
card_action = { type = 1, url = "https://example.com" }"#;
    let news_notice = r#"msgtype = "template_card"
[job.action.template_card]
card_type = "news_notice"
main_title = { title = "Weekly {{ job }}" }
card_image = { url = "https://example.com/banner.png", aspect_ratio = 2.25 }
vertical_content_list = [{ title = "Shipped", desc = "3 releases" }]
card_action = { type = 1, url = "https://example.com" }"#;
    let receiver = Receiver::start();
    let (result, slot) = run_action(dir.path(), &wecom(&receiver, text_notice), &[]).await;
    assert_done(&result);
    assert_eq!(
        body(&receiver.received()[0]),
        json!({"msgtype": "template_card", "template_card": {
            "card_type": "text_notice",
            "source": {"icon_url": "https://example.com/i.png", "desc": "slotcron", "desc_color": 0},
            "main_title": {"title": "On call: replica-a", "desc": local(slot, "%Y-%m-%d")},
            "emphasis_content": {"title": "99.9", "desc": "uptime"},
            "sub_title_text": "Job robot",
            "horizontal_content_list": [{"keyname": "owner", "value": "ops"}, {"keyname": "docs", "value": "runbook", "type": 1, "url": "https://example.com/rb"}],
            "jump_list": [{"type": 1, "url": "https://example.com", "title": "Open"}],
            "card_action": {"type": 1, "url": "https://example.com"},
        }})
    );
    let receiver = Receiver::start();
    let (result, _) = run_action(dir.path(), &wecom(&receiver, news_notice), &[]).await;
    assert_done(&result);
    assert_eq!(
        body(&receiver.received()[0]),
        json!({"msgtype": "template_card", "template_card": {
            "card_type": "news_notice",
            "main_title": {"title": "Weekly robot"},
            "card_image": {"url": "https://example.com/banner.png", "aspect_ratio": 2.25},
            "vertical_content_list": [{"title": "Shipped", "desc": "3 releases"}],
            "card_action": {"type": 1, "url": "https://example.com"},
        }})
    );
}

#[tokio::test]
async fn wecom_file_and_voice_are_uploaded_then_sent_by_media_id() {
    for (kind, file, bytes) in [
        ("file", "report.csv", b"day,sent\nmon,20\n".as_slice()),
        (
            "voice",
            "standup.amr",
            b"#!AMR\n\x3c\x91\x17\x16\xbe\x66".as_slice(),
        ),
    ] {
        // The robot answers the upload with a media_id, then the send.
        let receiver =
            Receiver::start_with_body(json!({"errcode": 0, "errmsg": "ok", "media_id": "m-123"}));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(file), bytes).unwrap();
        let (result, _) = run_action(
            dir.path(),
            &wecom(
                &receiver,
                &format!("msgtype = \"{kind}\"\nmedia_path = \"{file}\""),
            ),
            &[],
        )
        .await;
        assert_done(&result);
        let requests = receiver.received();
        assert_eq!(requests.len(), 2);
        let upload = &requests[0];
        assert_eq!(upload.url.path(), "/cgi-bin/webhook/upload_media");
        assert_eq!(
            query(upload),
            [
                ("key".to_owned(), "ROBOTKEY123456".to_owned()),
                ("type".to_owned(), kind.to_owned())
            ]
        );
        let content_type = upload
            .headers
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap();
        let boundary = content_type
            .strip_prefix("multipart/form-data; boundary=")
            .unwrap_or_else(|| panic!("{content_type}"));
        // One part, field `media`, with the file's name and its exact bytes.
        let multipart = &upload.body;
        let text = String::from_utf8_lossy(multipart);
        assert_eq!(text.matches(&format!("--{boundary}")).count(), 2, "{text}");
        assert!(
            text.contains(&format!(
                "Content-Disposition: form-data; name=\"media\"; filename=\"{file}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )),
            "{text}"
        );
        let start = multipart.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(multipart[start..].starts_with(bytes), "{text}");
        assert_eq!(
            &multipart[start + bytes.len()..],
            format!("\r\n--{boundary}--\r\n").as_bytes()
        );
        let send = &requests[1];
        assert_eq!(send.url.path(), "/cgi-bin/webhook/send");
        assert_eq!(
            body(send),
            json!({"msgtype": kind, kind: {"media_id": "m-123"}})
        );
    }
}

#[tokio::test]
async fn wecom_errcodes_45009_and_5xx_retried_with_backoff_93000_final_one_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = "msgtype = \"text\"\ncontent = \"x\"";

    let receiver = Receiver::start();
    receiver.push_response(
        200,
        json!({"errcode": 45009, "errmsg": "api freq out of limit"}),
    );
    receiver.push_response(503, json!({}));
    let (result, slot) = run_action(dir.path(), &wecom(&receiver, text), &[]).await;
    let SlotResult::Done { delivery, duration } = result else {
        panic!("{result:?}")
    };
    assert_eq!(delivery.attempts, 3);
    // Backoff: at least 125 ms after the first attempt and 250 ms after the second.
    assert!(duration >= Duration::from_millis(375), "{duration:?}");
    let keys: Vec<_> = receiver
        .received()
        .iter()
        .map(|r| common::idempotency_key(r).unwrap())
        .collect();
    assert_eq!(keys, vec![format!("robot/{}", slot.rfc3339_utc()); 3]);
    // Every attempt sends the same message (merged from it::actions::errcode_45009_is_retried_then_succeeds).
    let bodies = receiver.received_json();
    assert!(bodies.iter().all(|b| *b == bodies[0]), "{bodies:?}");

    // Also it::actions::errcode_93000_is_not_retried's checks, all of them (merged here).
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

#[tokio::test]
async fn wecom_message_limits_name_the_job_the_field_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let png_header = b"\x89PNG\r\n\x1a\n";
    std::fs::write(dir.path().join("anim.gif"), b"GIF89a....").unwrap();
    std::fs::write(dir.path().join("tiny.txt"), b"abc").unwrap();
    let mut amr = b"#!AMR\n".to_vec();
    amr.resize(2 * 1024 * 1024 + 1, 0);
    std::fs::write(dir.path().join("long.amr"), &amr).unwrap();
    let mut big = png_header.to_vec();
    big.resize(2 * 1024 * 1024 + 1, 0);
    std::fs::write(dir.path().join("big.png"), &big).unwrap();
    let hook = "webhook = \"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K\"";
    let article = "[[job.action.articles]]\ntitle = \"t\"\nurl = \"https://e.com\"\n";
    let card =
        |fields: &str| format!("msgtype = \"template_card\"\n[job.action.template_card]\n{fields}");
    // One case a line, as in config_errors.rs.
    #[rustfmt::skip]
    let cases = [
        ("nine-articles", format!("msgtype = \"news\"\n{}", article.repeat(9)), "action.articles", "9 article(s); news takes 1 to 8"),
        ("gif", "msgtype = \"image\"\nimage_path = \"anim.gif\"".to_owned(), "action.image_path", "neither JPG nor PNG"),
        ("big-png", "msgtype = \"image\"\nimage_path = \"big.png\"".to_owned(), "action.image_path", "2097153 bytes, over the robot's limit of 2097152"),
        ("two-sources", "msgtype = \"image\"\nimage_path = \"big.png\"\nimage_url = \"https://e.com/x.png\"".to_owned(), "action.image_path", "exactly one"),
        ("content-on-image", "msgtype = \"image\"\nimage_path = \"anim.gif\"\ncontent = \"x\"".to_owned(), "action.content", "not used by msgtype \"image\""),
        ("no-media", "msgtype = \"file\"\nmedia_path = \"missing.pdf\"".to_owned(), "action.media_path", "no such file"),
        ("tiny-file", "msgtype = \"file\"\nmedia_path = \"tiny.txt\"".to_owned(), "action.media_path", "3 bytes; a file must be 5 to 20971520 bytes"),
        ("long-voice", "msgtype = \"voice\"\nmedia_path = \"long.amr\"".to_owned(), "action.media_path", "2097153 bytes; a voice must be 5 to 2097152 bytes"),
        ("card-type", card("card_type = \"button_interaction\"\ncard_action = { type = 1, url = \"https://e.com\" }"), "action.template_card.card_type", "text_notice"),
        ("card-action", card("card_type = \"text_notice\"\nmain_title = { title = \"t\" }"), "action.template_card.card_action", "required"),
    ];
    let text: String = cases
        .iter()
        .map(|(name, fields, _, _)| {
            format!("[[job]]\nname = \"{name}\"\nschedule = \"* * * * *\"\n[job.action]\ntype = \"wecom\"\n{hook}\n{fields}\n")
        })
        .collect();
    let errors = config::parse(
        &dir.path().join("jobs.toml"),
        &text,
        &HashMap::<String, String>::new(),
    )
    .unwrap_err();
    let shown = errors.to_string();
    for (name, _, field, says) in &cases {
        let line = shown
            .lines()
            .find(|l| l.contains(&format!("job \"{name}\"")))
            .unwrap_or_else(|| panic!("no error for job {name}: {shown}"));
        assert!(
            line.contains(&format!("field \"{field}\"")) && line.contains(says),
            "{line}"
        );
    }
    assert_eq!(errors.errors.len(), cases.len(), "{shown}");

    // Checked again at send time, where the bytes can change or come from a URL: not sent.
    let receiver = Receiver::start();
    std::fs::write(dir.path().join("talk.amr"), b"#!AMR\n").unwrap();
    let voice = wecom(&receiver, "msgtype = \"voice\"\nmedia_path = \"talk.amr\"");
    let text =
        format!("[[job]]\nname = \"robot\"\nschedule = \"* * * * * *\"\n[job.action]\n{voice}\n");
    let config = config::parse(
        &dir.path().join("jobs.toml"),
        &text,
        &HashMap::<String, String>::new(),
    )
    .unwrap();
    std::fs::write(dir.path().join("talk.amr"), &amr).unwrap();
    let ctx = Replica::connect(&config, "replica-a".into(), Arc::new(SystemClock))
        .await
        .unwrap()
        .context(&config);
    let error = failed_error(
        ctx.run_slot(&config.jobs[0], Slot::at(chrono::Utc::now()))
            .await,
    );
    assert!(
        error.contains("media_path")
            && error.contains("2097153 bytes")
            && error.contains("2097152"),
        "{error}"
    );
    let pages = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_string("<html>moved</html>"))
        .mount(&pages)
        .await;
    let image = wecom(
        &receiver,
        &format!(
            "msgtype = \"image\"\nimage_url = \"{}/chart.png\"",
            pages.uri()
        ),
    );
    let error = failed_error(run_action(dir.path(), &image, &[]).await.0);
    assert!(
        error.contains("image") && error.contains("neither JPG nor PNG"),
        "{error}"
    );
    assert_eq!(receiver.count(), 0, "an invalid message reached the robot");
}

// ---------------------------------------------------------------------------------------------
// DingTalk, Feishu, Slack, http
// ---------------------------------------------------------------------------------------------

fn hmac_b64(key: &[u8], message: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

const DING_SECRET: &str = "SEC0123456789abcdef+/dingtalk";

#[tokio::test]
async fn dingtalk_every_msgtype_signed_and_unsigned() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ding.secret"), format!("{DING_SECRET}\n")).unwrap();
    let cases = [
        (
            "msgtype = \"text\"\ncontent = \"hi {{ job }}\"\nat_mobiles = [\"13800001111\"]\nat_all = true",
            json!({"msgtype": "text", "text": {"content": "hi robot"}, "at": {"atMobiles": ["13800001111"], "atUserIds": [], "isAtAll": true}}),
        ),
        (
            "msgtype = \"markdown\"\ntitle = \"T\"\ntext = \"# {{ replica }}\"\nat_user_ids = [\"u1\"]",
            json!({"msgtype": "markdown", "markdown": {"title": "T", "text": "# replica-a"}, "at": {"atMobiles": [], "atUserIds": ["u1"], "isAtAll": false}}),
        ),
        (
            "msgtype = \"link\"\ntitle = \"T\"\ntext = \"x\"\nmessage_url = \"https://e.com\"\npic_url = \"https://e.com/p.png\"",
            json!({"msgtype": "link", "link": {"title": "T", "text": "x", "messageUrl": "https://e.com", "picUrl": "https://e.com/p.png"}}),
        ),
        (
            "msgtype = \"actionCard\"\ntitle = \"T\"\ntext = \"x\"\nsingle_title = \"Open\"\nsingle_url = \"https://e.com\"",
            json!({"msgtype": "actionCard", "actionCard": {"title": "T", "text": "x", "singleTitle": "Open", "singleURL": "https://e.com"}}),
        ),
        (
            "msgtype = \"actionCard\"\ntitle = \"T\"\ntext = \"x\"\n[[job.action.buttons]]\ntitle = \"Yes\"\nurl = \"https://e.com/y\"\n[[job.action.buttons]]\ntitle = \"No\"\nurl = \"https://e.com/n\"",
            json!({"msgtype": "actionCard", "actionCard": {"title": "T", "text": "x", "btnOrientation": "0", "btns": [{"title": "Yes", "actionURL": "https://e.com/y"}, {"title": "No", "actionURL": "https://e.com/n"}]}}),
        ),
    ];
    for (fields, expected) in cases {
        for signed in [false, true] {
            let receiver = Receiver::start();
            let secret = if signed {
                "secret_file = \"ding.secret\"\n"
            } else {
                ""
            };
            let action = format!(
                "type = \"dingtalk\"\nwebhook = \"{}/robot/send?access_token=TOKEN123456\"\n{secret}{fields}",
                receiver.uri()
            );
            let (result, _) = run_action(dir.path(), &action, &[]).await;
            assert_done(&result);
            let request = &receiver.received()[0];
            assert_eq!(request.url.path(), "/robot/send");
            assert_eq!(body(request), expected);
            let query = query(request);
            assert_eq!(
                query[0],
                ("access_token".to_owned(), "TOKEN123456".to_owned())
            );
            if !signed {
                assert_eq!(query.len(), 1, "{query:?}");
                continue;
            }
            assert_eq!(query.len(), 3, "{query:?}");
            assert_eq!(query[1].0, "timestamp");
            assert_eq!(query[2].0, "sign");
            let ts: i64 = query[1].1.parse().unwrap();
            // Milliseconds, taken at send time (DingTalk refuses one over an hour old).
            assert!(
                (chrono::Utc::now().timestamp_millis() - ts).abs() < 60_000,
                "stale or not in ms: {ts}"
            );
            let sign = hmac_b64(
                DING_SECRET.as_bytes(),
                format!("{ts}\n{DING_SECRET}").as_bytes(),
            );
            assert_eq!(query[2].1, sign);
            // URL-encoded on the wire: base64's + / = are escaped.
            let encoded: String = url::form_urlencoded::byte_serialize(sign.as_bytes()).collect();
            let raw = request.url.query().unwrap();
            assert!(raw.ends_with(&format!("&sign={encoded}")), "{raw}");
        }
    }

    // 130101 (sending too fast) is retried; any other errcode is final.
    let receiver = Receiver::start();
    receiver.push_response(200, json!({"errcode": 130101, "errmsg": "send too fast"}));
    let action = format!(
        "type = \"dingtalk\"\nwebhook = \"{}/robot/send?access_token=T\"\nmsgtype = \"text\"\ncontent = \"x\"",
        receiver.uri()
    );
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    assert!(
        matches!(result, SlotResult::Done { delivery, .. } if delivery.attempts == 2),
        "{result:?}"
    );
    receiver.set_response(200, json!({"errcode": 310000, "errmsg": "sign not match"}));
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    let count = receiver.count();
    let error = failed_error(result);
    assert!(
        error.contains("310000") && error.contains("sign not match"),
        "{error}"
    );
    assert_eq!(count, 3, "310000 was retried");
}

#[tokio::test]
async fn feishu_text_post_and_interactive_signed_and_unsigned() {
    let dir = tempfile::tempdir().unwrap();
    let post = r#"msg_type = "post"
[job.action.post.zh_cn]
title = "Deploy {{ job }}"
content = [[{ tag = "text", text = "by {{ replica }} " }, { tag = "a", text = "log", href = "https://e.com/log" }]]"#;
    let card = r#"msg_type = "interactive"
[job.action.card]
header = { template = "blue", title = { tag = "plain_text", content = "{{ job }}" } }
elements = [{ tag = "div", text = { tag = "lark_md", content = "**{{ replica }}**" } }]"#;
    let cases = [
        (
            "msg_type = \"text\"\ntext = \"hello {{ job }}\"",
            json!({"msg_type": "text", "content": {"text": "hello robot"}}),
        ),
        (
            post,
            json!({"msg_type": "post", "content": {"post": {"zh_cn": {"title": "Deploy robot", "content": [[{"tag": "text", "text": "by replica-a "}, {"tag": "a", "text": "log", "href": "https://e.com/log"}]]}}}}),
        ),
        (
            card,
            json!({"msg_type": "interactive", "card": {"header": {"template": "blue", "title": {"tag": "plain_text", "content": "robot"}}, "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": "**replica-a**"}}]}}),
        ),
    ];
    for (fields, expected) in cases {
        for signed in [false, true] {
            let receiver = Receiver::start_with_body(json!({"code": 0, "msg": "success"}));
            let secret = if signed {
                "secret = \"${FEISHU_SECRET}\"\n"
            } else {
                ""
            };
            let action = format!(
                "type = \"feishu\"\nwebhook = \"{}/open-apis/bot/v2/hook/abcdef0123456789\"\n{secret}{fields}",
                receiver.uri()
            );
            let (result, _) = run_action(
                dir.path(),
                &action,
                &[("FEISHU_SECRET", "feishu-secret-xyz")],
            )
            .await;
            assert_done(&result);
            let request = &receiver.received()[0];
            assert_eq!(
                request.url.path(),
                "/open-apis/bot/v2/hook/abcdef0123456789"
            );
            let mut sent = body(request);
            if !signed {
                assert_eq!(sent, expected);
                continue;
            }
            let object = sent.as_object_mut().unwrap();
            let ts = object.remove("timestamp").unwrap();
            let sign = object.remove("sign").unwrap();
            assert_eq!(sent, expected);
            // Seconds, as a string, taken at send time (Feishu refuses one over an hour old).
            let ts: i64 = ts.as_str().unwrap().parse().unwrap();
            assert!(
                (chrono::Utc::now().timestamp() - ts).abs() < 60,
                "stale or not in seconds: {ts}"
            );
            // The key is "{timestamp}\n{secret}"; the message is empty.
            assert_eq!(
                sign,
                hmac_b64(format!("{ts}\nfeishu-secret-xyz").as_bytes(), b"")
            );
        }
    }
    // code != 0 is a failure.
    let receiver = Receiver::start_with_body(json!({"code": 19021, "msg": "sign match fail"}));
    let action = format!(
        "type = \"feishu\"\nwebhook = \"{}/hook/x\"\nmsg_type = \"text\"\ntext = \"x\"",
        receiver.uri()
    );
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    let error = failed_error(result);
    assert!(
        error.contains("19021") && error.contains("sign match fail"),
        "{error}"
    );
    assert_eq!(receiver.count(), 1);
}

/// A receiver that answers Slack's way: plain text bodies, one per request in order.
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
async fn slack_text_and_blocks_ok_not_ok_and_429_retry_after() {
    use wiremock::ResponseTemplate as T;
    let dir = tempfile::tempdir().unwrap();
    let server = slack_receiver(vec![
        T::new(429)
            .insert_header("Retry-After", "1")
            .set_body_string("rate_limited"),
        T::new(200).set_body_string("ok"),
    ])
    .await;
    let action = format!(
        "type = \"slack\"\nwebhook = \"{}/services/T0/B0/XXXXXXXXXXXXXXXXXXXXXXXX\"\ntext = \"hi\"\n[[job.action.blocks]]\ntype = \"section\"\ntext = {{ type = \"mrkdwn\", text = \"*{{{{ job }}}}*\" }}",
        server.uri()
    );
    let (result, slot) = run_action(dir.path(), &action, &[]).await;
    let SlotResult::Done { delivery, duration } = result else {
        panic!("{result:?}")
    };
    assert_eq!(delivery.attempts, 2);
    // Retry-After: 1 is honoured (the backoff alone would wait 125–250 ms).
    assert!(duration >= Duration::from_millis(900), "{duration:?}");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    let expected = json!({"text": "hi", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*robot*"}}]});
    for request in &requests {
        assert_eq!(body(request), expected);
        assert_eq!(
            common::idempotency_key(request).unwrap(),
            format!("robot/{}", slot.rfc3339_utc())
        );
    }

    // 200 with anything but "ok" is a failure, final.
    let server = slack_receiver(vec![T::new(200).set_body_string("invalid_payload")]).await;
    let action = format!(
        "type = \"slack\"\nwebhook = \"{}/services/x\"\ntext = \"hi\"",
        server.uri()
    );
    let (result, _) = run_action(dir.path(), &action, &[]).await;
    let error = failed_error(result);
    assert!(error.contains("invalid_payload"), "{error}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn webhook_file_secret_file_and_variable_defaults_are_used() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(
        dir.path().join("secrets/wecom"),
        format!(
            "{}/cgi-bin/webhook/send?key=FILEKEY0123456789\n",
            receiver.uri()
        ),
    )
    .unwrap();
    let action = "type = \"wecom\"\nwebhook_file = \"secrets/wecom\"\nmsgtype = \"text\"\ncontent = \"${GREETING:-hello} ${TEAM:-all}\"";
    let (result, _) = run_action(dir.path(), action, &[("TEAM", "core")]).await;
    assert_done(&result);
    let request = &receiver.received()[0];
    assert_eq!(
        query(request),
        [("key".to_owned(), "FILEKEY0123456789".to_owned())]
    );
    assert_eq!(body(request)["text"]["content"], "hello core");

    // The webhook itself from a default.
    let receiver = Receiver::start();
    let action = format!(
        "type = \"wecom\"\nwebhook = \"${{WECOM_WEBHOOK:-{}/cgi-bin/webhook/send?key=DEFAULTKEY}}\"\nmsgtype = \"text\"\ncontent = \"x\"",
        receiver.uri()
    );
    assert_done(&run_action(dir.path(), &action, &[]).await.0);
    assert_eq!(
        query(&receiver.received()[0]),
        [("key".to_owned(), "DEFAULTKEY".to_owned())]
    );

    // A missing secret file is a config error naming the job, the field and the file.
    let text = "[[job]]\nname = \"robot\"\nschedule = \"* * * * *\"\n[job.action]\ntype = \"wecom\"\nwebhook_file = \"secrets/missing\"\nmsgtype = \"text\"\ncontent = \"x\"\n";
    let errors = config::parse(
        &dir.path().join("jobs.toml"),
        text,
        &HashMap::<String, String>::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        errors.contains("job \"robot\"")
            && errors.contains("action.webhook_file")
            && errors.contains("secrets/missing"),
        "{errors}"
    );
}

/// Every secret the next test configures, by how it is given.
const WECOM_KEY: &str = "WECOMKEY-from-a-file-0123";
const DING_TOKEN: &str = "DINGTOKEN-from-env-4567";
const DING_FILE_SECRET: &str = "SECding-from-a-file-89ab";
const FEISHU_HOOK: &str = "feishuhook-from-env-cdef0123";
const FEISHU_SECRET: &str = "feishu-secret-from-env-4567";
const SLACK_TOKEN: &str = "SLACKTOKENfromafile89abcdef";
const API_TOKEN: &str = "api-token-from-env-0123";
const CMD_TOKEN: &str = "cmd-token-from-env-4567";
const REDIS_PASSWORD: &str = "redis-pw-from-env-89ab";

fn assert_no_secret(what: &str, text: &str) {
    for secret in [
        WECOM_KEY,
        DING_TOKEN,
        DING_FILE_SECRET,
        FEISHU_HOOK,
        FEISHU_SECRET,
        SLACK_TOKEN,
        API_TOKEN,
        CMD_TOKEN,
        REDIS_PASSWORD,
    ] {
        assert!(
            !text.contains(secret),
            "{secret:?} leaked in {what}:\n{text}"
        );
    }
}

#[test]
fn no_secret_in_any_log_line_error_or_check_output() {
    let redis = common::RedisServer::start_with(&["--requirepass", REDIS_PASSWORD]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    // Receivers that fail, and echo the secret they were sent back in their answers (as a
    // proxy or a confused robot might): first a 5xx (retried), then a final error.
    let echo = |secret: &str, final_body: Value| {
        let receiver = Receiver::start_with_body(final_body);
        receiver.push_response(502, json!({"error": format!("bad gateway for {secret}")}));
        receiver
    };
    let wecom = echo(
        WECOM_KEY,
        json!({"errcode": 93000, "errmsg": format!("invalid webhook url, key {WECOM_KEY}")}),
    );
    let ding = echo(
        DING_TOKEN,
        json!({"errcode": 310000, "errmsg": format!("sign not match for {DING_TOKEN}")}),
    );
    let feishu = echo(
        FEISHU_HOOK,
        json!({"code": 19021, "msg": format!("sign match fail for hook {FEISHU_HOOK}")}),
    );
    let slack = echo(SLACK_TOKEN, json!(format!("no_service {SLACK_TOKEN}")));
    let api = echo(API_TOKEN, json!({"denied": format!("Bearer {API_TOKEN}")}));
    api.set_response(401, json!({"denied": format!("Bearer {API_TOKEN}")}));
    std::fs::write(
        dir.path().join("secrets/wecom"),
        format!("{}/cgi-bin/webhook/send?key={WECOM_KEY}\n", wecom.uri()),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("secrets/ding"),
        format!("{DING_FILE_SECRET}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("secrets/slack"),
        format!("{}/services/T0/B0/{SLACK_TOKEN}", slack.uri()),
    )
    .unwrap();
    let job = |name: &str, action: String| fleet::job_table(name, "* * * * * *", "2s", "", &action);
    let jobs = [
        job("wecom", "type = \"wecom\"\nwebhook_file = \"secrets/wecom\"\nmsgtype = \"text\"\ncontent = \"x\"".into()),
        job("ding", format!("type = \"dingtalk\"\nwebhook = \"{}/robot/send?access_token=${{DING_TOKEN}}\"\nsecret_file = \"secrets/ding\"\nmsgtype = \"text\"\ncontent = \"x\"", ding.uri())),
        job("feishu", format!("type = \"feishu\"\nwebhook = \"{}/open-apis/bot/v2/hook/${{FEISHU_HOOK}}\"\nsecret = \"${{FEISHU_SECRET}}\"\nmsg_type = \"text\"\ntext = \"x\"", feishu.uri())),
        job("slack", "type = \"slack\"\nwebhook_file = \"secrets/slack\"\ntext = \"x\"".into()),
        job("api", format!("type = \"http\"\nurl = \"{}/hook?token=${{API_TOKEN}}\"\nheaders = {{ Authorization = \"Bearer ${{API_TOKEN}}\" }}", api.uri())),
        job("cmd", "type = \"command\"\nargv = [\"sh\", \"-c\", \"exit 4\", \"${CMD_TOKEN}\"]".into()),
    ]
    .concat();
    let node = format!("redis://:${{REDIS_PASSWORD}}@127.0.0.1:{}", redis.port());
    let text = fleet::FleetToml {
        job: "",
        scheduler: "",
        redis: "",
        rest: &jobs,
        ..fleet::FleetToml::new(&[node], "", "slotcron")
    }
    .render();
    let path = common::write_config(dir.path(), &text);
    let env = [
        ("DING_TOKEN", DING_TOKEN),
        ("FEISHU_HOOK", FEISHU_HOOK),
        ("FEISHU_SECRET", FEISHU_SECRET),
        ("API_TOKEN", API_TOKEN),
        ("CMD_TOKEN", CMD_TOKEN),
        ("REDIS_PASSWORD", REDIS_PASSWORD),
        ("RUST_LOG", "debug"),
    ];

    let replica = common::Replica::run(&path, "leaky", &env);
    let jobs = ["wecom", "ding", "feishu", "slack", "api", "cmd"];
    let all_failed = common::wait_until(Duration::from_secs(20), || {
        let lines = replica.json_lines();
        jobs.iter()
            .all(|job| {
                lines
                    .iter()
                    .any(|l| l["job"] == *job && l["outcome"] == "failed")
            })
            .then_some(())
    });
    replica.terminate();
    assert!(replica.wait_timeout(Duration::from_secs(15)).is_some());
    let lines = replica.lines();
    assert!(all_failed.is_some(), "not every job failed: {lines:#?}");
    // Each receiver was reached with its secret, and answered with it.
    for (receiver, secret) in [
        (&wecom, WECOM_KEY),
        (&ding, DING_TOKEN),
        (&slack, SLACK_TOKEN),
        (&api, API_TOKEN),
    ] {
        assert!(
            receiver
                .received()
                .iter()
                .any(|r| r.url.as_str().contains(secret)),
            "{secret} did not reach its receiver"
        );
    }
    assert!(feishu.count() >= 2, "the feishu 502 was not retried");
    assert_no_secret("the replica's output", &lines.join("\n"));

    // `check` prints every job's target; a broken config prints errors.
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(["check", "--config", path.to_str().unwrap()])
        .envs(env)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(out.contains("key=***"), "{out}");
    assert_no_secret("check", &out);

    // The key alone where the URL is expected: an error with a hint, without the key.
    let broken = job(
        "wecom",
        "type = \"wecom\"\nwebhook = \"${WECOM_KEY}\"\nmsgtype = \"text\"\ncontent = \"x\""
            .to_owned(),
    );
    let broken_path = common::write_file(dir.path(), "broken.toml", &broken);
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(["check", "--config", broken_path.to_str().unwrap()])
        .env("WECOM_KEY", WECOM_KEY)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2));
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        err.contains("action.webhook") && err.contains("key alone"),
        "{err}"
    );
    assert_no_secret(
        "check errors",
        &format!("{err}{}", String::from_utf8_lossy(&check.stdout)),
    );
}

// ---------------------------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn content_file_templates_render_env_and_dates_in_the_job_zone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("templates")).unwrap();
    std::fs::write(
        dir.path().join("templates/standup.md"),
        "## Stand-up {{ slot | date(\"%Y-%m-%d %H:%M\") }} ({{ slot | date(\"%A\") }})\n\
         team: {{ env.TEAM }}, by {{ replica }}\n\
         {% if env.DEPLOY_ENV == \"prod\" %}<font color=\"warning\">prod</font>{% endif %}\n",
    )
    .unwrap();
    let receiver = Receiver::start();
    let action = wecom(
        &receiver,
        "msgtype = \"markdown\"\ncontent_file = \"templates/standup.md\"",
    );
    let (result, slot) = run_action(
        dir.path(),
        &action,
        &[("TEAM", "core"), ("DEPLOY_ENV", "prod")],
    )
    .await;
    assert_done(&result);
    assert_eq!(
        body(&receiver.received()[0])["markdown"]["content"],
        format!(
            "## Stand-up {} ({})\nteam: core, by replica-a\n<font color=\"warning\">prod</font>",
            local(slot, "%Y-%m-%d %H:%M"),
            local(slot, "%A")
        )
    );
}

#[test]
fn a_template_error_names_the_job_the_field_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("templates")).unwrap();
    std::fs::write(
        dir.path().join("templates/broken.md"),
        "line one\nline two\n{{ jbo }} is not a variable\n",
    )
    .unwrap();
    let job = |name: &str, action: &str| {
        format!("[[job]]\nname = \"{name}\"\nschedule = \"* * * * *\"\n[job.action]\n{action}\n")
    };
    let text = [
        job("syntax", "type = \"log\"\ncontent = \"ok\\n{{ job \""),
        job(
            "from-file",
            "type = \"wecom\"\nwebhook = \"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K\"\nmsgtype = \"markdown\"\ncontent_file = \"templates/broken.md\"",
        ),
        job("bad-date", "type = \"log\"\ncontent = \"a\\nb\\n{{ slot | date(\\\"%Q\\\") }}\""),
        job(
            "card",
            "type = \"slack\"\nwebhook = \"https://hooks.slack.com/services/x\"\ntext = \"{% for %}\"",
        ),
    ]
    .concat();
    let path = common::write_config(dir.path(), &text);
    let errors = config::load_with(&path, &HashMap::<String, String>::new()).unwrap_err();
    let shown = errors.to_string();
    let line_of = |job: &str| {
        shown
            .lines()
            .find(|l| l.contains(&format!("job \"{job}\"")))
            .unwrap_or_else(|| panic!("no error for job {job}: {shown}"))
            .to_owned()
    };
    for (job, field, line) in [
        ("syntax", "action.content", "line 2"),
        ("from-file", "action.content", "line 3"),
        ("bad-date", "action.content", "line 3"),
        ("card", "action.text", "line 1"),
    ] {
        let error = line_of(job);
        assert!(error.contains(field) && error.contains(line), "{error}");
    }
    assert!(line_of("from-file").contains("jbo"), "{shown}");
    assert_eq!(errors.errors.len(), 4, "{shown}");

    // The same from the binary: exit code 2, nothing started.
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        stderr.contains("job \"from-file\", field \"action.content\"") && stderr.contains("line 3"),
        "{stderr}"
    );
}
