//! The status page (`[http] listen`, `/`): server-rendered HTML with each job's schedule, zone,
//! next slots and last runs (winner, outcome, colour), checked as HTML and then in a real
//! headless browser (Debian's `chromium`), which keeps a screenshot in target/status-page.png.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use serde_json::Value;

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_slotcron");
const CHROMIUM: &str = "/usr/bin/chromium";

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn start_replica(config: &Path, id: &str) -> Replica {
    Replica::run(config, id, &[("RUST_LOG", "info")])
}

/// The part of `html` after `start` and before the next `end`.
fn between<'a>(html: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let i = html.find(start)? + start.len();
    let j = html[i..].find(end)? + i;
    Some(&html[i..j])
}

/// The texts of the `<td>` cells of each `<tr>` in `section` (tags inside cells stripped).
fn table_rows(section: &str) -> Vec<Vec<String>> {
    section
        .split("<tr>")
        .skip(1)
        .filter(|row| row.contains("<td>"))
        .map(|row| {
            row.split("<td>")
                .skip(1)
                .map(|cell| strip_tags(cell.split("</td>").next().unwrap_or("")))
                .collect()
        })
        .collect()
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    unescape(out.trim())
}

/// The text a reader sees for HTML-escaped text (minijinja escapes `/` too).
fn unescape(text: &str) -> String {
    text.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn rfc3339(s: &str) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"))
}

