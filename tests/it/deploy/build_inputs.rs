//! The image's build stage checked without a container engine and without compiling: at each
//! `RUN` that runs `cargo build`, the stage's filesystem (what its `COPY` lines put there, minus
//! what `.dockerignore` keeps out of the context, plus what its own `RUN` lines write) holds
//! every file that build reads.
//!
//! This replaced a replay of the stage that compiled the whole crate a second time in every CI
//! run (3.5 min cold on two cores). The replay proved only which files Cargo and rustc read,
//! never how they compile them (it overrode the profile), and those files are known without
//! compiling: the manifest, `Cargo.lock` (`--locked`), `.cargo/config.toml`, a build script or
//! toolchain file, the target files Cargo.toml declares (Cargo refuses a manifest whose declared
//! target is missing, even for `--bin`), the sources `cargo package --list` holds, and every
//! file the sources embed (`include_str!`, `include_bytes!`, `include!`, `#[path]`).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use super::{copy_parts, declared_target_paths, output_text, repo, stages};

/// Files Cargo reads when it loads the package, before any source: the build stage's
/// dependency-only build (on stub sources) needs them already. Only those that exist count.
const MANIFEST_FILES: [&str; 7] = [
    "Cargo.toml",
    "Cargo.lock",
    ".cargo/config.toml",
    ".cargo/config",
    "build.rs",
    "rust-toolchain.toml",
    "rust-toolchain",
];

/// What `cargo build` reads in a package root, by when it reads it.
struct BuildInputs {
    /// Read when Cargo loads the package: needed at every `cargo build` of the stage.
    manifest: Vec<String>,
    /// Read when rustc compiles the crate: needed at the stage's last `cargo build`.
    sources: Vec<String>,
}

fn build_inputs(root: &Path) -> BuildInputs {
    let mut manifest: Vec<String> = MANIFEST_FILES
        .iter()
        .filter(|f| root.join(f).is_file())
        .map(|f| (*f).to_owned())
        .collect();
    manifest.extend(declared_target_paths(root));
    let packaged = package_list(root);
    let rs: Vec<&String> = packaged
        .iter()
        .filter(|p| p.starts_with("src/") && p.ends_with(".rs"))
        .collect();
    assert!(!rs.is_empty(), "cargo package --list names no source");
    let mut sources: Vec<String> = rs.iter().map(|p| (*p).clone()).collect();
    for file in &rs {
        for embedded in embedded_files(root, file) {
            // A file outside the package also breaks the published crate's build.
            assert!(
                packaged.contains(&embedded),
                "{file} embeds {embedded}, which cargo package --list does not hold"
            );
            sources.push(embedded);
        }
    }
    BuildInputs { manifest, sources }
}

/// The package's files as `cargo package --list` gives them (what Cargo builds a published
/// crate from), without the two it generates.
fn package_list(root: &Path) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["package", "--list", "--allow-dirty"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo package --list:\n{}",
        output_text(&out)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !matches!(*l, "Cargo.toml.orig" | ".cargo_vcs_info.json"))
        .map(str::to_owned)
        .collect()
}

/// The macros and attribute through which a source file makes rustc read another file.
const EMBEDDERS: [&str; 4] = ["include_str!(", "include_bytes!(", "include!(", "#[path ="];

/// Every file `file` (relative to `root`) makes rustc read, relative to `root`. A form this
/// reader cannot resolve fails the test: an input it skipped would pass unchecked.
fn embedded_files(root: &Path, file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root.join(file)).unwrap();
    let dir = Path::new(file).parent().unwrap().to_str().unwrap();
    let mut out = Vec::new();
    for embedder in EMBEDDERS {
        for (at, _) in text.match_indices(embedder) {
            let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
            if text[line_start..at].trim_start().starts_with("//") {
                continue;
            }
            let rest = text[at + embedder.len()..].trim_start();
            let path = match rest.strip_prefix("concat!(env!(\"CARGO_MANIFEST_DIR\"),") {
                Some(from_root) => literal(from_root).trim_start_matches('/').to_owned(),
                None => format!("{dir}/{}", literal(rest)),
            };
            let path = normalized(&path);
            assert!(
                !path.starts_with(".."),
                "{file}: {embedder} {path}: outside the package"
            );
            out.push(path);
        }
    }
    out
}

/// The string literal `text` opens with (paths carry no escapes).
fn literal(text: &str) -> &str {
    let text = text.trim_start();
    let body = text
        .strip_prefix('"')
        .unwrap_or_else(|| panic!("not a string literal: {:.60}", text));
    &body[..body.find('"').unwrap()]
}

