//! The fleet-wide rate budget: three real replica processes, three real redis-server nodes and
//! one robot (a local receiver that stamps each arrival). The fleet as a whole never sends more
//! than the budget in any window, every slot is either sent or logged as skipped for the budget,
//! and the budget is kept under a hash of the webhook, never the webhook itself.
//!
//! Two fleets run side by side (the tests run in parallel): the case, 30 slots inside a
//! minute against the robot's 20/min, and a short 5/10s window over 22 s that shows the window
//! sliding (sends resume when places free) and a winner waiting for a place within its timeout.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use slotcron::unstable::action::Action;
use slotcron::unstable::action::rate::Rate;
use slotcron::unstable::config;

/// A robot that records when each request arrived and its `Idempotency-Key`, and answers OK.
struct StampingRobot {
    server: wiremock::MockServer,
    arrivals: Arc<Mutex<Vec<(Instant, String)>>>,
}

struct Stamp(Arc<Mutex<Vec<(Instant, String)>>>);

impl wiremock::Respond for Stamp {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let key = common::idempotency_key(request).unwrap_or_default();
        self.0.lock().unwrap().push((Instant::now(), key));
        wiremock::ResponseTemplate::new(200).set_body_json(json!({"errcode": 0, "errmsg": "ok"}))
    }
}

impl StampingRobot {
    fn start() -> Self {
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let responder = Stamp(arrivals.clone());
        // Started on its own runtime (as the harness's Receiver is); the server then runs on
        // wiremock's own thread.
        let server = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    let server = wiremock::MockServer::builder()
                        .disable_request_recording()
                        .start()
                        .await;
                    wiremock::Mock::given(wiremock::matchers::method("POST"))
                        .respond_with(responder)
                        .mount(&server)
                        .await;
                    server
                })
        })
        .join()
        .unwrap();
        StampingRobot { server, arrivals }
    }

    fn webhook(&self) -> String {
        format!(
            "{}/cgi-bin/webhook/send?key=BUDGETKEY0123456789",
            self.server.uri()
        )
    }

    fn arrivals(&self) -> Vec<(Instant, String)> {
        self.arrivals.lock().unwrap().clone()
    }
}

/// The budget's Redis key for `webhook`: `{prefix}:rate:{first 16 hex of SHA-256(webhook)}`.
fn budget_key(prefix: &str, webhook: &str) -> String {
    format!(
        "{prefix}:rate:{}",
        hex::encode(&Sha256::digest(webhook.as_bytes())[..8])
    )
}

/// Three replicas of one job sending every second to `robot` under `rate`.
fn fleet(
    cluster: &common::RedisCluster,
    dir: &std::path::Path,
    prefix: &str,
    robot: &StampingRobot,
    rate: &str,
) -> Vec<common::Replica> {
    let action = format!(
        "type = \"wecom\"\nwebhook = \"{}\"\nmsgtype = \"text\"\n\
         content = \"{{{{ slot }}}}\"\nrate = \"{rate}\"",
        robot.webhook()
    );
    let text = common::fleet::FleetToml {
        job: "chatty",
        timeout: "3s",
        redis: "",
        job_extra: "overlap = \"allow\"",
        action: &action,
        ..common::fleet::FleetToml::new(&cluster.urls(), "", prefix)
    }
    .render();
    let path = common::write_config(dir, &text);
    (0..3)
        .map(|i| common::Replica::run(&path, &format!("r{i}"), &[]))
        .collect()
}

/// Stops the fleet gracefully (in-flight slots finish) and returns every JSON line.
fn stop(replicas: &[common::Replica]) -> Vec<Value> {
    for r in replicas {
        r.terminate();
    }
    for r in replicas {
        assert!(
            r.wait_timeout(Duration::from_secs(15)).is_some(),
            "a replica did not stop"
        );
    }
    replicas.iter().flat_map(|r| r.json_lines()).collect()
}

