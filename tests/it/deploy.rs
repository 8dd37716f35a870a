//! The deploy files (deploy/): parsed without a Docker engine or a cluster, and checked against
//! each other and against slotcron's own config loader: names, ports, paths and timeouts agree.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common;

use common::tools::tool;
use serde_yaml_ng::Value;
use slotcron::unstable::action::Action;
use slotcron::unstable::config::Config;

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
    env_pairs(stage)
        .into_iter()
        .find_map(|(k, v)| (k == key).then_some(v))
}

/// Target paths Cargo.toml declares explicitly or by name ([[bench]] name = "x" → benches/x.rs):
/// Cargo refuses a manifest whose declared target file is missing, so the image must copy them.
fn declared_target_paths(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let manifest: toml::Table = manifest.parse().unwrap();
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
    for target in declared_target_paths(&repo()) {
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
    // tini as PID 1: signals reach slotcron, and a `command` job's orphans are reaped.
    assert_eq!(
        exec_form(&entrypoint.args),
        ["tini", "--", "slotcron", "run"]
    );
    let install = runtime
        .iter()
        .find(|i| i.name == "RUN" && i.args.contains("apt-get install"))
        .expect("the runtime installs its packages");
    assert!(install.args.contains(" tini"), "{}", install.args);
    let exposed = runtime.iter().find(|i| i.name == "EXPOSE").expect("EXPOSE");
    assert_eq!(exposed.args, "9090");
    for label in ["title", "description", "version", "licenses"] {
        let key = format!("org.opencontainers.image.{label}=");
        assert!(
            runtime
                .iter()
                .any(|i| i.name == "LABEL" && i.args.contains(&key)),
            "OCI label {label}"
        );
    }
    // Base images pinned to a version, never a floating tag.
    for stage in &stages {
        let image = stage[0].args.split_whitespace().next().unwrap();
        let tag = image.split_once(':').map_or("", |(_, t)| t);
        assert!(
            tag.chars().next().is_some_and(|c| c.is_ascii_digit()) && tag.contains('.'),
            "{image}: pin a version"
        );
    }

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

/// The jobs file of the compose demo, in the directory the replicas mount.
const COMPOSE_JOBS: &str = "deploy/compose/jobs.toml";

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
    let mut published = BTreeSet::new();
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
        // The directory holding the file SLOTCRON_CONFIG names, never the file alone: an
        // editor's save (a new file renamed over the old) never reaches a file bind mount.
        let (config_dir, config_file) = dockerfile_config.rsplit_once('/').unwrap();
        let mount = mounts
            .iter()
            .find(|m| m.split(':').nth(1) == Some(config_dir))
            .unwrap_or_else(|| panic!("{name} does not mount {config_dir}: {mounts:?}"));
        let source = repo().join("deploy").join(mount.split(':').next().unwrap());
        assert!(
            source.is_dir() && source.join(config_file).is_file(),
            "{name} mounts {mount}: a directory holding {config_file}"
        );
        assert!(
            !mounts
                .iter()
                .any(|m| m.split(':').nth(1) == Some(&*dockerfile_config)),
            "{name} mounts the file {dockerfile_config} alone: {mounts:?}"
        );
        // The hostname is the replica id: five distinct ones, so the logs tell the winner apart.
        hostnames.insert(str_of(&s["hostname"], "hostname").to_owned());
        // Started only once every Redis node is healthy (its own healthcheck answers).
        let depends = s["depends_on"]
            .as_mapping()
            .expect("depends_on as a mapping");
        for r in &redis {
            let condition = &depends
                .get(r.as_str())
                .unwrap_or_else(|| panic!("{name} does not depend on {r}"))["condition"];
            assert_eq!(condition.as_str(), Some("service_healthy"), "{name} on {r}");
            let check = &compose["services"][r.as_str()]["healthcheck"]["test"];
            assert!(format!("{check:?}").contains("ping"), "{r}: {check:?}");
        }
        // The [http] port is published, on loopback: status page and metrics from the host.
        let ports: Vec<&str> = s["ports"]
            .as_sequence()
            .expect("ports")
            .iter()
            .map(|p| str_of(p, "port"))
            .collect();
        assert!(
            ports.len() == 1 && ports[0].starts_with("127.0.0.1:") && ports[0].ends_with(":9090"),
            "{name}: {ports:?}"
        );
        published.insert(ports[0].to_owned());
    }
    assert_eq!(hostnames.len(), 5, "{hostnames:?}");
    assert_eq!(published.len(), 5, "{published:?}");

    // The jobs file the replicas mount: its nodes are the Redis services, its URL the receiver.
    let path = repo().join(COMPOSE_JOBS);
    let config = slotcron::unstable::config::load_with(&path, &HashMap::<String, String>::new())
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
    assert_eq!(
        config
            .http
            .as_ref()
            .map(|h| h.listen.to_string())
            .as_deref(),
        Some("0.0.0.0:9090"),
        "the demo serves its status page and metrics on the published port"
    );
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
// Kubernetes: `kubectl kustomize deploy/kubernetes`, checked by the ecosystem's tools and
// against slotcron's own config loader.
// ---------------------------------------------------------------------------

/// The manifests as `kubectl apply -k deploy/kubernetes` would send them (`None`: no kubectl,
/// outside CI).
fn kustomized() -> Option<String> {
    kustomize("deploy/kubernetes")
}

/// `kubectl kustomize dir` (`None`: no kubectl, outside CI).
fn kustomize(dir: &str) -> Option<String> {
    let kubectl = tool("kubectl")?;
    let out = Command::new(kubectl)
        .args(["kustomize", dir])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

fn documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    of_kind(docs, kind)
        .into_iter()
        .find(|d| d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// A rendered copy in a temp dir, for the tools that read files.
fn rendered_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kustomized.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn kustomized_manifests_pass_kubernetes_validate_strict() {
    let Some(text) = kustomized() else { return };
    let Some(validate) = tool("kubernetes-validate") else {
        return;
    };
    let (_dir, path) = rendered_file(&text);
    let out = Command::new(validate)
        .arg("--strict")
        .arg(&path)
        .output()
        .unwrap();
    let report = output_text(&out);
    assert!(
        out.status.success(),
        "kubernetes-validate --strict:\n{report}"
    );
    let passed = report.matches(" passed for resource ").count();
    assert_eq!(passed, documents(&text).len(), "{report}");
}

#[test]
fn checkov_fails_no_check_and_every_skip_is_explained_in_deploy_readme() {
    let Some(text) = kustomized() else { return };
    let Some(checkov) = tool("checkov") else {
        return;
    };
    let (dir, path) = rendered_file(&text);
    let out = Command::new(checkov)
        .args(["--framework", "kubernetes", "--compact", "--quiet", "-f"])
        .arg(&path)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let report = output_text(&out);
    assert!(out.status.success(), "checkov:\n{report}");
    assert!(report.contains("Failed checks: 0"), "{report}");
    let readme = read("deploy/README.md");
    for doc in documents(&text) {
        let Some(annotations) = doc["metadata"]["annotations"].as_mapping() else {
            continue;
        };
        for (key, value) in annotations {
            if !str_of(key, "annotation").starts_with("checkov.io/skip") {
                continue;
            }
            let id = str_of(value, "skip").split('=').next().unwrap();
            assert!(
                readme.contains(id),
                "{id} is skipped but deploy/README.md does not say why"
            );
        }
    }
}

/// jobs.toml of the ConfigMap, parsed by slotcron as a fresh `kubectl apply -k` starts it: with
/// the slotcron container's environment and none of the operator's Secret files.
fn configmap_config(docs: &[Value]) -> (Config, String) {
    let text = configmap_jobs(docs);
    let env = container_env(docs, slotcron_container(docs));
    let config = slotcron::unstable::config::parse(Path::new("jobs.toml"), &text, &env)
        .unwrap_or_else(|e| panic!("the ConfigMap's jobs.toml, no Secret created: {e}"));
    (config, text)
}

fn configmap_jobs(docs: &[Value]) -> String {
    let configmap = named(docs, "ConfigMap", "slotcron-jobs");
    str_of(&configmap["data"]["jobs.toml"], "jobs.toml").to_owned()
}

fn slotcron_container(docs: &[Value]) -> &Value {
    &named(docs, "Deployment", "slotcron")["spec"]["template"]["spec"]["containers"][0]
}

/// `key` of a Secret the manifests render (`None`: they do not create it).
fn rendered_secret(docs: &[Value], name: &str, key: &str) -> Option<String> {
    use base64::Engine;
    let secret = of_kind(docs, "Secret")
        .into_iter()
        .find(|s| s["metadata"]["name"].as_str() == Some(name))?;
    // kustomize wraps long base64 over lines.
    let data: String = str_of(&secret["data"][key], "Secret data")
        .split_whitespace()
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    Some(String::from_utf8(bytes).unwrap())
}

/// A container's environment as the kubelet sets it: plain values, and `secretKeyRef`s read
/// from the Secrets the manifests render. A reference to any other Secret (one the operator
/// must create first) fails, unless it is optional.
fn container_env(docs: &[Value], container: &Value) -> HashMap<String, String> {
    let mut env = HashMap::new();
    for var in container["env"].as_sequence().into_iter().flatten() {
        let name = str_of(&var["name"], "env name").to_owned();
        if let Some(value) = var["value"].as_str() {
            env.insert(name, value.to_owned());
            continue;
        }
        let secret = &var["valueFrom"]["secretKeyRef"];
        if !secret.is_mapping() {
            continue;
        }
        let (secret_name, key) = (
            str_of(&secret["name"], "name"),
            str_of(&secret["key"], "key"),
        );
        match rendered_secret(docs, secret_name, key) {
            Some(value) => _ = env.insert(name, value),
            None => assert_eq!(
                secret["optional"].as_bool(),
                Some(true),
                "{name} needs the Secret {secret_name}, which the manifests do not create"
            ),
        }
    }
    env
}

fn mount_of<'a>(container: &'a Value, pod: &Value, volume: &dyn Fn(&Value) -> bool) -> &'a Value {
    let name = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| volume(v))
        .expect("the volume")["name"]
        .clone();
    container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .expect("the volume is mounted")
}