/// `a/./b/../c` → `a/c`; a leading `/` is kept.
fn normalized(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    let joined = parts.join("/");
    if path.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

/// `.dockerignore`'s patterns: a path, or one `*` within a name (`*.log`), as the file uses
/// them. A form the check does not model (`!`, `**`, two `*`) fails the test.
fn ignore_patterns(context: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(context.join(".dockerignore")).unwrap_or_default();
    let patterns: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_matches('/').to_owned())
        .collect();
    for p in &patterns {
        assert!(
            !p.starts_with('!') && !p.contains("**") && p.matches('*').count() <= 1,
            ".dockerignore: {p} is a form this check does not model"
        );
    }
    patterns
}

/// Whether the context path `rel` is ignored: Docker matches a pattern against the path from
/// the context root, and ignoring a directory ignores what is in it.
fn ignored(patterns: &[String], rel: &str) -> bool {
    patterns.iter().any(|p| match p.split_once('*') {
        Some((head, tail)) => {
            rel.starts_with(head) && rel.ends_with(tail) && !rel[head.len()..].contains('/')
        }
        None => rel == p || rel.starts_with(&format!("{p}/")),
    })
}

/// The files a `COPY` of the context path `source` brings: (path under `source`, path in the
/// context), none of them ignored.
fn context_files(context: &Path, source: &str, patterns: &[String]) -> Vec<(String, String)> {
    let source = normalized(source);
    let mut out = Vec::new();
    let mut todo = vec![String::new()];
    while let Some(under) = todo.pop() {
        let rel = normalized(&format!("{source}/{under}"));
        if ignored(patterns, &rel) {
            continue;
        }
        let path = context.join(&rel);
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                let name = entry.unwrap().file_name().into_string().unwrap();
                todo.push(normalized(&format!("{under}/{name}")));
            }
        } else if path.is_file() {
            out.push((under, rel));
        }
    }
    out
}

/// The build stage's files (image paths) at one `RUN` that runs `cargo build`, and its WORKDIR.
struct CargoBuild {
    workdir: String,
    files: BTreeSet<String>,
}

/// The first stage of `dockerfile` walked on `context`: its files at each `cargo build`.
fn cargo_builds(dockerfile: &str, context: &Path) -> Vec<CargoBuild> {
    let patterns = ignore_patterns(context);
    let mut workdir = "/".to_owned();
    let mut files = BTreeSet::new();
    let mut builds = Vec::new();
    for i in &stages(dockerfile)[0] {
        match i.name.as_str() {
            "WORKDIR" => workdir = normalized(&format!("{workdir}/{}", i.args)),
            "COPY" => copy(&i.args, context, &patterns, &workdir, &mut files),
            "RUN" => {
                for command in i.args.split("&&").map(str::trim) {
                    if command.starts_with("cargo build") {
                        builds.push(CargoBuild {
                            workdir: workdir.clone(),
                            files: files.clone(),
                        });
                    }
                    shell_writes(command, &workdir, &mut files);
                }
            }
            _ => {}
        }
    }
    builds
}

/// A build stage's `COPY` from the context, as Docker places it: a directory's contents go
/// into the destination; a file goes into it when it names a directory (`./`, `x/`, several
/// sources), else becomes it.
fn copy(
    args: &str,
    context: &Path,
    patterns: &[String],
    workdir: &str,
    files: &mut BTreeSet<String>,
) {
    let (flags, sources, dest) = copy_parts(args);
    assert!(
        flags.is_empty(),
        "build stage copies from the context: {args}"
    );
    let into_dir = dest.ends_with('/') || dest == "." || sources.len() > 1;
    let dest = normalized(&format!("{workdir}/{dest}"));
    for source in sources {
        let is_dir = context.join(source).is_dir();
        for (under, _) in context_files(context, source, patterns) {
            let placed = match (is_dir, into_dir) {
                (true, _) => format!("{dest}/{under}"),
                (false, true) => format!("{dest}/{}", source.rsplit('/').next().unwrap()),
                (false, false) => dest.clone(),
            };
            files.insert(normalized(&placed));
        }
    }
}