/// Watches the budget's key on every node while the fleet runs: each admission (a member of
/// the sorted set, scored with the node's `TIME` in ms when the script admitted it). What a
/// node takes back (an admission the other nodes refused) is gone again at the next look, so
/// only members seen in at least two looks count.
struct BudgetWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<HashMap<String, (i64, usize)>>>,
}

impl BudgetWatch {
    fn start(urls: Vec<String>, key: String) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen: Vec<HashMap<String, (i64, usize)>> = vec![HashMap::new(); urls.len()];
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                for (node, url) in urls.iter().enumerate() {
                    let members: Vec<(String, i64)> =
                        common::redis_query(url, &["ZRANGE", &key, "0", "-1", "WITHSCORES"])
                            .unwrap_or_default();
                    for (member, score) in members {
                        seen[node].entry(member).or_insert((score, 0)).1 += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            seen
        });
        BudgetWatch { stop, thread }
    }

    /// Each node's admissions, in ms of its own clock, sorted.
    fn admissions(self) -> Vec<Vec<i64>> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let seen = self.thread.join().unwrap();
        seen.into_iter()
            .map(|members| {
                let mut times: Vec<i64> = members
                    .into_values()
                    .filter(|(_, looks)| *looks >= 2)
                    .map(|(at, _)| at)
                    .collect();
                times.sort_unstable();
                times
            })
            .collect()
    }
}

/// The most admissions (ms, sorted) inside any span shorter than `window_ms`.
fn most_in_any_window_ms(times: &[i64], window_ms: i64) -> usize {
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t - times[i] < window_ms)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The most arrivals inside any span shorter than `window` (arrivals sorted).
fn most_in_any_window(arrivals: &[Instant], window: Duration) -> usize {
    (0..arrivals.len())
        .map(|i| {
            arrivals[i..]
                .iter()
                .take_while(|t| t.duration_since(arrivals[i]) < window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Every slot some replica won was either sent exactly once or failed for the rate budget.
/// Returns (won slots, sent slots, skipped slots).
fn check_every_slot_sent_or_skipped(
    lines: &[Value],
    arrivals: &[(Instant, String)],
) -> (usize, usize, usize) {
    let mut sent: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, key) in arrivals {
        *sent.entry(key.as_str()).or_default() += 1;
    }
    assert!(
        sent.values().all(|&n| n == 1),
        "a slot was sent twice: {sent:?}"
    );
    let won: Vec<&str> = lines
        .iter()
        .filter(|l| l["outcome"] == "won")
        .filter_map(|l| l["slot"].as_str())
        .collect();
    let mut skipped = 0;
    for slot in &won {
        let delivered = sent.contains_key(format!("chatty/{slot}").as_str());
        let skipped_for_budget = lines.iter().any(|l| {
            l["slot"] == *slot
                && l["outcome"] == "failed"
                && l["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("rate budget"))
        });
        assert!(
            delivered != skipped_for_budget,
            "slot {slot}: sent {delivered}, skipped for the budget {skipped_for_budget}"
        );
        skipped += usize::from(skipped_for_budget);
    }
    // And nothing reached the robot that no replica won.
    assert_eq!(sent.len(), won.len() - skipped, "{sent:?}");
    (won.len(), sent.len(), skipped)
}

fn skip_lines(lines: &[Value]) -> usize {
    lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("skipped for the rate budget"))
        })
        .count()
}

/// Winners that waited for a place in the budget (and then sent).
fn wait_lines(lines: &[Value]) -> usize {
    lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("waited for the webhook's rate budget"))
        })
        .count()
}