/// Pod Security "restricted": what the namespace's enforce label asks of every pod.
fn assert_restricted(what: &str, pod: &Value) {
    assert_eq!(
        pod["automountServiceAccountToken"].as_bool(),
        Some(false),
        "{what}"
    );
    assert_eq!(
        pod["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true),
        "{what}"
    );
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault"),
        "{what}"
    );
    for c in pod["containers"].as_sequence().unwrap() {
        let sc = &c["securityContext"];
        assert_eq!(
            sc["allowPrivilegeEscalation"].as_bool(),
            Some(false),
            "{what}"
        );
        assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{what}");
        assert_eq!(
            sc["capabilities"]["drop"][0].as_str(),
            Some("ALL"),
            "{what}"
        );
    }
}

#[test]
fn kustomized_fleet_has_three_redis_nodes_and_replicas_that_agree_with_the_configmap() {
    let Some(text) = kustomized() else { return };
    let docs = documents(&text);
    let namespace = &of_kind(&docs, "Namespace")[0];
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str(),
        Some("restricted")
    );
    for secret in of_kind(&docs, "Secret") {
        let name = str_of(&secret["metadata"]["name"], "name");
        assert!(
            name.starts_with("slotcron-redis-"),
            "{name}: the manifests create only the Redis password (a generated name, so never \
             the operator's webhook Secret)"
        );
    }

    let deployment = named(&docs, "Deployment", "slotcron");
    let spec = &deployment["spec"];
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(spec["replicas"].as_u64(), Some(5));
    assert_restricted("slotcron", pod);
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"].as_str(),
        Some("kubernetes.io/hostname")
    );
    let pdb = named(&docs, "PodDisruptionBudget", "slotcron");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        spec["selector"]["matchLabels"]
    );
    assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1));
    let replica_id = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "SLOTCRON_REPLICA_ID")
        .expect("SLOTCRON_REPLICA_ID");
    assert_eq!(
        replica_id["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.name")
    );
    assert!(
        container["envFrom"].is_null(),
        "no Secret as environment variables"
    );

    let (config, _) = configmap_config(&docs);

    // --config names jobs.toml in the ConfigMap's directory mount (no subPath: it must change).
    let config_mount = mount_of(container, pod, &|v| {
        v["configMap"]["name"] == "slotcron-jobs"
    });
    assert!(
        config_mount["subPath"].is_null(),
        "a subPath mount never sees ConfigMap updates"
    );
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| str_of(a, "arg"))
        .collect();
    assert_eq!(
        args,
        [
            "--config",
            &format!(
                "{}/jobs.toml",
                str_of(&config_mount["mountPath"], "mountPath")
            )
        ]
    );

    // Three independent Redis nodes: a StatefulSet and a Service each, AOF fsync always.
    let nodes: BTreeSet<String> = config
        .redis
        .as_ref()
        .expect("[redis]")
        .nodes
        .iter()
        .map(|n| {
            assert_eq!(n.expose().port().unwrap_or(6379), 6379);
            n.expose().host_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(nodes.len(), 3);
    for node in &nodes {
        let service = named(&docs, "Service", node);
        let set = named(&docs, "StatefulSet", node);
        assert_eq!(set["spec"]["replicas"].as_u64(), Some(1), "{node}");
        assert_eq!(
            &service["spec"]["selector"], &set["spec"]["selector"]["matchLabels"],
            "{node}: its own Service"
        );
        let redis_pod = &set["spec"]["template"]["spec"];
        assert_restricted(node, redis_pod);
        let args: Vec<&str> = redis_pod["containers"][0]["args"]
            .as_sequence()
            .expect("redis args")
            .iter()
            .map(|a| str_of(a, "arg"))
            .collect();
        for pair in [["--appendonly", "yes"], ["--appendfsync", "always"]] {
            assert!(
                args.windows(2).any(|w| w == pair),
                "{node}: {pair:?} in {args:?}"
            );
        }
        assert!(
            set["spec"]["volumeClaimTemplates"][0].is_mapping(),
            "{node}: the AOF on a volume"
        );
    }

    // Probes on the [http] port, which listens beyond loopback so the kubelet reaches it.
    let listen = config.http.expect("[http] listen").listen;
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
        "terminationGracePeriodSeconds {grace}"
    );

    // The pod runs as the image's non-root user.
    let user = instructions(&read("deploy/Dockerfile"))
        .into_iter()
        .rev()
        .find(|i| i.name == "USER")
        .unwrap()
        .args;
    assert_eq!(
        pod["securityContext"]["runAsUser"]
            .as_u64()
            .map(|u| u.to_string()),
        Some(user)
    );
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

// ---------------------------------------------------------------------------
// Linters and the image's health check
// ---------------------------------------------------------------------------

#[test]
fn hadolint_finds_nothing_in_the_dockerfile() {
    let Some(hadolint) = tool("hadolint") else {
        return;
    };
    let out = Command::new(hadolint)
        .arg("deploy/Dockerfile")
        .current_dir(repo())
        .output()
        .unwrap();
    let report = output_text(&out);
    assert!(
        out.status.success() && report.trim().is_empty(),
        "hadolint:\n{report}"
    );
}

#[test]
fn dockerignore_keeps_the_build_output_and_git_out_of_the_context() {
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/').to_owned())
        .collect();
    for needed in ["target", ".git"] {
        assert!(
            ignored.iter().any(|i| i == needed),
            "{needed} in .dockerignore: {ignored:?}"
        );
    }
    // Nothing the Dockerfile copies from the context is ignored (said here by name; the
    // build-input check would see only the ignored files missing).
    let text = read("deploy/Dockerfile");
    let copies = instructions(&text);
    let copied = copies
        .iter()
        .filter(|i| i.name == "COPY" && !i.args.contains("--from"))
        .flat_map(|i| copy_parts(&i.args).1);
    for copied in copied {
        let copied = copied.trim_end_matches('/');
        assert!(!ignored.iter().any(|i| i == copied), "{copied} is ignored");
    }
}

// ---------------------------------------------------------------------------
// The image's build stage (without compiling) and its runtime stage as uid 10001
// ---------------------------------------------------------------------------

/// The build stage's inputs: deploy/build_inputs.rs.
mod build_inputs;

/// A path of the image's filesystem, inside the temp dir that stands in for its root.
fn in_root(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// `COPY` of one context path (file or directory) to `dest`, as Docker does it: a directory's
/// contents go into `dest`; a file goes into `dest` when it names a directory (`./`, `x/`).
fn copy_into(source: &Path, dest: &Path, dest_is_dir: bool) {
    if source.is_dir() {
        std::fs::create_dir_all(dest).unwrap();
        for entry in std::fs::read_dir(source).unwrap() {
            let entry = entry.unwrap();
            copy_into(&entry.path(), &dest.join(entry.file_name()), false);
        }
        return;
    }
    let target = if dest_is_dir {
        dest.join(source.file_name().unwrap())
    } else {
        dest.to_path_buf()
    };
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(source, &target).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
}

/// `ENV` key=value pairs of a stage.
fn env_pairs(stage: &[Instruction]) -> Vec<(String, String)> {
    stage
        .iter()
        .filter(|i| i.name == "ENV")
        .flat_map(|i| {
            i.args
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// A command that runs as `uid`:`gid` with exactly `groups` as supplementary groups, as the
/// container runtime starts a process (the tests run as root, so they can drop to it).
fn as_user(program: &Path, uid: u32, gid: u32, groups: &[u32]) -> Command {
    use std::os::unix::process::CommandExt;
    let groups: Vec<libc::gid_t> = groups.to_vec();
    let mut cmd = Command::new(program);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Runs a binary this test has just written. Another test thread may fork while the copy is
/// still open for writing here; its child holds that descriptor until it execs, and an exec of
/// the copy in that window fails with ETXTBSY ("Text file busy", seen with 16 test threads).
/// The window is one fork's length, so the exec is tried again (as Go's os/exec does); any
/// other error fails at once.
fn output_of_fresh_copy(cmd: &mut Command) -> std::process::Output {
    // A fixed pause between tries, not a wait for a condition: nothing tells this thread when
    // the other thread's child has exec'd and dropped the descriptor. 50 tries of 100 ms give
    // a fork 5 s, far past its length on a loaded machine.
    const TEXT_BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(100);
    for _ in 0..50 {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(TEXT_BUSY_RETRY);
            }
            other => return other.unwrap(),
        }
    }
    cmd.output().unwrap()
}

/// Whether this process can switch users (root); outside CI a non-root run skips, saying so.
fn can_drop_privileges() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        !common::tools::in_ci(),
        "the deploy tests run as root in CI"
    );
    eprintln!("SKIPPED: not root, so the binary cannot be run as the image's user");
    false
}

/// Makes a temp dir (0700 from tempfile) traversable by the unprivileged user.
fn world_traversable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn image_user(runtime: &[Instruction]) -> u32 {
    let user = &runtime
        .iter()
        .rev()
        .find(|i| i.name == "USER")
        .unwrap()
        .args;
    user.split(':').next().unwrap().parse().unwrap()
}

/// Where the build stage leaves the binary: its WORKDIR's `target/release/<bin>`, the
/// `--release --bin` of its last `cargo build`.
fn built_binary(build: &[Instruction]) -> String {
    let workdir = build
        .iter()
        .rev()
        .find(|i| i.name == "WORKDIR")
        .expect("a WORKDIR");
    let cargo = build
        .iter()
        .rev()
        .find(|i| i.name == "RUN" && i.args.contains("cargo build"))
        .expect("a cargo build");
    let words: Vec<&str> = cargo.args.split_whitespace().collect();
    let bin = words
        .windows(2)
        .find_map(|w| (w[0] == "--bin").then_some(w[1]))
        .expect("cargo build --bin");
    assert!(words.contains(&"--release"), "{}", cargo.args);
    format!(
        "{}/target/release/{bin}",
        workdir.args.trim_end_matches('/')
    )
}

/// The runtime stage's files in a stand-in root the unprivileged user can read: its `COPY`
/// lines from the context, and for the one `--from` the build stage, this test run's build of
/// the same binary (same sources; the test profile and features change nothing `check` reads).
fn image_root(runtime: &[Instruction], build: &[Instruction]) -> tempfile::TempDir {
    let image = tempfile::tempdir().unwrap();
    world_traversable(image.path());
    for i in runtime.iter().filter(|i| i.name == "COPY") {
        let (flags, sources, dest) = copy_parts(&i.args);
        let source = match flags.iter().any(|f| f.starts_with("--from=")) {
            true => {
                assert_eq!(sources, [built_binary(build).as_str()], "{}", i.args);
                PathBuf::from(BIN)
            }
            false => repo().join(sources[0]),
        };
        copy_into(&source, &in_root(image.path(), dest), dest.ends_with('/'));
    }
    image
}

#[test]
fn the_runtime_stage_runs_check_as_uid_10001_with_the_binary_the_build_stage_builds() {
    if !can_drop_privileges() {
        return;
    }
    let text = read("deploy/Dockerfile");
    let stages = stages(&text);
    let (build, runtime) = (&stages[0], stages.last().unwrap());
    let image = image_root(runtime, build);
    let uid = image_user(runtime);
    assert_eq!(uid, 10001);
    // The image's environment, its SLOTCRON_CONFIG pointing into the stand-in root.
    let config = in_root(
        image.path(),
        &env_value(runtime, "SLOTCRON_CONFIG").unwrap(),
    );
    let mut check = as_user(
        &in_root(image.path(), "/usr/local/bin/slotcron"),
        uid,
        uid,
        &[],
    );
    check
        .arg("check")
        .env_clear()
        .envs(env_pairs(runtime))
        .env("SLOTCRON_CONFIG", &config);
    let out = output_of_fresh_copy(&mut check);
    assert!(
        out.status.success(),
        "the image's slotcron check, as uid {uid}:\n{}",
        output_text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(": ok, "),
        "{}",
        output_text(&out)
    );
}

// ---------------------------------------------------------------------------
// Secrets as the kubelet writes them, read by the container's user
// ---------------------------------------------------------------------------

/// The identity a container's process runs with: the container's securityContext over the
/// pod's; `fsGroup` joins the supplementary groups (the kubelet adds it).
#[derive(Debug)]
struct RunAs {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

fn run_as(pod: &Value, container: &Value) -> RunAs {
    let field = |key: &str| {
        container["securityContext"][key]
            .as_u64()
            .or(pod["securityContext"][key].as_u64())
            .map(|v| u32::try_from(v).unwrap())
    };
    let fs_group = pod["securityContext"]["fsGroup"].as_u64();
    let supplemental = pod["securityContext"]["supplementalGroups"].as_sequence();
    let groups = fs_group
        .into_iter()
        .chain(supplemental.into_iter().flatten().filter_map(Value::as_u64))
        .map(|g| u32::try_from(g).unwrap())
        .collect();
    RunAs {
        // The images' USER is numeric and runAsNonRoot needs runAsUser; 0 (root) otherwise.
        uid: field("runAsUser").unwrap_or(0),
        gid: field("runAsGroup").unwrap_or(0),
        groups,
    }
}

/// Owner, group and mode of a file the kubelet writes into a secret volume: owned by root; the
/// mode is the item's `mode`, else `defaultMode`, else 0644; with a pod `fsGroup` the files'
/// group becomes it and, the volume being read-only, the group gets read on top of the mode
/// (`SetVolumeOwnership` in kubernetes pkg/volume/volume_linux.go; kubernetes #57923, #81089).
#[derive(Debug, Clone, Copy)]
struct KubeletFile {
    gid: u32,
    mode: u32,
}

fn secret_files(pod: &Value, secret: &Value) -> Vec<(String, KubeletFile)> {
    let default = secret["defaultMode"].as_u64().unwrap_or(0o644);
    let fs_group = pod["securityContext"]["fsGroup"].as_u64();
    let file = |mode: u64| KubeletFile {
        gid: fs_group.map_or(0, |g| u32::try_from(g).unwrap()),
        mode: u32::try_from(mode | fs_group.map_or(0, |_| 0o440)).unwrap(),
    };
    match secret["items"].as_sequence() {
        Some(items) => items
            .iter()
            .map(|i| {
                let path = str_of(&i["path"], "items path").to_owned();
                (path, file(i["mode"].as_u64().unwrap_or(default)))
            })
            .collect(),
        // No items: one file per key of the Secret, which the manifests do not create.
        None => vec![("*".to_owned(), file(default))],
    }
}

fn can_read(who: &RunAs, file: KubeletFile) -> bool {
    let in_group = who.gid == file.gid || who.groups.contains(&file.gid);
    who.uid == 0
        || file.mode & 0o004 != 0
        // Owned by root: the owner bits count only for uid 0, handled above.
        || (in_group && file.mode & 0o040 != 0)
}

/// Every (workload, container, secret file) of the rendered manifests, with who runs it.
fn mounted_secrets(docs: &[Value]) -> Vec<(String, RunAs, String, KubeletFile)> {
    let mut out = Vec::new();
    for doc in docs {
        let pod = &doc["spec"]["template"]["spec"];
        let Some(containers) = pod["containers"].as_sequence() else {
            continue;
        };
        let volumes = pod["volumes"].as_sequence().cloned().unwrap_or_default();
        for c in containers {
            for m in c["volumeMounts"].as_sequence().into_iter().flatten() {
                let Some(v) = volumes.iter().find(|v| v["name"] == m["name"]) else {
                    continue;
                };
                if !v["secret"].is_mapping() {
                    continue;
                }
                let name = format!(
                    "{}/{}",
                    str_of(&doc["metadata"]["name"], "name"),
                    str_of(&c["name"], "name")
                );
                let mount = str_of(&m["mountPath"], "mountPath");
                for (path, file) in secret_files(pod, &v["secret"]) {
                    out.push((
                        name.clone(),
                        run_as(pod, c),
                        format!("{mount}/{path}"),
                        file,
                    ));
                }
            }
        }
    }
    out
}

/// `slotcron check` on the ConfigMap's jobs.toml, run as `who`, its webhook file made as the
/// kubelet makes `path`: owned by root, group and mode as in `file`.
fn check_as_on_a_kubelet_secret(docs: &[Value], who: &RunAs, path: &Path, file: KubeletFile) {
    let dir = tempfile::tempdir().unwrap();
    world_traversable(dir.path());
    let mount = path.parent().unwrap();
    let webhook = dir.path().join("webhook");
    std::fs::write(
        &webhook,
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
    )
    .unwrap();
    std::os::unix::fs::chown(&webhook, Some(0), Some(file.gid)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&webhook, std::fs::Permissions::from_mode(file.mode)).unwrap();
    // The jobs that read the Secret ship disabled: enabled here, as the operator will.
    let jobs = configmap_jobs(docs)
        .replace(
            &mount.display().to_string(),
            &dir.path().display().to_string(),
        )
        .replace("enabled = false", "enabled = true");
    let config = dir.path().join("jobs.toml");
    std::fs::write(&config, jobs).unwrap();
    // The image's user runs a copy in the world-traversable temp dir: the build's binary may sit
    // in a checkout that user cannot enter (a `chmod 700` home directory).
    let bin = dir.path().join("slotcron");
    std::fs::copy(BIN, &bin).unwrap();
    let mut check = as_user(&bin, who.uid, who.gid, &who.groups);
    check
        .args(["check", "--config"])
        .arg(&config)
        .envs(container_env(docs, slotcron_container(docs)));
    let out = output_of_fresh_copy(&mut check);
    assert!(
        out.status.success(),
        "slotcron as {who:?}, webhook root:{} {:04o}:\n{}",
        file.gid,
        file.mode,
        output_text(&out)
    );
}

#[test]
fn every_container_can_read_the_secret_files_the_kubelet_writes_and_slotcron_starts_on_one() {
    let Some(text) = kustomized() else { return };
    let docs = documents(&text);
    let secrets = mounted_secrets(&docs);
    assert!(!secrets.is_empty(), "the webhook Secret is mounted");
    for (container, who, path, file) in &secrets {
        assert!(
            can_read(who, *file),
            "{container} runs as {who:?} but the kubelet writes {path} as root:{} mode {:04o}",
            file.gid,
            file.mode
        );
    }
    if !can_drop_privileges() {
        return;
    }
    let (_, who, path, file) = secrets
        .iter()
        .find(|(c, ..)| c == "slotcron/slotcron")
        .expect("slotcron mounts the webhook Secret");
    check_as_on_a_kubelet_secret(&docs, who, Path::new(path), *file);
}

// ---------------------------------------------------------------------------
// Every jobs.toml under deploy/: `slotcron check` passes with its variables and files set
// ---------------------------------------------------------------------------

/// The jobs files under deploy/ (the compose demo's, the Kubernetes ConfigMap's).
fn deploy_jobs_files() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![repo().join("deploy")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                found.push(path);
            }
        }
    }
    found
}

