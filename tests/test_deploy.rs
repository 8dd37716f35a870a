//! The deploy files (deploy/): parsed without a Docker engine or a cluster, and checked against
//! each other and against slotcron's own config loader: names, ports, paths and timeouts agree.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_yaml_ng::Value;
use slotcron::action::Action;
use slotcron::config::Config;

const BIN: &str = env!("CARGO_BIN_EXE_slotcron");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A YAML file with docker-compose's `<<: *anchor` merge keys applied.
fn yaml(path: &str) -> Value {
    let mut value: Value =
        serde_yaml_ng::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    value
        .apply_merge()
        .unwrap_or_else(|e| panic!("{path}: merge keys: {e}"));
    value
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {v:?}"))
}

fn longest_timeout(config: &Config) -> Duration {
    config
        .jobs
        .iter()
        .map(|j| j.timeout)
        .max()
        .expect("at least one job")
}

fn http_url(config: &Config) -> url::Url {
    let job = config
        .jobs
        .iter()
        .find(|j| matches!(j.action, Action::Http(_)))
        .expect("an http job");
    match &job.action {
        Action::Http(a) => a.url.expose().clone(),
        _ => unreachable!(),
    }
}

// ---------------------------------------------------------------------------
// Dockerfile
// ---------------------------------------------------------------------------

/// One Dockerfile instruction, continuation lines joined.
#[derive(Debug)]
struct Instruction {
    name: String,
    args: String,
}

fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (name, args) = current.split_once(' ').unwrap_or((&current, ""));
                out.push(Instruction {
                    name: name.to_ascii_uppercase(),
                    args: args.trim().to_string(),
                });
                current.clear();
            }
        }
    }
    out
}

/// Instructions grouped by build stage (each starts with its FROM).
fn stages(text: &str) -> Vec<Vec<Instruction>> {
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for i in instructions(text) {
        if i.name == "FROM" {
            stages.push(Vec::new());
        }
        stages.last_mut().expect("FROM comes first").push(i);
    }
    stages
}

/// An exec-form argument list (`["a", "b"]`).
fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("{args:?} is not exec form: {e}"))
}

/// `COPY [--flags] SRC... DEST` → (flags, sources, destination).
fn copy_parts(args: &str) -> (Vec<&str>, Vec<&str>, &str) {
    let words: Vec<&str> = args.split_whitespace().collect();
    let (flags, paths): (Vec<&str>, Vec<&str>) = words.iter().partition(|w| w.starts_with("--"));
    let (dest, sources) = paths.split_last().expect("COPY has a destination");
    (flags, sources.to_vec(), dest)
}

fn env_value(stage: &[Instruction], key: &str) -> Option<String> {
    stage
        .iter()
        .filter(|i| i.name == "ENV")
        .flat_map(|i| {
            i.args
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_owned))
}

/// Target paths Cargo.toml declares explicitly or by name ([[bench]] name = "x" → benches/x.rs):
/// Cargo refuses a manifest whose declared target file is missing, so the image must copy them.
fn declared_target_paths() -> Vec<String> {
    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
    let mut paths = Vec::new();
    for (table, dir) in [
        ("bench", "benches"),
        ("test", "tests"),
        ("example", "examples"),
        ("bin", "src/bin"),
    ] {
        for target in manifest
            .get(table)
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            let path = match (target.get("path"), target.get("name")) {
                (Some(p), _) => p.as_str().unwrap().to_owned(),
                (None, Some(n)) => format!("{dir}/{}.rs", n.as_str().unwrap()),
                (None, None) => continue,
            };
            paths.push(path);
        }
    }
    paths
}