/// target/ (the binary lives in target/<profile>/).
fn target_dir() -> PathBuf {
    Path::new(BIN)
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

#[test]
fn status_page_lists_jobs_next_slots_and_winners_in_html_and_a_browser() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!(
        "page-{}-{}",
        std::process::id(),
        Utc::now().timestamp_micros()
    );
    let port = free_port();
    let closed = free_port();
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let body = format!(
        "[scheduler]\ntimezone = \"Asia/Shanghai\"\nkey_prefix = {prefix:?}\n\n\
         [redis]\nnodes = [{}]\nnode_timeout = \"250ms\"\n\n\
         [[job]]\nname = \"standup-demo\"\nschedule = \"* * * * * *\"\ntimeout = \"3s\"\n\
         [job.action]\ntype = \"http\"\nurl = {:?}\n\n\
         [[job]]\nname = \"flaky-push\"\nschedule = \"*/2 * * * * *\"\ntimeout = \"1s\"\n\
         [job.action]\ntype = \"http\"\nurl = \"http://127.0.0.1:{closed}/nobody-listens\"\n",
        nodes.join(", "),
        receiver.url("/standup"),
    );
    // Two replicas race; only the first serves [http] (they would share the port otherwise).
    let with_http = write_file(
        dir.path(),
        "a.toml",
        &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n\n{body}"),
    );
    let without_http = write_file(dir.path(), "b.toml", &body);
    let a = start_replica(&with_http, "page-a");
    let b = start_replica(&without_http, "page-b");
    let lines = |job: &str, outcome: &str| -> Vec<Value> {
        [&a, &b]
            .iter()
            .flat_map(|r| r.json_lines())
            .filter(|v| text(v, "job") == job && text(v, "outcome") == outcome)
            .collect()
    };
    let ready = wait_until(Duration::from_secs(15), || {
        (lines("standup-demo", "done").len() >= 3 && !lines("flaky-push", "failed").is_empty())
            .then_some(())
    });
    assert!(
        ready.is_some(),
        "no 3 done runs and 1 failed run within 15 s"
    );
    let fetched_at = Utc::now();
    let page = http_get(port, "/").expect("the status page answers");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/html"));
    let html = &page.body;
    assert!(
        html.contains("page-a"),
        "the page names the replica serving it"
    );
    assert!(!html.contains("<script"), "the page needs no JavaScript");

    let standup =
        between(html, "<h2 id=\"job-standup-demo\">", "<h2").expect("a section for standup-demo");
    assert!(
        standup.contains("<code>* * * * * *</code>"),
        "schedule: {standup}"
    );
    assert!(
        unescape(standup).contains("in Asia/Shanghai"),
        "zone: {standup}"
    );
    let next: Vec<DateTime<FixedOffset>> = between(standup, "Next:", "</p>")
        .expect("next slots")
        .split("<code>")
        .skip(1)
        .map(|c| rfc3339(&unescape(c.split("</code>").next().unwrap())))
        .collect();
    assert_eq!(next.len(), 3, "three next slots: {standup}");
    for (i, slot) in next.iter().enumerate() {
        assert_eq!(
            slot.offset().local_minus_utc(),
            8 * 3600,
            "shown in the job's zone"
        );
        assert!(slot.with_timezone(&Utc) > fetched_at - chrono::Duration::seconds(2));
        if i > 0 {
            assert_eq!(*slot - next[i - 1], chrono::Duration::seconds(1));
        }
    }

    let rows = table_rows(standup);
    let done_rows: Vec<&Vec<String>> = rows.iter().filter(|r| r[2] == "done").collect();
    assert!(done_rows.len() >= 2, "runs listed: {rows:?}");
    // The winner the logs show for a slot (its `won` line may still be on its way to us).
    let winner_in_logs = |slot: DateTime<Utc>| {
        wait_until(Duration::from_secs(3), || {
            lines("standup-demo", "won")
                .iter()
                .find(|v| rfc3339(text(v, "slot")) == slot)
                .map(|v| text(v, "replica").to_owned())
        })
    };
    for row in &rows {
        let slot = rfc3339(&row[0]);
        assert_eq!(slot.offset().local_minus_utc(), 8 * 3600);
        assert_eq!(
            winner_in_logs(slot.with_timezone(&Utc)),
            Some(row[1].clone()),
            "the page's winner of {} is the one the logs show",
            row[0]
        );
    }
    assert!(
        standup.contains(r#"<span class="outcome done">done</span>"#),
        "{standup}"
    );

    let flaky = &html[html
        .find("<h2 id=\"job-flaky-push\">")
        .expect("flaky-push section")..];
    assert!(flaky.contains(r#"class="outcome failed""#), "{flaky}");
    let failed = table_rows(flaky);
    assert!(
        failed.iter().any(|r| r[2] == "failed" && !r[4].is_empty()),
        "a failed run with its error: {failed:?}"
    );

    in_a_browser(port, "page-a");
}

/// Screenshot and DOM of the page served by `replica` in headless Chromium; skipped (with a
/// message) without it.
fn in_a_browser(port: u16, replica: &str) {
    if !Path::new(CHROMIUM).exists() {
        // Written past the test harness's output capture, so it shows in every run's log.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED the browser part of the status page test: {CHROMIUM} is not installed \
             (scripts/test.sh installs Debian's chromium package)"
        );
        return;
    }
    let url = format!("http://127.0.0.1:{port}/");
    let profile = tempfile::tempdir().unwrap();
    let shot = profile.path().join("status.png");
    let common_args = [
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--disable-dev-shm-usage".into(),
        format!(
            "--user-data-dir={}",
            profile.path().join("profile").display()
        ),
    ];

    let mut cmd = Command::new(CHROMIUM);
    cmd.args(&common_args)
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1200,900")
        .arg(&url);
    let run = Replica::spawn_cmd("chromium-screenshot", cmd);
    let status = run
        .wait_timeout(Duration::from_secs(60))
        .expect("chromium takes the screenshot within 60 s");
    if !status.success() {
        run.dump();
    }
    assert!(status.success(), "chromium exited with {status}");
    let png_bytes = std::fs::read(&shot).expect("the screenshot exists");
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
    assert!(
        png_bytes.len() > 5_000,
        "a real page, not a blank: {} bytes",
        png_bytes.len()
    );
    let kept = target_dir().join("status-page.png");
    std::fs::copy(&shot, &kept).unwrap();
    eprintln!("status page screenshot: {}", kept.display());
    check_colours(&png_bytes);

    let mut cmd = Command::new(CHROMIUM);
    cmd.args(&common_args).arg("--dump-dom").arg(&url);
    let dump = Replica::spawn_cmd("chromium-dump-dom", cmd);
    let status = dump
        .wait_timeout(Duration::from_secs(60))
        .expect("chromium dumps the DOM within 60 s");
    assert!(status.success(), "chromium --dump-dom exited with {status}");
    let dom = dump.lines().join("\n");
    assert!(dom.contains("standup-demo"), "{dom}");
    assert!(
        dom.contains(r#"<span class="outcome done">done</span>"#),
        "{dom}"
    );
    assert!(dom.contains("flaky-push"), "{dom}");
    assert!(
        dom.contains(replica),
        "the rendered page names {replica}: {dom}"
    );
}

/// The rendered page shows the outcome colours: green for done, red for failed.
fn check_colours(png_bytes: &[u8]) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("decodable PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!((info.width, info.height), (1200, 900), "the window size");
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected colour type {other:?}"),
    };
    let count = |rgb: [u8; 3]| {
        buf[..info.buffer_size()]
            .chunks(channels)
            .filter(|p| (0..3).all(|i| p[i].abs_diff(rgb[i]) <= 4))
            .count()
    };
    // .done { background: #2e7d32 } and .failed { background: #c62828 } in the page's CSS.
    let green = count([0x2e, 0x7d, 0x32]);
    let red = count([0xc6, 0x28, 0x28]);
    assert!(green > 100, "done badges are green on screen ({green} px)");
    assert!(red > 100, "failed badges are red on screen ({red} px)");
}