/// The `${NAME}` variables a jobs file reads.
fn variables(text: &str) -> BTreeSet<String> {
    text.split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn every_jobs_toml_under_deploy_passes_check_with_its_variables_and_secret_files_set() {
    let files = deploy_jobs_files();
    assert!(files.len() >= 2, "{files:?}");
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(
        secrets.path().join("webhook"),
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
    )
    .unwrap();
    for path in files {
        // Files the manifests mount from the Secret are read from the temp dir instead.
        // Disabled jobs enabled too: the shipped ones must work once the operator turns them on.
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(
                "/run/secrets/slotcron",
                &secrets.path().display().to_string(),
            )
            .replace("enabled = false", "enabled = true");
        let local = secrets.path().join("jobs.toml");
        std::fs::write(&local, &text).unwrap();
        let mut check = Command::new(BIN);
        check.args(["check", "--config"]).arg(&local);
        // Hex, as the Redis password the node URLs carry must be (deploy/kubernetes/redis.env).
        for name in variables(&text) {
            check.env(name, "0123456789abcdef");
        }
        let out = check.output().unwrap();
        assert!(
            out.status.success(),
            "slotcron check {}:\n{}",
            path.display(),
            output_text(&out)
        );
    }
}

#[test]
fn kubernetes_example_has_a_job_that_fires_at_least_once_a_minute() {
    let Some(text) = kustomized() else { return };
    let docs = documents(&text);
    let (config, _) = configmap_config(&docs);
    let now = chrono::Utc::now();
    let frequent = config.jobs.iter().find(|job| {
        let slots = job.schedule.upcoming(now, 10);
        slots.len() == 10
            && slots
                .windows(2)
                .all(|w| w[1].instant() - w[0].instant() <= chrono::TimeDelta::seconds(60))
    });
    let job = frequent.expect("a job whose slots are at most a minute apart");
    assert!(
        matches!(job.action, Action::Log(_)),
        "the demo job only logs: {:?}",
        job.action.kind()
    );
}

// ---------------------------------------------------------------------------
// The Prometheus Operator component (deploy/monitoring), rendered with the fleet
// ---------------------------------------------------------------------------

/// GitHub's anchor of a Markdown heading: lower case, spaces to `-`, punctuation dropped.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The heading anchors of the book's Operations chapter, where the runbooks live.
fn runbook_anchors() -> BTreeSet<String> {
    read(RUNBOOKS)
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| heading_anchor(h.trim_start_matches('#')))
        .collect()
}