#[test]
fn dockerfile_is_multi_stage_non_root_with_entrypoint_and_healthcheck() {
    let text = read("deploy/Dockerfile");
    let stages = stages(&text);
    assert!(
        stages.len() >= 2,
        "multi-stage build: {} FROM",
        stages.len()
    );
    let build = &stages[0];
    let runtime = stages.last().unwrap();
    let build_name = build[0].args.split_whitespace().last().unwrap();
    assert!(
        build[0].args.to_ascii_lowercase().contains(" as "),
        "the build stage is named"
    );

    // The build stage copies what `cargo build --locked` needs, from the repository root.
    let mut copied = Vec::new();
    for i in build.iter().filter(|i| i.name == "COPY") {
        let (flags, sources, _) = copy_parts(&i.args);
        assert!(
            flags.is_empty(),
            "build stage copies from the context: {}",
            i.args
        );
        for s in sources {
            assert!(
                repo().join(s).exists(),
                "COPY {s}: no such path in the repository"
            );
            copied.push(s.trim_end_matches('/').to_owned());
        }
    }
    let covers = |path: &str| {
        copied
            .iter()
            .any(|c| c == "." || path == c || path.starts_with(&format!("{c}/")))
    };
    for needed in ["Cargo.toml", "Cargo.lock", "src/main.rs"] {
        assert!(covers(needed), "the build stage does not copy {needed}");
    }
    for target in declared_target_paths() {
        assert!(
            covers(&target),
            "Cargo.toml declares {target}, which the build stage does not copy"
        );
    }
    let cargo = build
        .iter()
        .find(|i| i.name == "RUN" && i.args.contains("cargo build"))
        .expect("cargo build");
    assert!(
        cargo.args.contains("--release") && cargo.args.contains("--locked"),
        "{}",
        cargo.args
    );

    // The runtime stage: the binary from the build stage, a non-root numeric user.
    let binary = runtime
        .iter()
        .find(|i| i.name == "COPY" && i.args.contains(&format!("--from={build_name}")))
        .expect("the runtime copies the binary from the build stage");
    assert!(
        binary.args.contains("target/release/slotcron"),
        "{}",
        binary.args
    );
    for i in runtime
        .iter()
        .filter(|i| i.name == "COPY" && !i.args.contains("--from"))
    {
        for s in copy_parts(&i.args).1 {
            assert!(
                repo().join(s).exists(),
                "COPY {s}: no such path in the repository"
            );
        }
    }
    let user = runtime
        .iter()
        .rev()
        .find(|i| i.name == "USER")
        .expect("a USER")
        .args
        .clone();
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric USER (runAsNonRoot checks it)");
    assert_ne!(uid, 0, "not root");

    let entrypoint = runtime
        .iter()
        .rev()
        .find(|i| i.name == "ENTRYPOINT")
        .expect("an ENTRYPOINT");
    assert_eq!(exec_form(&entrypoint.args), ["slotcron", "run"]);

    // HEALTHCHECK runs a real slotcron command; run it here on the config the image ships.
    let health = runtime
        .iter()
        .rev()
        .find(|i| i.name == "HEALTHCHECK")
        .expect("a HEALTHCHECK");
    let cmd_at = health.args.find("CMD ").expect("HEALTHCHECK CMD") + 4;
    let argv = exec_form(&health.args[cmd_at..]);
    assert_eq!(argv[0], "slotcron");
    let config_in_image = env_value(runtime, "SLOTCRON_CONFIG").expect("ENV SLOTCRON_CONFIG");
    let shipped = runtime
        .iter()
        .filter(|i| i.name == "COPY" && !i.args.contains("--from"))
        .find_map(|i| {
            let (_, sources, dest) = copy_parts(&i.args);
            (dest == config_in_image).then(|| sources[0].to_owned())
        })
        .expect("the image ships the file SLOTCRON_CONFIG names");
    let out = Command::new(BIN)
        .args(&argv[1..])
        .env("SLOTCRON_CONFIG", repo().join(&shipped))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the HEALTHCHECK command fails on {shipped}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------
// docker-compose
// ---------------------------------------------------------------------------

#[test]
fn compose_has_three_redis_nodes_five_replicas_and_agrees_with_its_jobs_file() {
    let compose = yaml("deploy/docker-compose.yml");
    let services = compose["services"].as_mapping().expect("services");
    let named = |pred: &dyn Fn(&Value) -> bool| -> Vec<String> {
        services
            .iter()
            .filter(|(_, s)| pred(s))
            .map(|(k, _)| str_of(k, "service name").to_owned())
            .collect()
    };
    let redis = named(&|s| s["image"].as_str().is_some_and(|i| i.starts_with("redis")));
    let replicas = named(&|s| s["build"]["dockerfile"].as_str() == Some("deploy/Dockerfile"));
    assert_eq!(redis.len(), 3, "three independent Redis nodes: {redis:?}");
    assert_eq!(replicas.len(), 5, "five replicas: {replicas:?}");

    let dockerfile_config = env_value(
        stages(&read("deploy/Dockerfile")).last().unwrap(),
        "SLOTCRON_CONFIG",
    )
    .unwrap();
    let mut hostnames = BTreeSet::new();
    for name in &replicas {
        let s = &compose["services"][name.as_str()];
        assert_eq!(
            repo()
                .join("deploy")
                .join(str_of(&s["build"]["context"], "build.context"))
                .canonicalize()
                .unwrap(),
            repo().canonicalize().unwrap(),
            "{name} builds from the repository root"
        );
        let mounts: Vec<&str> = s["volumes"]
            .as_sequence()
            .expect("volumes")
            .iter()
            .map(|v| str_of(v, "volume"))
            .collect();
        let mount = mounts
            .iter()
            .find(|m| m.starts_with("./jobs.compose.toml:"))
            .unwrap_or_else(|| panic!("{name} does not mount jobs.compose.toml: {mounts:?}"));
        let target = mount.split(':').nth(1).unwrap();
        assert_eq!(
            target, dockerfile_config,
            "{name} mounts the file where SLOTCRON_CONFIG points"
        );
        // The hostname is the replica id: five distinct ones, so the logs tell the winner apart.
        hostnames.insert(str_of(&s["hostname"], "hostname").to_owned());
        let depends: BTreeSet<&str> = s["depends_on"]
            .as_sequence()
            .expect("depends_on")
            .iter()
            .map(|d| str_of(d, "depends_on"))
            .collect();
        for r in &redis {
            assert!(
                depends.contains(r.as_str()),
                "{name} does not depend on {r}"
            );
        }
    }
    assert_eq!(hostnames.len(), 5, "{hostnames:?}");

    // The jobs file the replicas mount: its nodes are the Redis services, its URL the receiver.
    let path = repo().join("deploy/jobs.compose.toml");
    let config = slotcron::config::load_with(&path, &HashMap::<String, String>::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let redis_cfg = config.redis.as_ref().expect("[redis]");
    let hosts: BTreeSet<String> = redis_cfg
        .nodes
        .iter()
        .map(|n| n.expose().host_str().unwrap().to_owned())
        .collect();
    assert_eq!(hosts, redis.iter().cloned().collect::<BTreeSet<_>>());
    for node in &redis_cfg.nodes {
        assert_eq!(
            node.expose().port().unwrap_or(6379),
            6379,
            "redis-server's default port"
        );
    }
    for r in &redis {
        let command = format!("{:?}", compose["services"][r.as_str()]["command"]);
        assert!(!command.contains("--port"), "{r} listens on 6379");
    }
    let url = http_url(&config);
    let receiver = url.host_str().unwrap();
    let receiver_service = &compose["services"][receiver];
    assert!(
        receiver_service.is_mapping(),
        "the http URL's host {receiver} is not a compose service"
    );
    assert_eq!(
        receiver_service["environment"]["HTTP_PORT"]
            .as_str()
            .map(|p| p.parse::<u16>().unwrap()),
        url.port(),
        "the receiver listens on the URL's port"
    );
    for name in &replicas {
        let depends = format!("{:?}", compose["services"][name.as_str()]["depends_on"]);
        assert!(
            depends.contains(receiver),
            "{name} does not depend on {receiver}"
        );
        let grace = str_of(
            &compose["services"][name.as_str()]["stop_grace_period"],
            "stop_grace_period",
        );
        let grace = humantime::parse_duration(grace).unwrap();
        assert!(
            grace > longest_timeout(&config),
            "{name}: stop_grace_period {grace:?} under the longest job timeout"
        );
    }
}

// ---------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------

fn by_kind(path: &str, kind: &str) -> Value {
    let doc = yaml(path);
    assert_eq!(doc["kind"].as_str(), Some(kind), "{path}");
    doc
}

/// A probe's port: a number, or the name of one of the container's ports.
fn probe_port(container: &Value, probe: &str) -> u64 {
    let get = &container[probe]["httpGet"];
    assert!(get.is_mapping(), "{probe} is an httpGet probe");
    match &get["port"] {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(name) => container["ports"]
            .as_sequence()
            .expect("ports")
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("{probe}: no container port named {name}")),
        other => panic!("{probe}: port {other:?}"),
    }
}

#[test]
fn kubernetes_manifests_agree_with_the_configmap_and_the_image() {
    let deployment = by_kind("deploy/kubernetes/deployment.yaml", "Deployment");
    let configmap = by_kind("deploy/kubernetes/configmap.yaml", "ConfigMap");
    let secret = by_kind("deploy/kubernetes/secret.yaml", "Secret");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"].as_u64(), Some(5));
    assert_eq!(
        spec["selector"]["matchLabels"],
        spec["template"]["metadata"]["labels"]
    );
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];

    // The Secret provides every variable the ConfigMap's jobs.toml uses.
    let secret_env: HashMap<String, String> = secret["stringData"]
        .as_mapping()
        .expect("stringData")
        .iter()
        .map(|(k, v)| (str_of(k, "key").to_owned(), str_of(v, "value").to_owned()))
        .collect();
    assert!(secret_env.contains_key("WECOM_WEBHOOK"));
    let env_from = container["envFrom"].as_sequence().expect("envFrom");
    assert!(
        env_from
            .iter()
            .any(|e| e["secretRef"]["name"] == secret["metadata"]["name"]),
        "the container takes its environment from the Secret"
    );

    // The ConfigMap's jobs.toml is valid with the Secret's variables, and needs them.
    let (file, text) = configmap["data"]
        .as_mapping()
        .expect("data")
        .iter()
        .next()
        .unwrap();
    let (file, text) = (str_of(file, "data key"), str_of(text, "jobs.toml"));
    let path = Path::new("configmap").join(file);
    let config =
        slotcron::config::parse(&path, text, &secret_env).unwrap_or_else(|e| panic!("{e}"));
    let without = slotcron::config::parse(&path, text, &HashMap::<String, String>::new());
    assert!(without.is_err(), "the jobs use the Secret's variables");
    let nodes = config.redis.as_ref().expect("[redis]").nodes.len();
    assert!(
        nodes >= 3 && nodes % 2 == 1,
        "an odd number of independent nodes: {nodes}"
    );

    // The container reads that file where the ConfigMap is mounted.
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| str_of(a, "arg"))
        .collect();
    let config_arg = args
        .iter()
        .position(|a| *a == "--config")
        .map(|i| args[i + 1])
        .expect("--config");
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == configmap["metadata"]["name"])
        .expect("a volume of the ConfigMap");
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap volume is mounted");
    assert_eq!(
        Path::new(config_arg),
        Path::new(str_of(&mount["mountPath"], "mountPath")).join(file),
        "--config names the mounted jobs.toml"
    );

    // Probes on the [http] port, which listens beyond loopback so the kubelet reaches it.
    let listen = config.http.expect("[http] listen in the ConfigMap").listen;
    assert!(
        listen.ip().is_unspecified(),
        "{listen} is unreachable for the kubelet"
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(
            probe_port(container, probe),
            u64::from(listen.port()),
            "{probe} port"
        );
    }

    // Room for the longest job to finish after SIGTERM.
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        Duration::from_secs(grace) > longest_timeout(&config),
        "terminationGracePeriodSeconds {grace} is not above the longest job timeout {:?}",
        longest_timeout(&config)
    );

    // The pod runs as the image's non-root user.
    let dockerfile = read("deploy/Dockerfile");
    let user = instructions(&dockerfile)
        .into_iter()
        .rev()
        .find(|i| i.name == "USER")
        .unwrap()
        .args;
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(
        pod["securityContext"]["runAsUser"]
            .as_u64()
            .map(|u| u.to_string()),
        Some(user)
    );
}