#[test]
fn three_replicas_thirty_slots_in_a_minute_never_exceed_20_per_minute() {
    // The case: WeCom's documented budget of 20 a minute, 30 slots (one a second), three
    // replicas racing for each, one robot.
    let cluster = common::RedisCluster::start(3);
    let robot = StampingRobot::start();
    let dir = tempfile::tempdir().unwrap();
    let replicas = fleet(&cluster, dir.path(), "issue", &robot, "20/min");
    let first = common::wait_until(Duration::from_secs(15), || {
        robot.arrivals().first().map(|(t, _)| *t)
    })
    .expect("nothing was sent");
    // 30 slots and more from the first send.
    let _ = common::wait_until(Duration::from_secs(40), || {
        (first.elapsed() >= Duration::from_secs(31)).then_some(())
    });
    let lines = stop(&replicas);
    let arrivals = robot.arrivals();
    let times: Vec<Instant> = arrivals.iter().map(|(t, _)| *t).collect();

    assert!(
        most_in_any_window(&times, Duration::from_secs(60)) <= 20,
        "{} sends within a minute",
        most_in_any_window(&times, Duration::from_secs(60))
    );
    let (won, sent, skipped) = check_every_slot_sent_or_skipped(&lines, &arrivals);
    assert!(won >= 30, "only {won} slots ran: the fleet did not keep up");
    // The budget is used to the full, not wasted: the first 20 slots went out.
    assert_eq!(sent, 20, "{sent} sent, {skipped} skipped of {won}");
    assert_eq!(skip_lines(&lines), skipped);
    // No place frees within a 3 s timeout in a 60 s window: nobody waits, the first 20 go at once.
    assert_eq!(wait_lines(&lines), 0);
    for node in cluster.iter() {
        let keys = common::redis_keys(&node.url(), "issue:rate:*");
        assert_eq!(keys, [budget_key("issue", &robot.webhook())]);
    }
}

#[test]
fn a_short_window_slides_and_a_winner_waits_for_a_place_within_its_timeout() {
    // 5 per 10 s, one slot a second for 22 s, 3 s timeout: 5 go out at once, the next waits
    // until a place frees (within its 3 s) or is skipped, and so on for each window.
    let cluster = common::RedisCluster::start(3);
    let robot = StampingRobot::start();
    let dir = tempfile::tempdir().unwrap();
    let watch = BudgetWatch::start(cluster.urls(), budget_key("short", &robot.webhook()));
    let replicas = fleet(&cluster, dir.path(), "short", &robot, "5/10s");
    let first = common::wait_until(Duration::from_secs(15), || {
        robot.arrivals().first().map(|(t, _)| *t)
    })
    .expect("nothing was sent");
    let _ = common::wait_until(Duration::from_secs(40), || {
        (first.elapsed() >= Duration::from_secs(22)).then_some(())
    });
    // While the fleet runs: one budget key per node, named by the webhook's hash.
    for node in cluster.iter() {
        let keys = common::redis_keys(&node.url(), "short:*rate*");
        assert_eq!(keys, [budget_key("short", &robot.webhook())]);
        assert!(!keys[0].contains("BUDGETKEY"));
    }
    let lines = stop(&replicas);
    let admissions = watch.admissions();
    let arrivals = robot.arrivals();
    let times: Vec<Instant> = arrivals.iter().map(|(t, _)| *t).collect();

    // The window as the budget keeps it: on each node, its own clock, the full 10 s.
    for (node, admitted) in admissions.iter().enumerate() {
        let most = most_in_any_window_ms(admitted, 10_000);
        assert!(
            most <= 5,
            "node {node}: {most} admissions within 10 s: {admitted:?}"
        );
    }
    // The admissions seen are the sends: every node that counted saw most of them.
    assert!(
        admissions.iter().all(|a| a.len() + 1 >= arrivals.len()),
        "admissions per node {:?}, sends {}",
        admissions.iter().map(Vec::len).collect::<Vec<_>>(),
        arrivals.len()
    );
    // At the robot: a request arrives a few ms after its admission, so the receiver's view of
    // the same bound gets that slack (9.5 s, not 10 s).
    let most = most_in_any_window(&times, Duration::from_millis(9_500));
    assert!(
        most <= 5,
        "{most} sends within 9.5 s at the robot; arrivals: {times:?}"
    );
    // Sends went on after the first window: places freed as the window slid.
    let span = times.last().unwrap().duration_since(times[0]);
    assert!(
        arrivals.len() > 5 && span >= Duration::from_secs(10),
        "{} sends over {span:?}: the window did not slide",
        arrivals.len()
    );
    let (_, _, skipped) = check_every_slot_sent_or_skipped(&lines, &arrivals);
    assert!(skipped > 0, "no slot was skipped for the budget");
    assert_eq!(skip_lines(&lines), skipped);
    // Some winners waited for a place and then sent; the first window's five did not wait.
    let waits = wait_lines(&lines);
    assert!(
        waits > 0 && waits <= arrivals.len() - 5,
        "{waits} winners waited for a place, of {} sends",
        arrivals.len()
    );
}