/// The chapter the alerts' `runbook_url`s name (it was a section of README.md until the README
/// became a page and the manual a book).
const RUNBOOKS: &str = "book/en/src/operations.md";

/// Every alert of the rule groups: each links a runbook of the book, and one fires on no
/// replica.
fn assert_alerts_have_runbooks(groups: &Value) {
    let anchors = runbook_anchors();
    let alerts: Vec<&Value> = groups
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter(|r| r["alert"].is_string())
        .collect();
    for alert in &alerts {
        let url = str_of(&alert["annotations"]["runbook_url"], "runbook_url");
        let (_, anchor) = url
            .split_once(&format!("{RUNBOOKS}#"))
            .expect("an anchor of the book's runbooks");
        assert!(
            anchors.contains(anchor),
            "{url}: no such heading in {RUNBOOKS}"
        );
    }
    assert!(
        alerts
            .iter()
            .any(|a| str_of(&a["expr"], "expr").contains("absent(slotcron_build_info)")),
        "an alert for no replica up"
    );
}

/// The ServiceMonitor selects the slotcron Service by its labels and names one of its ports.
fn assert_service_monitor_finds_the_service(docs: &[Value]) {
    let monitor = &named(docs, "ServiceMonitor", "slotcron")["spec"];
    let service = named(docs, "Service", "slotcron");
    for (k, v) in monitor["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&service["metadata"]["labels"][k], v, "Service label {k:?}");
    }
    let port = &monitor["endpoints"][0]["port"];
    assert!(
        service["spec"]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|p| &p["name"] == port),
        "the ServiceMonitor's port {port:?}"
    );
    assert_eq!(monitor["endpoints"][0]["path"].as_str(), Some("/metrics"));
}

