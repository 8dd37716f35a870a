//! The status page (`[http] listen`, `/`): server-rendered HTML with an overview of the jobs
//! (failures first), the fleet's replicas and their share of the wins, and per job its
//! schedule, next slots, outcome strip, chart and last runs (winner, outcome, colour), checked
//! as HTML and then in a real headless browser (Debian's `chromium`), which keeps screenshots
//! in target/status-page.png (two jobs) and target/status-page-fleet.png (twelve jobs).

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use serde_json::Value;

use common::fleet::{FleetToml, http_job};
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

/// The section of the page about `job`: from its heading to the next job's section.
fn job_section<'a>(html: &'a str, job: &str) -> &'a str {
    let start = html
        .find(&format!("<h2 id=\"job-{job}\">"))
        .unwrap_or_else(|| panic!("no section for {job}: {html}"));
    let rest = &html[start..];
    &rest[..rest.find("<section").unwrap_or(rest.len())]
}

/// The `<td>` cells of each `<tr>` in `section`, as HTML.
fn table_cells(section: &str) -> Vec<Vec<String>> {
    section
        .split("<tr>")
        .skip(1)
        .filter(|row| row.contains("<td>"))
        .map(|row| {
            row.split("<td>")
                .skip(1)
                .map(|cell| cell.split("</td>").next().unwrap_or("").to_owned())
                .collect()
        })
        .collect()
}

/// The texts of the `<td>` cells of each `<tr>` in `section` (tags inside cells stripped).
fn table_rows(section: &str) -> Vec<Vec<String>> {
    table_cells(section)
        .iter()
        .map(|row| row.iter().map(|cell| strip_tags(cell)).collect())
        .collect()
}

