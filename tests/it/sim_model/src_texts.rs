//! What slotcron's `src/` sends, read from its source text: the Lua scripts (private constants,
//! so read from the files) and the names of the commands. The differential test sends these
//! texts, not the model's copies, so a script changed in `src/` fails it.

use std::path::Path;

/// slotcron's scripts, as the differential test sends them.
pub struct Scripts {
    pub release: String,
    pub extend: String,
    pub acquire: String,
    pub record_and_read: String,
    pub first_seen: String,
    pub take: String,
    pub push: String,
}

impl Scripts {
    pub fn read() -> Scripts {
        Scripts {
            release: constant("src/redis/scripts.rs", "RELEASE_SCRIPT"),
            extend: constant("src/redis/scripts.rs", "EXTEND_SCRIPT"),
            acquire: constant("src/redis/scripts.rs", "ACQUIRE_SCRIPT"),
            record_and_read: constant("src/record/history.rs", "RECORD_AND_READ_SCRIPT"),
            first_seen: constant("src/record/watermark.rs", "FIRST_SEEN_SCRIPT"),
            take: constant("src/action/rate.rs", "TAKE_SCRIPT"),
            push: constant("src/record/alerts.rs", "PUSH_SCRIPT"),
        }
    }

    /// Every script `src/` declares: each `const NAME_SCRIPT: &str` of every file under
    /// `src/` (what slotcron sends with `EVAL` or `Script::new`), found by a scan rather than
    /// listed, so a script added to `src/` is checked against the model without anyone
    /// remembering to name it here. Sorted by file and name.
    pub fn all(&self) -> Vec<(String, String)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        rust_files(&root.join("src"), &mut files);
        files.sort();
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let relative = file
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            for name in script_constants(&text) {
                found.push((format!("{relative} {name}"), constant(&relative, &name)));
            }
        }
        found
    }
}

/// The names of the `const ..._SCRIPT: &str` declared in `text`.
fn script_constants(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for piece in text.split("const ").skip(1) {
        let Some((name, rest)) = piece.split_once(':') else {
            continue;
        };
        let is_ident = name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if is_ident && name.ends_with("_SCRIPT") && rest.trim_start().starts_with("&str") {
            names.push(name.to_owned());
        }
    }
    names
}

/// Every identifier `src/` passes to `cmd("EVAL").arg(...)` or `Script::new(...)` as a
/// script: each must be one of the `_SCRIPT` constants [`Scripts::all`] finds.
pub fn script_arguments() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut names = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for marker in ["cmd(\"EVAL\")", "Script::new("] {
            for piece in text.split(marker).skip(1) {
                // `cmd("EVAL")`'s first `.arg(` is the script; `Script::new(` takes it.
                let piece = match (marker, piece.find(".arg(")) {
                    ("Script::new(", _) | (_, None) => piece,
                    (_, Some(at)) => &piece[at + ".arg(".len()..],
                };
                let piece = piece.trim_start();
                let ident: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !ident.is_empty() {
                    names.push(ident);
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

fn source(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The value of `const NAME: &str = "..."` (or `r"..."`) in `file`, as Rust reads the literal.
pub fn constant(file: &str, name: &str) -> String {
    let text = source(file);
    let declared = format!("const {name}: &str =");
    let at = text
        .find(&declared)
        .unwrap_or_else(|| panic!("{file} declares no `{declared}`"));
    let literal = text[at + declared.len()..].trim_start();
    if let Some(raw) = literal.strip_prefix("r\"") {
        let end = raw.find('"').expect("a raw string's end");
        return raw[..end].to_owned();
    }
    let quoted = literal
        .strip_prefix('"')
        .unwrap_or_else(|| panic!("{name} in {file} is not a string literal"));
    unescape(quoted)
}

/// A (non-raw) string literal's value, up to its closing quote.
fn unescape(quoted: &str) -> String {
    let mut out = String::new();
    let mut chars = quoted.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => return out,
            '\\' => match chars.next() {
                Some('\n') => {
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                }
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => break,
            },
            c => out.push(c),
        }
    }
    panic!("a string literal without its closing quote")
}

/// Every command name `src/` builds with `redis::cmd("...")` or `pipe.cmd("...")`, and the
/// typed ones it calls (`pipe.hset`, `pipe.hgetall`, `pubsub.subscribe`), lowercase, sorted.
pub fn commands_sent() -> Vec<String> {
    let mut names = Vec::new();
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for piece in text.split("cmd(\"").skip(1) {
            if let Some(end) = piece.find('"') {
                names.push(piece[..end].to_ascii_lowercase());
            }
        }
        for (typed, name) in [
            (".hset(", "hset"),
            (".hgetall(", "hgetall"),
            (".subscribe(channel)", "subscribe"),
        ] {
            if text.contains(typed) {
                names.push(name.to_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