#[test]
fn monitoring_component_renders_with_kustomize_and_agrees_with_the_fleet_and_alerts_yml() {
    let Some(base) = kustomized() else { return };
    assert!(
        of_kind(&documents(&base), "ServiceMonitor").is_empty(),
        "the base stays free of CRD kinds (kubernetes-validate knows none)"
    );
    let Some(text) = kustomize("deploy/kubernetes-monitored") else {
        return;
    };
    let docs = documents(&text);
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert_eq!(
            named(&docs, kind, "slotcron")["metadata"]["namespace"].as_str(),
            Some("slotcron"),
            "{kind}"
        );
    }

    assert_service_monitor_finds_the_service(&docs);

    // The PrometheusRule carries exactly the rules promtool checks and unit-tests.
    let rule = named(&docs, "PrometheusRule", "slotcron");
    assert_eq!(
        rule["spec"],
        yaml("deploy/prometheus/alerts.yml"),
        "deploy/monitoring/prometheusrule.yaml differs from deploy/prometheus/alerts.yml"
    );
    assert_alerts_have_runbooks(&rule["spec"]["groups"]);

    // The dashboard, for Grafana's sidecar.
    let dashboard = named(&docs, "ConfigMap", "slotcron-grafana-dashboard");
    assert_eq!(
        dashboard["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    assert_eq!(
        str_of(&dashboard["data"]["slotcron-dashboard.json"], "dashboard"),
        read("deploy/monitoring/slotcron-dashboard.json")
    );
}