/// Every `<time datetime>` in `html`, parsed.
fn datetimes(html: &str) -> Vec<DateTime<FixedOffset>> {
    html.split("<time datetime=\"")
        .skip(1)
        .map(|t| rfc3339(&unescape(t.split('"').next().unwrap())))
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

/// Two replicas `page-a` (serving the page on `port`) and `page-b` racing on three nodes, with
/// a receiver and a port nobody listens on for their jobs.
struct TwoReplicas {
    _cluster: RedisCluster,
    _dir: tempfile::TempDir,
    /// Where the jobs deliver: kept alive while the replicas run.
    _receiver: Receiver,
    port: u16,
    /// A port nobody listens on: an http job there cannot connect.
    closed: u16,
    /// `page-b`'s configuration: the CLI's too.
    without_http: PathBuf,
    a: Replica,
    b: Replica,
}

/// [`TwoReplicas`] with `[scheduler]` lines `scheduler` and the jobs `jobs(receiver, closed)`.
fn two_replicas(scheduler: &str, jobs: impl FnOnce(&Receiver, u16) -> String) -> TwoReplicas {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!(
        "page-{}-{}",
        std::process::id(),
        Utc::now().timestamp_micros()
    );
    let (port, closed) = (free_port(), free_port());
    let body = FleetToml {
        job: "",
        scheduler,
        redis: "node_timeout = \"250ms\"",
        rest: &jobs(&receiver, closed),
        ..FleetToml::new(&cluster.urls(), &receiver.uri(), &prefix)
    }
    .render();
    // Two replicas race; only the first serves [http] (they would share the port otherwise).
    let with_http = write_file(
        dir.path(),
        "a.toml",
        &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n\n{body}"),
    );
    let without_http = write_file(dir.path(), "b.toml", &body);
    TwoReplicas {
        a: start_replica(&with_http, "page-a"),
        b: start_replica(&without_http, "page-b"),
        _cluster: cluster,
        _dir: dir,
        _receiver: receiver,
        port,
        closed,
        without_http,
    }
}

/// `standup-demo` every second to `receiver`, and `failing` every 2 s to the `closed` port.
fn delivering_and_unreachable(receiver: &Receiver, closed: u16, failing: &str) -> String {
    let unreachable = format!("http://127.0.0.1:{closed}/nobody-listens");
    http_job(
        "standup-demo",
        "* * * * * *",
        "3s",
        &receiver.url("/standup"),
        "",
    ) + &http_job(failing, "*/2 * * * * *", "1s", &unreachable, "")
}

#[test]
fn status_page_lists_jobs_next_slots_and_winners_in_html_and_a_browser() {
    let _heavy = common::heavy();
    let fleet = two_replicas("timezone = \"Asia/Shanghai\"\n", |receiver, closed| {
        delivering_and_unreachable(receiver, closed, "flaky-push")
    });
    let (a, b, port) = (&fleet.a, &fleet.b, fleet.port);
    let lines = |job: &str, outcome: &str| -> Vec<Value> {
        [a, b]
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
    // Both jobs' tables of last runs open, as their "show the last runs" links leave them.
    let page = http_get(port, "/?runs=standup-demo,flaky-push").expect("the status page answers");
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .unwrap_or("")
            .starts_with("text/html")
    );
    let html = &page.body;
    assert!(
        html.contains("page-a"),
        "the page names the replica serving it"
    );
    assert!(!html.contains("<script"), "the page needs no JavaScript");

    let standup = job_section(html, "standup-demo");
    assert!(
        standup.contains("<code>* * * * * *</code>"),
        "schedule: {standup}"
    );
    assert!(
        unescape(standup).contains("in Asia/Shanghai"),
        "zone: {standup}"
    );
    let next = datetimes(between(standup, "Next:", "</p>").expect("next slots"));
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
    let cells = table_cells(standup);
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
    for (row, cells) in rows.iter().zip(&cells) {
        let slot = datetimes(&cells[0])[0];
        assert_eq!(slot.offset().local_minus_utc(), 8 * 3600);
        assert!(row[0].ends_with(" ago)"), "a relative time: {}", row[0]);
        assert_eq!(
            winner_in_logs(slot.with_timezone(&Utc)),
            Some(row[1].clone()),
            "the page's winner of {} is the one the logs show",
            row[0]
        );
    }
    assert!(
        standup.contains(r#"<span class="outcome done" title="done: a replica ran the slot and the action succeeded">done</span>"#),
        "{standup}"
    );

    let flaky = job_section(html, "flaky-push");
    assert!(flaky.contains(r#"class="outcome failed""#), "{flaky}");
    let failed = table_rows(flaky);
    assert!(
        failed.iter().any(|r| r[2] == "failed" && !r[5].is_empty()),
        "a failed run with its error: {failed:?}"
    );

    in_a_browser(port, "page-a");
}

/// Whether Debian's chromium is here; says so past the output capture when it is not.
fn have_chromium() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(
        !tools::in_ci(),
        "{CHROMIUM} is not installed: scripts/test.sh installs Debian's chromium package"
    );
    // Written past the test harness's output capture, so it shows in every run's log.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED the browser part of the status page test: {CHROMIUM} is not installed \
         (scripts/test.sh installs Debian's chromium package)"
    );
    false
}

/// Headless chromium on `url` with a throwaway profile, doing `what` (`--dump-dom`,
/// `--screenshot=…`); its output lines once it exited 0 within 60 s.
fn chromium(url: &str, what: &[String]) -> Vec<String> {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(what)
    .arg(url);
    let run = Replica::spawn_cmd("chromium", cmd);
    let status = run
        .wait_timeout(Duration::from_secs(60))
        .expect("chromium is done within 60 s");
    if !status.success() {
        run.dump();
    }
    assert!(status.success(), "chromium {what:?} exited with {status}");
    run.lines()
}

/// A screenshot of `url` at `width`x`height`, kept as target/`name`; its PNG bytes.
fn screenshot(url: &str, (width, height): (u32, u32), name: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let shot = dir.path().join(name);
    chromium(
        url,
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={width},{height}"),
            // On a loaded machine the capture could come before the page was all painted.
            "--run-all-compositor-stages-before-draw".to_owned(),
            "--virtual-time-budget=3000".to_owned(),
        ],
    );
    let png_bytes = std::fs::read(&shot).expect("the screenshot exists");
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
    assert!(
        png_bytes.len() > 5_000,
        "a real page, not a blank: {} bytes",
        png_bytes.len()
    );
    let kept = target_dir().join(name);
    std::fs::copy(&shot, &kept).unwrap();
    eprintln!("status page screenshot: {}", kept.display());
    png_bytes
}

/// The DOM of `url` as chromium rendered it.
fn dump_dom(url: &str) -> String {
    chromium(url, &["--dump-dom".to_owned()]).join("\n")
}

/// Screenshot and DOM of the page served by `replica` in headless Chromium; skipped (with a
/// message) without it.
fn in_a_browser(port: u16, replica: &str) {
    if !have_chromium() {
        return;
    }
    let url = format!("http://127.0.0.1:{port}/?runs=standup-demo");
    let png_bytes = screenshot(&url, (1200, 900), "status-page.png");
    assert_eq!(check_colours(&png_bytes), (1200, 900), "the window size");

    let dom = dump_dom(&url);
    assert!(dom.contains("standup-demo"), "{dom}");
    assert!(
        dom.contains(r#"<span class="outcome done" title="done: a replica ran the slot and the action succeeded">done</span>"#),
        "{dom}"
    );
    assert!(dom.contains("flaky-push"), "{dom}");
    assert!(
        dom.contains(replica),
        "the rendered page names {replica}: {dom}"
    );
}

/// The rendered page shows the outcome colours: green for done, red for failed. Returns the
/// image's size.
fn check_colours(png_bytes: &[u8]) -> (u32, u32) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("decodable PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
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
    (info.width, info.height)
}

/// Twelve jobs every second on one replica: ten deliver, `broken-push` gets a 500 and
/// `paused-report` is paused with `slotcron pause`.
fn fleet_config(nodes: &[String], ok: &str, broken: &str, prefix: &str, port: u16) -> String {
    let job = |name: &str| {
        let url = if name == "broken-push" { broken } else { ok };
        http_job(name, "* * * * * *", "2s", &format!("{url}/{name}"), "")
    };
    let jobs = FLEET_JOBS.map(job).concat();
    FleetToml {
        job: "",
        scheduler: "timezone = \"Asia/Shanghai\"\nmax_clock_skew = \"1s\"",
        redis: "node_timeout = \"250ms\"",
        rest: &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n{jobs}"),
        ..FleetToml::new(nodes, ok, prefix)
    }
    .render()
}

/// In file order: the failing and the paused jobs are in the middle, the page puts them first.
const FLEET_JOBS: [&str; 12] = [
    "standup-01",
    "standup-02",
    "standup-03",
    "paused-report",
    "standup-05",
    "standup-06",
    "broken-push",
    "standup-08",
    "standup-09",
    "standup-10",
    "standup-11",
    "standup-12",
];

#[test]
fn status_page_of_twelve_jobs_one_failing_one_paused_shows_overview_charts_and_strips() {
    let _heavy = common::heavy();
    let cluster = RedisCluster::start(3);
    let ok = Receiver::start();
    ok.set_delay(Duration::from_millis(30));
    let broken = Receiver::start();
    broken.set_response(500, serde_json::json!({"error": "down for maintenance"}));
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("fleet-page-{}", std::process::id());
    let port = free_port();
    let config = write_file(
        dir.path(),
        "jobs.toml",
        &fleet_config(&cluster.urls(), &ok.uri(), &broken.uri(), &prefix, port),
    );
    let replica = start_replica(&config, "page-solo");
    pause_after_two_runs(&replica, &config);
    wait_for_runs(&replica);

    let page = http_get(port, "/").expect("the status page answers");
    assert_eq!(page.status, 200);
    check_fleet_page(&page.body);
    check_filter(port);
    let opened = check_open_runs(port);
    if have_chromium() {
        let url = format!("http://127.0.0.1:{port}/");
        check_fleet_page(&dump_dom(&url));
        let png = screenshot(&url, (1280, 2000), "status-page-fleet.png");
        assert_eq!(check_colours(&png), (1280, 2000));
        check_open_runs_survive_a_refresh(port, &opened);
    }
}

/// The jobs whose table of last runs is open in `html`.
fn open_tables(html: &str) -> Vec<&'static str> {
    FLEET_JOBS
        .into_iter()
        .filter(|job| job_section(html, job).contains(r#"<table class="runs">"#))
        .collect()
}

/// The link that shows (or hides) `job`'s last runs, as the page wrote it.
fn toggle_href(html: &str, job: &str) -> String {
    let section = job_section(html, job);
    let link = between(section, r#"<p class="toggle"><a href=""#, "\"").expect("the toggle link");
    unescape(link)
}

/// No table is open at first; following the page's own links opens broken-push's, then also
/// standup-01's (the first stays open), and the refresh reloads that same address. Returns the
/// path with both open.
fn check_open_runs(port: u16) -> String {
    let page = http_get(port, "/").unwrap().body;
    assert_eq!(open_tables(&page), Vec::<&str>::new(), "closed at first");
    assert!(
        page.contains(r#"<meta http-equiv="refresh" content="10">"#),
        "a refresh to this same address"
    );
    let first = toggle_href(&page, "broken-push");
    let page = http_get(port, &first).unwrap().body;
    assert_eq!(open_tables(&page), ["broken-push"], "{first}");
    let runs = job_section(&page, "broken-push");
    assert!(runs.contains("500"), "the error in its table: {runs}");
    let both = toggle_href(&page, "standup-01");
    let page = http_get(port, &both).unwrap().body;
    assert_eq!(open_tables(&page), ["standup-01", "broken-push"], "{both}");
    let closed = toggle_href(&page, "broken-push");
    let page = http_get(port, &closed).unwrap().body;
    assert_eq!(open_tables(&page), ["standup-01"], "{closed}");
    both
}

/// In a browser, past the page's 10 s refresh (virtual time): both tables are still open, and
/// the screenshot (target/status-page-open-runs.png) shows them with the error in the overview.
fn check_open_runs_survive_a_refresh(port: u16, path: &str) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let dom = chromium(
        &url,
        &[
            "--virtual-time-budget=12000".to_owned(),
            "--dump-dom".to_owned(),
        ],
    )
    .join("\n");
    assert_eq!(open_tables(&dom), ["standup-01", "broken-push"], "{url}");
    // Without the fragment: headless chromium paints nothing when it scrolls to an anchor.
    let top = url.split('#').next().unwrap();
    let png = screenshot(top, (1280, 1400), "status-page-open-runs.png");
    assert_eq!(check_colours(&png), (1280, 1400));
}

/// The replica's log lines of `job` with `outcome`.
fn count(replica: &Replica, job: &str, outcome: &str) -> usize {
    replica
        .json_lines()
        .iter()
        .filter(|v| text(v, "job") == job && text(v, "outcome") == outcome)
        .count()
}

/// Pauses `paused-report` with `slotcron pause` once it ran twice (so its chart has runs).
fn pause_after_two_runs(replica: &Replica, config: &Path) {
    let ran = wait_until(Duration::from_secs(20), || {
        (count(replica, "paused-report", "done") >= 2).then_some(())
    });
    assert!(
        ran.is_some(),
        "paused-report did not run: {:?}",
        replica.lines()
    );
    slotcron_cli(
        config,
        &[
            "pause",
            "paused-report",
            "--reason",
            "quarterly freeze",
            "--by",
            "ops",
        ],
    );
}

/// Until each job has a strip worth checking: 6 runs done, 4 failed, 3 slots paused.
fn wait_for_runs(replica: &Replica) {
    let ready = wait_until(Duration::from_secs(30), || {
        let enough = FLEET_JOBS
            .iter()
            .filter(|j| !["paused-report", "broken-push"].contains(j))
            .all(|j| count(replica, j, "done") >= 6);
        (enough
            && count(replica, "broken-push", "failed") >= 4
            && count(replica, "paused-report", "paused") >= 3)
            .then_some(())
    });
    assert!(ready.is_some(), "not enough runs within 30 s");
}

/// The overview (12 rows, failing first, then paused), the fleet (one replica, 100 %), and per
/// job its strip and chart, in `html` as served or as chromium rendered it.
fn check_fleet_page(html: &str) {
    assert!(!html.contains("<script"), "the page needs no JavaScript");
    let overview = between(html, r#"<table class="overview">"#, "</table>").expect("overview");
    let rows = table_rows(overview);
    assert_eq!(rows.len(), 12, "one row per job: {rows:?}");
    assert_eq!(rows[0][0], "broken-push", "the failing job first: {rows:?}");
    assert!(rows[0][1].starts_with("failed"), "{rows:?}");
    assert!(
        rows[0][1].contains("500"),
        "the failure's error in the overview's text, not only a tooltip: {rows:?}"
    );
    assert_eq!(rows[1][0], "paused-report", "then the paused one: {rows:?}");
    assert!(
        rows[1][4].starts_with("paused by ops") && rows[1][4].contains("quarterly freeze"),
        "who paused it and why: {rows:?}"
    );
    for row in &rows[2..] {
        assert!(row[1].starts_with("done"), "{row:?}");
        assert!(row[2].ends_with(" ago)"), "last success, relative: {row:?}");
        assert!(row[3].contains("(in "), "next slot: {row:?}");
        assert_eq!(row[4], "no", "{row:?}");
    }
    let fleet = between(html, r#"<table class="fleet">"#, "</table>").expect("fleet table");
    let fleet = table_rows(fleet);
    assert_eq!(fleet.len(), 1, "{fleet:?}");
    assert_eq!(fleet[0][0], "page-solo this replica");
    assert_eq!(fleet[0][1], "live", "the replica heartbeats: {fleet:?}");
    assert_eq!(fleet[0][3], "100 %");
    for job in FLEET_JOBS {
        check_job_section(job_section(html, job), job);
    }
}

/// A job's strip (coloured cells with tooltips) and chart (an SVG with a dot per run).
fn check_job_section(section: &str, job: &str) {
    let strip = between(section, r#"<div class="strip">"#, "</div>").expect("a strip");
    let cells: Vec<&str> = strip
        .split(r#"<span class="cell "#)
        .skip(1)
        .map(|c| c.split('"').next().unwrap())
        .collect();
    assert!(cells.len() >= 6, "{job}: {cells:?}");
    let expected = match job {
        "broken-push" => "failed",
        "paused-report" => "paused",
        _ => "done",
    };
    assert!(
        cells.iter().filter(|c| **c == expected).count() >= 3,
        "{job}: {cells:?}"
    );
    if job == "broken-push" {
        assert!(strip.contains("500"), "the error in the tooltip: {strip}");
    }
    assert!(section.contains("<svg"), "{job}: a chart");
    let dots = section.matches("<circle").count();
    assert!(dots >= 2 * 2, "{job}: lateness and duration dots: {dots}");
    assert!(section.contains("<polyline"), "{job}");
}

/// `/?job=NAME` shows that job only; a part of a name, every job containing it; a name no job
/// has, a clear 404.
fn check_filter(port: u16) {
    let page = http_get(port, "/?job=standup-05").expect("the filtered page");
    assert_eq!(page.status, 200);
    let rows = table_rows(between(&page.body, r#"<table class="overview">"#, "</table>").unwrap());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][0], "standup-05");
    assert_eq!(page.body.matches("<section").count(), 1);
    let page = http_get(port, "/?job=push").expect("the filtered page");
    assert_eq!(page.body.matches("<section").count(), 1, "broken-push only");
    let page = http_get(port, "/?job=nosuchjob").expect("an answer");
    assert_eq!(page.status, 404);
    assert!(
        page.body.contains("No job matches <q>nosuchjob</q>"),
        "{}",
        page.body
    );
}

/// Two replicas: `standup-demo` delivers every second, `robot-push` cannot connect (nothing
/// leaves the winner, so it is handed off and fails), `cli-report` (yearly) is run once with
/// `slotcron trigger`. The page says at a glance what the last day held, who ran each job's last
/// slot, the failure in one plain sentence (the raw chain folded), and which run the CLI
/// started; the screenshot is kept as target/status-page-glance.png.
#[test]
fn status_page_at_a_glance_fleet_line_who_ran_each_last_slot_and_the_failure_in_words() {
    let _heavy = common::heavy();
    let fleet = two_replicas("", |receiver, closed| {
        delivering_and_unreachable(receiver, closed, "robot-push")
            + &http_job(
                "cli-report",
                "0 0 0 1 1 *",
                "3s",
                &receiver.url("/report"),
                "",
            )
    });
    let (a, b, port, closed) = (&fleet.a, &fleet.b, fleet.port, fleet.closed);
    let failed = |job: &str| -> usize { [a, b].iter().map(|r| count(r, job, "failed")).sum() };
    let ready = wait_until(Duration::from_secs(20), || {
        (count(a, "standup-demo", "done") + count(b, "standup-demo", "done") >= 3
            && failed("robot-push") >= 1)
            .then_some(())
    });
    assert!(
        ready.is_some(),
        "no 3 done runs and 1 failed run within 20 s"
    );
    slotcron_cli(&fleet.without_http, &["trigger", "cli-report"]);

    // The page shows a snapshot up to 2 s old (SNAPSHOT_LIFE): wait for one taken after the
    // trigger; 15 s covers a loaded machine.
    let html = wait_until(Duration::from_secs(15), || {
        let page = http_get(port, "/?runs=robot-push").filter(|p| p.status == 200)?;
        overview_row(&page.body, "cli-report")[1]
            .contains("CLI")
            .then_some(page.body)
    })
    .expect("the page shows cli-report's triggered run within 15 s");
    check_glance(&html, closed);
    check_runners_match_the_logs(&html, &[a, b]);

    if have_chromium() {
        let url = format!("http://127.0.0.1:{port}/");
        check_glance(&dump_dom(&url), closed);
        let png = screenshot(&url, (1280, 1000), "status-page-glance.png");
        assert_eq!(check_colours(&png), (1280, 1000));
    }
}

/// The overview's row of `job`: its cells' texts.
fn overview_row(html: &str, job: &str) -> Vec<String> {
    let overview = between(html, r#"<table class="overview">"#, "</table>").expect("overview");
    table_rows(overview)
        .into_iter()
        .find(|row| row[0] == job)
        .unwrap_or_else(|| panic!("no overview row for {job}: {overview}"))
}

/// The fleet line, who ran each last slot, the failure's sentence and raw chain, the CLI's run.
fn check_glance(html: &str, closed: u16) {
    let line = strip_tags(
        between(html, r#"<p class="fleetline" id="fleet-line">"#, "</p>").expect("a fleet line"),
    );
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..3], ["Last", "24", "h:"], "{line}");
    let number = |what: &str| -> usize {
        let at = words
            .iter()
            .position(|w| *w == what)
            .unwrap_or_else(|| panic!("{what}: {line}"));
        words[at - 1]
            .parse()
            .unwrap_or_else(|_| panic!("{what}: {line}"))
    };
    assert!(number("failed") >= 1, "robot-push failed: {line}");
    let _ = (number("missed"), number("duplicated"), number("paused"));
    assert!(line.ends_with("(0 job(s) paused now)"), "{line}");

    for job in ["standup-demo", "robot-push", "cli-report"] {
        let row = overview_row(html, job);
        let by = row[1]
            .split(" by ")
            .nth(1)
            .unwrap_or_else(|| panic!("no runner: {row:?}"));
        assert!(
            by.starts_with("page-") || job == "cli-report",
            "{job} ran by {by}"
        );
    }
    let robot = overview_row(html, "robot-push");
    let sentence = format!(
        "The http action to 127.0.0.1:{closed} failed: could not connect (connection refused). \
         Tried by page-"
    );
    assert!(robot[1].starts_with("failed"), "{robot:?}");
    assert!(
        robot[1].contains(&sentence),
        "the plain sentence: {robot:?}"
    );
    let cell = between(html, "<td><a href=\"#job-robot-push\">", "</tr>").unwrap();
    let raw = between(
        cell,
        r#"<details class="raw"><summary>raw error</summary>"#,
        "</details>",
    )
    .expect("the raw chain, folded");
    assert!(
        raw.contains("not delivered: nothing left this replica"),
        "{raw}"
    );
    assert!(
        !cell.contains("<details class=\"raw\" open"),
        "folded: {cell}"
    );

    let cli = overview_row(html, "cli-report");
    assert!(
        cli[1].starts_with("done")
            && cli[1].contains("(started from the CLI: slotcron trigger) CLI"),
        "{cli:?}"
    );
    let fleet = between(html, r#"<table class="fleet">"#, "</table>").expect("fleet table");
    assert!(fleet.contains("wins (done)"), "{fleet}");
    assert!(fleet.contains("1 run(s) started from the CLI"), "{fleet}");
    assert!(
        html.contains("missed: no replica recorded running this slot"),
        "missed in words"
    );
}

/// The robot-push runs table: each failed run's runner is the replica whose log failed it.
fn check_runners_match_the_logs(html: &str, replicas: &[&Replica]) {
    let section = job_section(html, "robot-push");
    let logs: Vec<Value> = replicas.iter().flat_map(|r| r.json_lines()).collect();
    let mut checked = 0;
    for (row, cells) in table_rows(section).iter().zip(table_cells(section)) {
        if row[2] != "failed" {
            continue;
        }
        let slot = datetimes(&cells[0])[0].with_timezone(&Utc);
        let failed_by = logs.iter().find(|v| {
            text(v, "job") == "robot-push"
                && text(v, "outcome") == "failed"
                && rfc3339(text(v, "slot")) == slot
        });
        let Some(failed_by) = failed_by else { continue };
        assert!(
            row[1].ends_with(text(failed_by, "replica")),
            "the page's runner of {} is the one that logged it failed: {row:?}",
            row[0]
        );
        checked += 1;
    }
    assert!(
        checked >= 1,
        "a failed run checked against the logs: {section}"
    );
}
