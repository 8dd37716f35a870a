//! Security: Redis AUTH (password and ACL user in the URL) and TLS (`rediss://` with a CA file)
//! against real redis-server processes, and no secret in any log line or `check` output.

use crate::common;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::fleet::{FleetToml, wecom_action};
use common::{Receiver, RedisCluster, Replica, free_port, wait_until, write_config};

const PASSWORD: &str = "s3cret-redis-pw";
const ACL_PASSWORD: &str = "alice-acl-pw-42";
const WEBHOOK_KEY: &str = "WEBHOOKKEY-0123456789abcdef";

/// The config of one replica racing on `nodes` (slotcron's default prefix, no `[scheduler]`
/// lines), `[redis]` lines `redis` beside them: job `secure` every second sends a WeCom text
/// whose webhook key comes from `WECOM_KEY`.
fn config(nodes: &[String], receiver: &str, redis: &str) -> String {
    FleetToml {
        job: "secure",
        timeout: "3s",
        scheduler: "",
        redis,
        action: &wecom_action(receiver, "${WECOM_KEY}", "{{ slot }}"),
        ..FleetToml::new(nodes, receiver, "slotcron")
    }
    .render()
}

/// Runs one replica for ~3 s with `config`, returns all its output lines.
fn run_replica(config: &Path) -> Vec<String> {
    let replica = Replica::run(config, "secure-1", &[("WECOM_KEY", WEBHOOK_KEY)]);
    let done = replica.wait_for_json(Duration::from_secs(10), |l| l["outcome"] == "done");
    assert!(done.is_some(), "no slot ran: {:?}", replica.lines());
    replica.terminate();
    assert!(
        replica
            .wait_timeout(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    replica.lines()
}

fn check_output(config: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(["check", "--config", config.to_str().unwrap()])
        .env("WECOM_KEY", WEBHOOK_KEY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_no_secret(text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !text.contains(secret),
            "secret {secret:?} leaked in:\n{text}"
        );
    }
}

#[test]
fn redis_auth_with_password_and_acl_user_and_no_secret_in_any_line() {
    let cluster = RedisCluster::start_with(3, &["--requirepass", PASSWORD]);
    let acl_password = format!(">{ACL_PASSWORD}");
    common::redis_cmd(
        &cluster[1].auth_url(),
        &[
            "ACL",
            "SETUSER",
            "alice",
            "on",
            &acl_password,
            "~*",
            "&*",
            "+@all",
        ],
    )
    .unwrap();
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let nodes = [
        format!("redis://:{PASSWORD}@127.0.0.1:{}", cluster[0].port()),
        format!(
            "redis://alice:{ACL_PASSWORD}@127.0.0.1:{}",
            cluster[1].port()
        ),
        format!("redis://default:{PASSWORD}@127.0.0.1:{}", cluster[2].port()),
    ];
    let text = config(&nodes, &receiver.uri(), "");
    let path = write_config(dir.path(), &text);
    let lines = run_replica(&path);
    assert!(lines.iter().any(|l| l.contains("\"outcome\":\"won\"")));
    // Every node took part: the slot key is there under each password.
    let keys: usize = (0..3)
        .map(|i| common::redis_keys(&cluster[i].auth_url(), "slotcron:secure:*").len())
        .sum();
    assert!(
        keys >= 3,
        "the slot keys are not on the authenticated nodes"
    );
    assert_no_secret(&lines.join("\n"), &[PASSWORD, ACL_PASSWORD, WEBHOOK_KEY]);
    assert_no_secret(&check_output(&path), &[PASSWORD, ACL_PASSWORD, WEBHOOK_KEY]);
}

#[test]
fn a_wrong_redis_password_is_reported_without_the_password() {
    let cluster = RedisCluster::start_with(1, &["--requirepass", PASSWORD]);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let wrong = "not-the-password-999";
    let node = format!("redis://:{wrong}@127.0.0.1:{}", cluster[0].port());
    let text = config(&[node], &receiver.uri(), "");
    let path = write_config(dir.path(), &text);
    let replica = Replica::spawn(
        env!("CARGO_BIN_EXE_slotcron"),
        &[
            "run",
            "--log-format",
            "json",
            "--config",
            path.to_str().unwrap(),
        ],
        &[("WECOM_KEY", WEBHOOK_KEY)],
    );
    refused_and_raced_nothing(&replica, "AuthenticationFailed");
    replica.terminate();
    replica.wait_timeout(Duration::from_secs(10));
    assert_eq!(receiver.count(), 0);
    assert_no_secret(&replica.lines().join("\n"), &[wrong, WEBHOOK_KEY]);
}

/// A CA and a server certificate for 127.0.0.1, made with the openssl command line.
fn make_certs(dir: &Path) -> bool {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=slotcron test CA",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ])
}

struct TlsRedis {
    child: Child,
    port: u16,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_tls_redis(dir: &Path) -> TlsRedis {
    let port = free_port();
    let child = Command::new(common::redis_server_bin())
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args([
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.crt",
        ])
        .args([
            "--tls-auth-clients",
            "no",
            "--requirepass",
            PASSWORD,
            "--dir",
        ])
        .arg(dir)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = wait_until(Duration::from_secs(5), || {
        TcpStream::connect(("127.0.0.1", port)).ok().map(drop)
    });
    assert!(up.is_some(), "the TLS redis-server did not start");
    TlsRedis { child, port }
}

#[test]
fn tls_rediss_with_a_ca_file_and_password() {
    let dir = tempfile::tempdir().unwrap();
    if !make_certs(dir.path()) {
        assert!(
            !common::tools::in_ci(),
            "openssl could not make test certificates (scripts/test.sh installs openssl)"
        );
        eprintln!("SKIPPED: openssl could not make test certificates");
        return;
    }
    let servers: Vec<TlsRedis> = (0..3).map(|_| start_tls_redis(dir.path())).collect();
    let receiver = Receiver::start();
    let nodes: Vec<String> = servers
        .iter()
        .map(|s| format!("rediss://:{PASSWORD}@127.0.0.1:{}", s.port))
        .collect();
    let tls = "ca_file = \"ca.crt\"\nnode_timeout = \"200ms\"";
    let text = config(&nodes, &receiver.uri(), tls);
    let path = write_config(dir.path(), &text);
    let lines = run_replica(&path);
    assert!(
        lines.iter().any(|l| l.contains("\"outcome\":\"won\"")),
        "{lines:?}"
    );
    assert!(receiver.count() >= 1);
    assert_no_secret(&lines.join("\n"), &[PASSWORD, WEBHOOK_KEY]);

    // Without the CA file the server's certificate is not trusted: no slot runs.
    let untrusted = text.replace("ca_file = \"ca.crt\"\n", "");
    let path = write_config(dir.path(), &untrusted);
    let replica = Replica::spawn(
        env!("CARGO_BIN_EXE_slotcron"),
        &[
            "run",
            "--log-format",
            "json",
            "--config",
            path.to_str().unwrap(),
        ],
        &[("WECOM_KEY", WEBHOOK_KEY)],
    );
    refused_and_raced_nothing(&replica, "UnknownIssuer");
    replica.terminate();
    replica.wait_timeout(Duration::from_secs(10));
}

/// The replica reports the node's refusal (`error` naming `cause`) and, having no node that
/// answers `TIME`, says it races nothing: a replica never races on a clock it has not measured
/// (the book's fleet clock chapter), so no slot line follows, and nothing is sent.
fn refused_and_raced_nothing(replica: &Replica, cause: &str) {
    let refused = replica.wait_for_json(Duration::from_secs(10), |l| {
        l["state"] == "suspect" && l["error"].as_str().is_some_and(|e| e.contains(cause))
    });
    assert!(
        refused.is_some(),
        "no {cause} reported: {:?}",
        replica.lines()
    );
    let waiting = replica.wait_for_json(Duration::from_secs(10), |l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("fleet clock not measured"))
    });
    assert!(waiting.is_some(), "{:?}", replica.lines());
    // Two slots' time: still nothing raced.
    const TWO_SLOTS: Duration = Duration::from_secs(2);
    std::thread::sleep(TWO_SLOTS);
    let raced = replica
        .json_lines()
        .iter()
        .any(|l| l["outcome"] == "won" || l["outcome"] == "unavailable");
    assert!(
        !raced,
        "raced without a measured clock: {:?}",
        replica.lines()
    );
}