// ---------------------------------------------------------------------------
// A fresh `kubectl apply -k deploy/kubernetes`: no Secret of the operator's, no robot job, and
// Redis behind the password of the Secret the manifests generate
// ---------------------------------------------------------------------------

/// The pods of every workload the manifests render, with the workload's name.
fn pods(docs: &[Value]) -> Vec<(&str, &Value)> {
    docs.iter()
        .filter(|d| d["spec"]["template"]["spec"]["containers"].is_sequence())
        .map(|d| {
            let name = str_of(&d["metadata"]["name"], "name");
            (name, &d["spec"]["template"]["spec"])
        })
        .collect()
}

#[test]
fn kubernetes_demo_starts_without_any_operator_secret_and_enables_no_robot_job() {
    let Some(text) = kustomized() else { return };
    let docs = documents(&text);
    let rendered: BTreeSet<&str> = of_kind(&docs, "Secret")
        .into_iter()
        .map(|s| str_of(&s["metadata"]["name"], "name"))
        .collect();
    // Every Secret a pod mounts is one the manifests create, or optional: the kubelet starts
    // no container whose required Secret is missing.
    for (workload, pod) in pods(&docs) {
        for volume in pod["volumes"].as_sequence().into_iter().flatten() {
            let secret = &volume["secret"];
            let Some(name) = secret["secretName"].as_str() else {
                continue;
            };
            assert!(
                rendered.contains(name) || secret["optional"].as_bool() == Some(true),
                "{workload} mounts the Secret {name}, which the manifests do not create and \
                 which is not optional: the pod waits for the operator to create it"
            );
        }
        for container in pod["containers"].as_sequence().unwrap() {
            container_env(&docs, container);
        }
    }
    // slotcron starts on the ConfigMap with no file of the operator's Secret, and nothing it
    // runs sends a message (a robot job would @all a real group).
    let (config, _) = configmap_config(&docs);
    assert!(!config.jobs.is_empty(), "the demo has a job");
    for job in &config.jobs {
        assert!(
            matches!(job.action, Action::Log(_)),
            "job {} is enabled and sends ({}): the demo only logs",
            job.name,
            job.action.kind()
        );
    }
}

#[test]
fn every_statefulsets_governing_service_is_headless() {
    let Some(text) = kustomized() else { return };
    let docs = documents(&text);
    let sets = of_kind(&docs, "StatefulSet");
    assert_eq!(sets.len(), 3, "three Redis nodes");
    for set in sets {
        let service = str_of(&set["spec"]["serviceName"], "serviceName");
        assert_eq!(
            named(&docs, "Service", service)["spec"]["clusterIP"].as_str(),
            Some("None"),
            "{service}: a StatefulSet's governing Service is headless (clusterIP: None)"
        );
    }
}

/// One Redis node started as its StatefulSet's container starts: the rendered `command` and
/// `args`, as the pod's user, its Secret's files written as the kubelet writes them. Only the
/// paths (the Secret's mount, `/data`) and the port (appended) are this machine's.
struct RenderedRedis {
    _process: common::Replica,
    port: u16,
    /// The Secret's mount path in the manifests, and where its files are here.
    secret_mount: String,
    secret_dir: PathBuf,
    _dir: tempfile::TempDir,
}