#[test]
fn each_robot_has_its_documented_default_rate() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "type = \"wecom\"\nwebhook = \"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K\"\nmsgtype = \"text\"\ncontent = \"x\"",
            Some("20/min"),
        ),
        (
            "type = \"dingtalk\"\nwebhook = \"https://oapi.dingtalk.com/robot/send?access_token=T\"\nmsgtype = \"text\"\ncontent = \"x\"",
            Some("20/min"),
        ),
        (
            "type = \"feishu\"\nwebhook = \"https://open.feishu.cn/open-apis/bot/v2/hook/H\"\nmsg_type = \"text\"\ntext = \"x\"",
            Some("100/min"),
        ),
        (
            "type = \"slack\"\nwebhook = \"https://hooks.slack.com/services/T/B/X\"\ntext = \"x\"",
            Some("1/s"),
        ),
        ("type = \"http\"\nurl = \"https://example.com/hook\"", None),
        (
            "type = \"http\"\nurl = \"https://example.com/hook\"\nrate = \"5/10s\"",
            Some("5/10s"),
        ),
        (
            "type = \"wecom\"\nwebhook = \"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K\"\nmsgtype = \"text\"\ncontent = \"x\"\nrate = \"100/10m\"",
            Some("100/10m"),
        ),
    ];
    for (action, expected) in cases {
        let text =
            format!("[[job]]\nname = \"j\"\nschedule = \"* * * * *\"\n[job.action]\n{action}\n");
        let config = config::parse(
            &dir.path().join("jobs.toml"),
            &text,
            &HashMap::<String, String>::new(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let budget = match &config.jobs[0].action {
            Action::Wecom(a) => Some(&a.budget),
            Action::DingTalk(a) => Some(&a.budget),
            Action::Feishu(a) => Some(&a.budget),
            Action::Slack(a) => Some(&a.budget),
            Action::Http(a) => a.budget.as_ref(),
            other => panic!("{other:?}"),
        };
        let expected: Option<Rate> = expected.map(|r| r.parse().unwrap());
        assert_eq!(budget.map(|b| b.rate), expected, "{action}");
        if let Some(budget) = budget {
            let webhook = action
                .lines()
                .find_map(|l| {
                    l.split_once(" = ")
                        .filter(|(k, _)| *k == "webhook" || *k == "url")
                })
                .map(|(_, v)| v.trim_matches('"'))
                .unwrap();
            assert_eq!(
                format!("p:rate:{}", budget.id),
                budget_key("p", webhook),
                "{action}"
            );
        }
    }

    let text = "[[job]]\nname = \"j\"\nschedule = \"* * * * *\"\n[job.action]\ntype = \"slack\"\nwebhook = \"https://hooks.slack.com/x\"\ntext = \"x\"\nrate = \"fast\"\n";
    let errors = config::parse(
        &dir.path().join("jobs.toml"),
        text,
        &HashMap::<String, String>::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        errors.contains("job \"j\"") && errors.contains("action.rate") && errors.contains("fast"),
        "{errors}"
    );
}