/// What one `&&` part of a `RUN` line writes or removes: `touch F...`, `... > F`, `rm -rf D`
/// (the build stage's stub sources); anything else writes no file the build reads.
fn shell_writes(command: &str, workdir: &str, files: &mut BTreeSet<String>) {
    let at = |p: &str| normalized(&format!("{workdir}/{p}"));
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.as_slice() {
        ["touch", paths @ ..] => files.extend(paths.iter().map(|p| at(p))),
        ["rm", "-rf", paths @ ..] => {
            for gone in paths.iter().map(|p| at(p)) {
                files.retain(|f| f != &gone && !f.starts_with(&format!("{gone}/")));
            }
        }
        [.., ">", path] => {
            files.insert(at(path));
        }
        _ => {}
    }
}

/// Every build input (context path) the stage lacks at a `cargo build`, said as a sentence;
/// empty when the image has what the build reads.
fn missing_build_inputs(dockerfile: &str, context: &Path) -> Vec<String> {
    let inputs = build_inputs(context);
    let builds = cargo_builds(dockerfile, context);
    let Some(last) = builds.last() else {
        return vec!["the build stage runs no cargo build".to_owned()];
    };
    let lacks = |build: &CargoBuild, input: &String| {
        !build
            .files
            .contains(&normalized(&format!("{}/{input}", build.workdir)))
    };
    let mut missing = Vec::new();
    for (n, build) in builds.iter().enumerate() {
        for input in inputs.manifest.iter().filter(|i| lacks(build, i)) {
            missing.push(format!("cargo build #{}: no {input}", n + 1));
        }
    }
    for input in inputs.sources.iter().filter(|i| lacks(last, i)) {
        missing.push(format!("the last cargo build: no {input}"));
    }
    missing
}

#[test]
fn dockerfile_build_stage_holds_every_file_cargo_build_reads_at_each_cargo_build() {
    let missing = missing_build_inputs(&super::read("deploy/Dockerfile"), &repo());
    assert!(
        missing.is_empty(),
        "deploy/Dockerfile:\n{}",
        missing.join("\n")
    );
    // The reader found what the sources embed (the calendar, the status page, the starters).
    let sources = build_inputs(&repo()).sources;
    for embedded in ["data/calendar/cn.toml", "src/ops/status/page.html"] {
        assert!(
            sources.iter().any(|s| s == embedded),
            "{embedded}: {sources:?}"
        );
    }
}

#[test]
fn the_build_input_check_fails_when_any_copy_line_of_the_build_stage_is_removed() {
    let text = super::read("deploy/Dockerfile");
    let build_stage_end = text.rfind("\nFROM ").expect("a runtime stage");
    let copies: Vec<&str> = text[..build_stage_end]
        .lines()
        .filter(|l| l.starts_with("COPY "))
        .collect();
    assert!(copies.len() >= 5, "{copies:?}");
    for line in copies {
        let without = text.replacen(&format!("{line}\n"), "", 1);
        let missing = missing_build_inputs(&without, &repo());
        eprintln!(
            "without `{line}`: {} missing, e.g. {:?}",
            missing.len(),
            missing.first()
        );
        let (_, sources, _) = copy_parts(line.strip_prefix("COPY ").unwrap());
        assert!(
            missing.iter().any(|m| sources
                .iter()
                .any(|s| m.contains(&format!("no {}", normalized(s))))),
            "without `{line}` the check says: {missing:?}"
        );
    }
}

/// A crate whose library embeds `notes/extra.txt`, and a Dockerfile that copies its manifest
/// and `src/` (and `notes/` when `with_notes`).
fn scratch_crate(with_notes: bool) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "Cargo.toml",
        "[package]\nname = \"scratch\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        "src/lib.rs",
        "pub const NOTES: &str = include_str!(\"../notes/extra.txt\");\n",
    );
    write("notes/extra.txt", "embedded\n");
    let notes = if with_notes {
        "COPY notes ./notes\n"
    } else {
        ""
    };
    let dockerfile = format!(
        "FROM rust:1.91.1-slim-bookworm AS build\nWORKDIR /src\nCOPY Cargo.toml ./\n\
         COPY src ./src\n{notes}RUN cargo build --release\nFROM debian:12.11-slim\n"
    );
    (dir, dockerfile)
}

#[test]
fn the_build_input_check_fails_on_an_include_str_target_outside_the_copied_set() {
    let (dir, dockerfile) = scratch_crate(false);
    let missing = missing_build_inputs(&dockerfile, dir.path());
    assert_eq!(missing, ["the last cargo build: no notes/extra.txt"]);
    let (dir, dockerfile) = scratch_crate(true);
    let missing = missing_build_inputs(&dockerfile, dir.path());
    assert!(missing.is_empty(), "with notes/ copied: {missing:?}");
}