impl RenderedRedis {
    fn start(docs: &[Value], set: &Value) -> Self {
        let pod = &set["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let who = run_as(pod, container);
        let dir = tempfile::tempdir().unwrap();
        world_traversable(dir.path());
        let (secret_mount, secret_dir) = write_secret_volume(docs, pod, container, dir.path());
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::os::unix::fs::chown(&data, Some(who.uid), Some(who.gid)).unwrap();
        let local = |arg: &str| {
            let arg = arg.replace(&secret_mount, &secret_dir.display().to_string());
            if arg == "/data" {
                data.display().to_string()
            } else {
                arg
            }
        };
        let argv: Vec<String> = [&container["command"], &container["args"]]
            .into_iter()
            .flat_map(|list| list.as_sequence().expect("command and args").iter())
            .map(|a| local(str_of(a, "arg")))
            .collect();
        let port = common::free_port();
        let mut cmd = as_user(Path::new(&argv[0]), who.uid, who.gid, &who.groups);
        cmd.args(&argv[1..])
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .env("PATH", path_with_redis());
        let name = str_of(&set["metadata"]["name"], "name");
        let process = common::Replica::spawn_cmd(name, cmd);
        // A fresh redis-server answers within a second; 30 s for a machine under heavy load.
        common::wait_until(Duration::from_secs(30), || redis_reply(port, "PING\r\n", 1))
            .unwrap_or_else(|| panic!("{name} never answered: {:?}", process.lines()));
        RenderedRedis {
            _process: process,
            port,
            secret_mount,
            secret_dir,
            _dir: dir,
        }
    }

    /// A readiness or liveness probe's command run here as the container runs it, against
    /// `secret_dir` for the Secret's mount (the probe asks the default port: this node's here).
    fn probe(&self, pod: &Value, container: &Value, probe: &str, secret_dir: &Path) -> bool {
        let who = run_as(pod, container);
        let argv: Vec<String> = container[probe]["exec"]["command"]
            .as_sequence()
            .unwrap_or_else(|| panic!("{probe} runs a command"))
            .iter()
            .map(|a| {
                str_of(a, "arg")
                    .replace(&self.secret_mount, &secret_dir.display().to_string())
                    .replace("redis-cli ", &format!("redis-cli -p {} ", self.port))
            })
            .collect();
        as_user(Path::new(&argv[0]), who.uid, who.gid, &who.groups)
            .args(&argv[1..])
            .env("PATH", path_with_redis())
            .output()
            .unwrap()
            .status
            .success()
    }
}

/// The container's Secret volume written into `root` as the kubelet writes it (root-owned, the
/// item's mode, `fsGroup`'s group): its mount path in the manifests, and the local directory.
fn write_secret_volume(
    docs: &[Value],
    pod: &Value,
    container: &Value,
    root: &Path,
) -> (String, PathBuf) {
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find_map(|m| {
            let volume = pod["volumes"]
                .as_sequence()?
                .iter()
                .find(|v| v["name"] == m["name"] && v["secret"].is_mapping())?;
            Some((str_of(&m["mountPath"], "mountPath"), &volume["secret"]))
        });
    let (mount_path, secret) = mount.expect("Redis mounts its password Secret");
    let dir = root.join("secret");
    std::fs::create_dir(&dir).unwrap();
    world_traversable(&dir);
    let files = secret_files(pod, secret);
    let name = str_of(&secret["secretName"], "secretName");
    for item in secret["items"].as_sequence().expect("items").iter() {
        let key = str_of(&item["key"], "key");
        let path = str_of(&item["path"], "path");
        let value = rendered_secret(docs, name, key)
            .unwrap_or_else(|| panic!("the Secret {name} is rendered with {key}"));
        let file = files.iter().find(|(p, _)| p == path).unwrap().1;
        let local = dir.join(path);
        std::fs::write(&local, value).unwrap();
        std::os::unix::fs::chown(&local, Some(0), Some(file.gid)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(file.mode)).unwrap();
    }
    (mount_path.to_owned(), dir)
}

/// `PATH` with the redis-server the tests use first (the container's image has it on `PATH`).
fn path_with_redis() -> std::ffi::OsString {
    let server = PathBuf::from(common::redis_server_bin());
    let bin_dir = server
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf);
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(bin_dir.into_iter().chain(std::env::split_paths(&rest))).unwrap()
}

/// What 127.0.0.1:`port` answers to `request` (inline commands), once `replies` lines came.
fn redis_reply(port: u16, request: &str, replies: usize) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    // Bounds a reply from a live local server; far above its microseconds.
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    let mut buf = [0u8; 512];
    while text.matches("\r\n").count() < replies {
        let n = stream.read(&mut buf).ok().filter(|&n| n > 0)?;
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    Some(text)
}

/// The ConfigMap's jobs.toml with each `redis-N:6379` of its node URLs pointed at the local
/// node started for it; the `${REDIS_PASSWORD}` in the URLs stays.
fn configmap_on_local_nodes(docs: &[Value], nodes: &[(String, u16)], dir: &Path) -> PathBuf {
    let mut text = configmap_jobs(docs);
    for (name, port) in nodes {
        let host = format!("@{name}:6379");
        assert!(text.contains(&host), "the node URLs name {host}");
        text = text.replace(&host, &format!("@127.0.0.1:{port}"));
    }
    let path = dir.join("jobs.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The rendered manifests, for a test that runs their processes as the pods' users (`None`:
/// no kubectl, or not root, outside CI).
fn rendered_as_root() -> Option<Vec<Value>> {
    let text = kustomized()?;
    can_drop_privileges().then(|| documents(&text))
}

/// The three Redis nodes, each started from its own StatefulSet, and the ConfigMap's jobs.toml
/// pointed at them (written into `dir`).
fn start_rendered_fleet(docs: &[Value], dir: &Path) -> (Vec<(String, RenderedRedis)>, PathBuf) {
    let nodes = start_rendered_nodes(docs);
    let ports: Vec<(String, u16)> = nodes.iter().map(|(n, r)| (n.clone(), r.port)).collect();
    let config = configmap_on_local_nodes(docs, &ports, dir);
    (nodes, config)
}

/// The three Redis nodes, each started from its own StatefulSet.
fn start_rendered_nodes(docs: &[Value]) -> Vec<(String, RenderedRedis)> {
    of_kind(docs, "StatefulSet")
        .into_iter()
        .map(|set| {
            let name = str_of(&set["metadata"]["name"], "name").to_owned();
            (name, RenderedRedis::start(docs, set))
        })
        .collect()
}

#[test]
fn redis_started_as_its_statefulset_refuses_a_client_without_the_password_and_slotcron_sends_it() {
    let Some(docs) = rendered_as_root() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = start_rendered_fleet(&docs, dir.path());
    for (name, node) in &nodes {
        let anonymous = redis_reply(node.port, "PING\r\n", 1).unwrap();
        assert!(
            anonymous.starts_with("-NOAUTH"),
            "{name} answers a client without the password: {anonymous:?}"
        );
        let set = named(&docs, "StatefulSet", name);
        let pod = &set["spec"]["template"]["spec"];
        let password = std::fs::read_to_string(node.secret_dir.join("password")).unwrap();
        let authed = redis_reply(node.port, &format!("AUTH {password}\r\nPING\r\n"), 2).unwrap();
        assert_eq!(
            authed, "+OK\r\n+PONG\r\n",
            "{name} with the Secret's password"
        );
        // The probes authenticate the same way, and a wrong password fails them (redis-cli
        // exits 0 on NOAUTH too).
        let container = &pod["containers"][0];
        for probe in ["readinessProbe", "livenessProbe"] {
            assert!(
                node.probe(pod, container, probe, &node.secret_dir),
                "{name}: {probe}"
            );
        }
        let wrong = tempfile::tempdir().unwrap();
        world_traversable(wrong.path());
        std::fs::write(wrong.path().join("password"), "wrong").unwrap();
        assert!(
            !node.probe(pod, container, "readinessProbe", wrong.path()),
            "{name}: the readiness probe passes with a wrong password"
        );
    }
    // slotcron with the pod's environment reaches them through the node URLs' password, and
    // is refused with another one.
    let env = container_env(&docs, slotcron_container(&docs));
    let history = |env: &HashMap<String, String>| {
        Command::new(BIN)
            .args(["history", "--config"])
            .arg(&config)
            .envs(env)
            .output()
            .unwrap()
    };
    let out = history(&env);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut wrong = env.clone();
    wrong.insert("REDIS_PASSWORD".into(), "0000".into());
    let out = history(&wrong);
    assert!(
        !out.status.success(),
        "a wrong password is refused: {}",
        output_text(&out)
    );
}

// ---------------------------------------------------------------------------
// The deploy docs: the CLI lines they show run, their comments agree, the limits have room
// ---------------------------------------------------------------------------

/// The `slotcron …` part of each line of deploy/README.md that starts with `prefix`.
fn documented_cli_lines(prefix: &str) -> Vec<String> {
    let lines: Vec<String> = read("deploy/README.md")
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(str::to_owned)
        .collect();
    for verb in ["history", "pause", "resume"] {
        let shown = format!("slotcron {verb} ");
        assert!(
            lines.iter().any(|l| l.starts_with(&shown)),
            "deploy/README.md shows `{prefix}{shown}…`: {lines:?}"
        );
    }
    lines
}

/// Runs each documented `slotcron …` line through `sh` (its quoting, `"$USER"`) as it runs
/// in the container: the binary on `PATH`, the container's environment plus `env`.
fn run_documented_lines(lines: &[String], env: &HashMap<String, String>) {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&rest)),
    )
    .unwrap();
    for line in lines {
        let out = Command::new("sh")
            .args(["-c", line])
            .env("PATH", &path)
            .env("USER", "operator")
            .env_remove("RUST_LOG")
            .envs(env)
            .output()
            .unwrap();
        assert!(out.status.success(), "{line}:\n{}", output_text(&out));
    }
}

#[test]
fn the_kubectl_exec_lines_of_deploy_readme_run_in_a_pods_environment_against_its_redis() {
    let Some(docs) = rendered_as_root() else {
        return;
    };
    let lines = documented_cli_lines("kubectl -n slotcron exec deploy/slotcron -- ");
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, config) = start_rendered_fleet(&docs, dir.path());
    // The pod's environment: its env list and the image's SLOTCRON_CONFIG, which names the
    // mounted jobs.toml (here the local copy).
    let runtime = stages(&read("deploy/Dockerfile")).pop().unwrap();
    let mut env: HashMap<String, String> = env_pairs(&runtime).into_iter().collect();
    env.extend(container_env(&docs, slotcron_container(&docs)));
    env.insert("SLOTCRON_CONFIG".into(), config.display().to_string());
    run_documented_lines(&lines, &env);
}

#[test]
fn the_docker_compose_exec_lines_of_deploy_readme_run_against_the_demos_redis() {
    let service = "replica-1";
    assert_eq!(
        yaml("deploy/docker-compose.yml")["services"][service]["build"]["dockerfile"].as_str(),
        Some("deploy/Dockerfile"),
        "{service} is a slotcron replica of docker-compose.yml"
    );
    let lines = documented_cli_lines(&format!(
        "docker compose -f deploy/docker-compose.yml exec {service} "
    ));
    // The demo's jobs file with its nodes (redis-1..3) on local servers.
    let cluster = common::RedisCluster::start(3);
    let mut text = read(COMPOSE_JOBS);
    for (i, url) in cluster.urls().iter().enumerate() {
        let node = format!("redis://redis-{}:6379", i + 1);
        assert!(text.contains(&node), "{COMPOSE_JOBS} names {node}");
        text = text.replace(&node, url);
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobs.toml");
    std::fs::write(&config, text).unwrap();
    let runtime = stages(&read("deploy/Dockerfile")).pop().unwrap();
    let mut env: HashMap<String, String> = env_pairs(&runtime).into_iter().collect();
    env.insert("SLOTCRON_CONFIG".into(), config.display().to_string());
    run_documented_lines(&lines, &env);
}

/// "one" for 1: how the deploy comments count log lines.
fn number_word(n: usize) -> &'static str {
    ["no", "one", "two", "three", "four"][n]
}

#[test]
fn every_deploy_comment_counts_as_many_lost_lines_per_slot_as_the_default_candidates_give() {
    // Each slot: the first candidate's `won`, every further candidate's `lost`.
    let slotcron::unstable::config::Candidates::Top(k) =
        slotcron::unstable::config::DEFAULT_CANDIDATES
    else {
        panic!("the default candidates are a number");
    };
    let expected = format!("{} `lost`", number_word(k.get() - 1));
    let mut files = vec![repo().join("deploy/README.md")];
    files.extend(deploy_jobs_files());
    files.push(repo().join("deploy/docker-compose.yml"));
    let mut counted = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap().replace('\n', " ");
        for (at, _) in text.match_indices("`lost`") {
            let before: String = text[..at]
                .split_whitespace()
                .last()
                .unwrap_or("")
                .to_owned();
            let said = format!("{before} `lost`");
            assert_eq!(said, expected, "{}: says {said:?}", path.display());
            counted += 1;
        }
    }
    assert!(
        counted >= 3,
        "the compose, Kubernetes and README demos each say it"
    );
}

/// The highest peak RSS per replica BENCHMARKS.md measured (its scale rows), in MiB.
fn highest_measured_peak_rss_mib() -> f64 {
    let text = read("BENCHMARKS.md");
    let peaks: Vec<f64> = text
        .split("peak RSS ")
        .skip(1)
        .filter_map(|rest| {
            let (mib, unit) = rest.split_once(' ')?;
            unit.starts_with("MiB per replica")
                .then(|| mib.parse().ok())
                .flatten()
        })
        .collect();
    assert!(!peaks.is_empty(), "BENCHMARKS.md has its scale rows");
    peaks.into_iter().fold(0.0, f64::max)
}

#[test]
fn the_replicas_memory_limit_is_twice_the_highest_peak_rss_measured() {
    let Some(text) = kustomized() else { return };
    let docs = documents(&text);
    let limit = str_of(
        &slotcron_container(&docs)["resources"]["limits"]["memory"],
        "memory limit",
    );
    let limit_mib: f64 = limit
        .strip_suffix("Mi")
        .unwrap_or_else(|| panic!("{limit}: in Mi"))
        .parse()
        .unwrap();
    let peak = highest_measured_peak_rss_mib();
    // Twice: room for a burst above the benchmark's steady 30 s and for the allocator's
    // fragmentation over days, where the benchmark ran one process for 30 s.
    assert!(
        limit_mib >= 2.0 * peak,
        "memory limit {limit} against a measured peak of {peak} MiB per replica"
    );
}
