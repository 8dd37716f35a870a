//! The house rules that the compiler does not check, read from `src/` as text: `lib.rs`'s
//! `# Layout` list is true (it names every top-level module and no other, and a module imports
//! only modules listed below it), no file is over [`MAX_FILE_LINES`] without a reason in its
//! opening comment, no function over [`MAX_FN_LINES`], no `impl` block over
//! [`MAX_IMPL_LINES`], no `Result<_, String>`, no import circle between sibling modules at any
//! level (inside a folder as well as between folders), and `src/redis/`'s own `# Layout` list
//! true. (Every `pub` item documented is the compiler's:
//! `#![warn(missing_docs)]` in `lib.rs`, made an error by clippy's `-D warnings`.)
//!
//! The reading relies on rustfmt's layout (`cargo fmt --check` runs first in CI): an item's
//! closing brace sits alone on a line at the item's indentation. An import is a `crate::name`
//! path outside a comment; `use crate::{a, b}` is refused so that every import names its module.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Over this many lines, a file's opening comment says why (a line starting `Why so long:`).
const MAX_FILE_LINES: usize = 600;
/// The longest function, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 50;
/// The longest `impl` block, from its `impl` line to its closing brace.
const MAX_IMPL_LINES: usize = 300;
/// What an opening comment says to keep a long file whole.
const LONG_FILE_REASON: &str = "Why so long:";

/// One source file: its path under `src/`, its top-level module, its lines.
struct Source {
    path: PathBuf,
    module: String,
    lines: Vec<String>,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every file of the library (not `lib.rs` and `main.rs`, which are the crate's roots).
fn sources() -> Vec<Source> {
    let src = src_dir();
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(&src).unwrap().to_path_buf();
            let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
            let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
            let text = fs::read_to_string(&path).unwrap();
            let lines = text.lines().map(str::to_owned).collect();
            (module != "lib" && module != "main").then_some(Source {
                path: rel,
                module,
                lines,
            })
        })
        .collect()
}

/// The modules `lib.rs`'s `# Layout` list names, top to bottom (`- [`name`]` entries).
fn layout() -> Vec<String> {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    lib.lines()
        .map(str::trim_start)
        .skip_while(|l| l.trim() != "//! # Layout")
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//! - [`"))
        .filter_map(|l| l.split_once("`]").map(|(name, _)| name.to_owned()))
        .collect()
}

/// The modules `lib.rs` declares: the public `api` and the crate-private rest (not the hidden
/// `unstable { .. }` that re-exports them).
fn declared() -> Vec<String> {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| {
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .filter(|l| l.ends_with(';'))
        .map(|l| l.trim_end_matches(';').to_owned())
        .collect()
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with("//")
}

/// The top-level modules a line's code names as `crate::name`.
fn imports(line: &str) -> Vec<String> {
    line.match_indices("crate::")
        .filter(|(i, _)| !line[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, m)| {
            line[i + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

fn report(what: &str, found: &[String]) {
    assert!(found.is_empty(), "{what}:\n  {}", found.join("\n  "));
}

#[test]
fn the_layout_names_every_module_and_only_those() {
    let listed = layout();
    let declared = declared();
    let mut found = Vec::new();
    for name in &listed {
        let exists = src_dir().join(format!("{name}.rs")).is_file()
            || src_dir().join(name).join("mod.rs").is_file();
        if !declared.contains(name) || !exists {
            found.push(format!(
                "`{name}` is in the layout but not a module of src/"
            ));
        }
    }
    for name in declared.iter().filter(|d| !listed.contains(d)) {
        found.push(format!(
            "`{name}` is a module but the layout does not list it"
        ));
    }
    let mut seen = listed.clone();
    seen.dedup();
    if seen.len() != listed.len() {
        found.push("a module is listed twice".to_owned());
    }
    report("lib.rs's # Layout does not match src/", &found);
}

#[test]
fn imports_point_down_the_layout() {
    let order: BTreeMap<String, usize> = layout()
        .into_iter()
        .enumerate()
        .map(|(i, name)| (name, i))
        .collect();
    let mut found = Vec::new();
    for source in sources() {
        let Some(&place) = order.get(&source.module) else {
            found.push(format!(
                "{}: module not in the layout",
                source.path.display()
            ));
            continue;
        };
        for (n, line) in source.lines.iter().enumerate() {
            if is_comment(line) {
                continue;
            }
            if line.contains("crate::{") {
                found.push(format!(
                    "{}:{}: `crate::{{..}}`: one `use` per module",
                    source.path.display(),
                    n + 1
                ));
            }
            for target in imports(line) {
                match order.get(&target) {
                    Some(&t) if t < place => found.push(format!(
                        "{}:{}: `{}` imports `{target}`, listed above it",
                        source.path.display(),
                        n + 1,
                        source.module
                    )),
                    _ => {}
                }
            }
        }
    }
    report("arrows that point up the layout", &found);
}

#[test]
fn no_file_is_long_without_a_reason() {
    let mut found = Vec::new();
    for source in sources() {
        let opening: Vec<&String> = source
            .lines
            .iter()
            .take_while(|l| l.starts_with("//!"))
            .collect();
        let reason = opening.iter().any(|l| l.contains(LONG_FILE_REASON));
        if source.lines.len() > MAX_FILE_LINES && !reason {
            found.push(format!(
                "{}: {} lines, and no `{LONG_FILE_REASON}` in its opening comment",
                source.path.display(),
                source.lines.len()
            ));
        }
    }
    report("files over the length limit", &found);
}

/// Items that open a block at some indentation: `(line index, indentation, name)`.
fn items(
    lines: &[String],
    is_item: impl Fn(&str) -> Option<String>,
) -> Vec<(usize, usize, String)> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !is_comment(l))
        .filter_map(|(i, l)| {
            let indent = l.len() - l.trim_start().len();
            is_item(l.trim_start()).map(|name| (i, indent, name))
        })
        .collect()
}

/// How many lines the item opening at `start` spans: up to the first line that is only a
/// closing brace at its indentation. `None` for a declaration without a body (`fn f();`).
fn span(lines: &[String], start: usize, indent: usize) -> Option<usize> {
    let opens = lines[start..]
        .iter()
        .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'))?;
    let opening = lines[start + opens].trim_end();
    if opening.ends_with(';') || (opens == 0 && opening.ends_with('}')) {
        return (!opening.ends_with(';')).then_some(1);
    }
    let close = format!("{}}}", " ".repeat(indent));
    lines[start + opens..]
        .iter()
        .position(|l| l.trim_end() == close)
        .map(|end| opens + end + 1)
}

fn fn_name(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "fn")?;
    let before_ok = words[..at].iter().all(|w| {
        w.starts_with("pub") || ["async", "const", "unsafe", "extern", "\"C\""].contains(w)
    });
    let name = words.get(at + 1)?;
    before_ok.then(|| name.split(['(', '<']).next().unwrap_or(name).to_owned())
}

fn impl_name(line: &str) -> Option<String> {
    (line.starts_with("impl ") || line.starts_with("impl<"))
        .then(|| line.trim_end_matches(" {").to_owned())
}

fn too_long(limit: usize, is_item: impl Fn(&str) -> Option<String> + Copy) -> Vec<String> {
    let mut found = Vec::new();
    for source in sources() {
        for (start, indent, name) in items(&source.lines, is_item) {
            match span(&source.lines, start, indent) {
                Some(n) if n > limit => found.push(format!(
                    "{}:{}: `{name}` is {n} lines",
                    source.path.display(),
                    start + 1
                )),
                Some(_) => {}
                None => {
                    let line = &source.lines[start];
                    if !line.trim_end().ends_with(';') && line.contains('{') {
                        found.push(format!(
                            "{}:{}: `{name}`: no closing brace found",
                            source.path.display(),
                            start + 1
                        ));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn no_function_over_fifty_lines() {
    report("functions over the limit", &too_long(MAX_FN_LINES, fn_name));
}

#[test]
fn no_impl_block_over_three_hundred_lines() {
    report(
        "impl blocks over the limit",
        &too_long(MAX_IMPL_LINES, impl_name),
    );
}

/// `Result<T, String>`: an error callers cannot branch on, with no cause kept.
fn string_error(line: &str) -> bool {
    line.match_indices("Result<").any(|(i, m)| {
        let mut depth = 1;
        let mut last_comma = None;
        for (j, c) in line[i + m.len()..].char_indices() {
            match c {
                '<' | '(' => depth += 1,
                '>' | ')' if depth == 1 => {
                    let rest = &line[i + m.len()..i + m.len() + j];
                    return last_comma.is_some_and(|k: usize| rest[k + 1..].trim() == "String");
                }
                '>' | ')' => depth -= 1,
                ',' if depth == 1 => last_comma = Some(j),
                _ => {}
            }
        }
        false
    })
}

#[test]
fn no_result_with_a_string_error() {
    let mut found = Vec::new();
    for source in sources() {
        for (n, line) in source.lines.iter().enumerate() {
            if !is_comment(line) && string_error(line) {
                found.push(format!(
                    "{}:{}: {}",
                    source.path.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    report("`Result<_, String>`", &found);
}

#[test]
fn the_readers_see_what_they_are_meant_to() {
    // The readers above, on lines made to trip them: a check that reads nothing passes always.
    assert!(string_error("fn f() -> Result<Vec<u8>, String> {"));
    assert!(!string_error("fn f() -> Result<String, Error> {"));
    assert!(!string_error("fn f() -> io::Result<String> {"));
    assert_eq!(imports("use crate::time::schedule::Slot;"), ["time"]);
    assert!(imports("use slotcron::crate_x;").is_empty());
    assert_eq!(
        fn_name("pub(crate) async fn run(x: u8) {").as_deref(),
        Some("run")
    );
    assert_eq!(fn_name("let f = |x| x;"), None);
    let body: Vec<String> = [
        "    fn f(",
        "        a: u8,",
        "    ) -> u8 {",
        "        a",
        "    }",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(span(&body, 0, 4), Some(5));
    let decl = vec!["    fn f(&self) -> u8;".to_owned()];
    assert_eq!(span(&decl, 0, 4), None);
}

/// Reads of the wall clock, the OS monotonic clock and unseeded randomness: in `src/` they go
/// through the seams (`time::schedule`'s `Clock`, tokio's `Instant`, `crate::seed`), so a
/// simulation (tests/sim/) replaces them and a seed replays its run.
const UNSEAMED: [&str; 8] = [
    "Utc::now()",
    "SystemTime::now",
    "Local::now",
    "std::time::Instant",
    "Instant}",
    "rand::rng",
    "thread_rng",
    "rand::random",
];

/// Files allowed a direct read, each with its reason: the seams themselves, and code a
/// simulated fleet never reaches (operator commands, the status page, process metrics) or
/// reaches only for a value that decides nothing (a timestamp in a signature).
const SEAM_ALLOWED: [(&str, &str); 17] = [
    ("time/schedule.rs", "the wall-clock seam: SystemClock"),
    (
        "time/fleet_clock.rs",
        "the test clock FrozenOffset, over the system clock",
    ),
    ("seed.rs", "the randomness seam"),
    ("metrics.rs", "process start time, a gauge"),
    ("metrics/process.rs", "process CPU and start time, gauges"),
    ("ops/status/mod.rs", "the status page's `now`"),
    ("ops/status/page.rs", "the status page's `now`"),
    ("cli/check.rs", "`slotcron check`, an operator command"),
    ("cli/history.rs", "`slotcron history`, an operator command"),
    ("cli/shared.rs", "operator commands' times"),
    ("cli/trigger.rs", "`slotcron trigger`'s request id"),
    (
        "config/calendars.rs",
        "the load-time warning of a calendar that ends",
    ),
    (
        "api/tcs.rs",
        "tokio-cron-scheduler fires on the wall clock itself",
    ),
    ("action/dingtalk.rs", "the signature's timestamp"),
    ("action/feishu.rs", "the signature's timestamp"),
    ("action/template.rs", "the check-time render of a template"),
    (
        "fleet/control.rs",
        "a pause stamped when no node told the time (to be routed, issue 30)",
    ),
];

/// Whether line `n` of `lines` opens a `select!` that is not `biased;`: an unbiased select
/// draws its branch order from tokio's unseeded generator.
fn unbiased_select(lines: &[String], n: usize) -> bool {
    lines[n].trim_end().ends_with("select! {")
        && lines.get(n + 1).is_none_or(|next| next.trim() != "biased;")
}

#[test]
fn no_clock_or_randomness_outside_the_seams() {
    let mut found = Vec::new();
    for source in sources() {
        let path = source.path.display().to_string();
        let allowed = SEAM_ALLOWED.iter().any(|(file, _)| *file == path);
        let end = (source.lines.windows(2))
            .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].starts_with("mod tests"))
            .unwrap_or(source.lines.len());
        for n in 0..end {
            let line = &source.lines[n];
            let direct = !allowed && UNSEAMED.iter().any(|p| line.contains(p));
            if !is_comment(line) && (direct || unbiased_select(&source.lines, n)) {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    report(
        "direct reads of a clock or of randomness, or an unbiased select!, outside the seams",
        &found,
    );
}

// ---- Import circles at every level --------------------------------------------------------

/// One import: the module that makes it, the module it names, and the line that says so.
struct Import {
    from: Vec<String>,
    to: Vec<String>,
    at: String,
}

/// A file's module path: `src/redis/pool.rs` is `redis::pool`, `src/redis/mod.rs` is `redis`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// `prefix{a::X, b::{Y, Z}, self}` as the paths it names: `prefix a::X`, `prefix b::Y`, ….
fn expand(prefix: &str, path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![format!("{prefix}{path}")];
    };
    let (head, inner) = (
        &path[..open],
        &path[open + 1..path.rfind('}').unwrap_or(path.len())],
    );
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let head = format!("{prefix}{head}");
    (items.into_iter().map(str::trim).filter(|i| !i.is_empty()))
        .flat_map(|item| match item {
            "self" => vec![head.trim_end_matches("::").to_owned()],
            _ => expand(&head, item),
        })
        .collect()
}

/// The `crate::`, `super::` and `self::` paths of one statement or line, as absolute module
/// paths from `module` (items at their ends included; [`resolve`] finds the module).
fn paths_of(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let text = text
        .trim_start_matches("pub(crate) ")
        .trim_start_matches("pub(super) ");
    let text = text.trim_start_matches("pub ");
    let named: Vec<String> = match text.strip_prefix("use ") {
        Some(tree) => expand("", tree.trim_end_matches(';').trim()),
        None => (text
            .match_indices("crate::")
            .chain(text.match_indices("super::")))
        .chain(text.match_indices("self::"))
        .filter(|(i, _)| {
            !text[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
        })
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || "_:".contains(*c))
                .collect()
        })
        .collect(),
    };
    named
        .iter()
        .filter_map(|path| {
            let mut segments = path.split("::").filter(|s| !s.is_empty());
            let mut at: Vec<String> = match segments.next()? {
                "crate" => Vec::new(),
                "self" => module.to_vec(),
                "super" => module[..module.len().saturating_sub(1)].to_vec(),
                _ => return None,
            };
            for s in segments {
                match s {
                    "super" => drop(at.pop()),
                    "*" => {}
                    s => at.push(s.to_owned()),
                }
            }
            Some(at)
        })
        .collect()
}

/// The module a path names: its longest prefix that is a module, then through the `pub use`
/// re-exports of that module (`super::Nodes` in `redis/` is `redis::pool`).
fn resolve(path: &[String], modules: &BTreeMap<Vec<String>, Vec<String>>) -> Vec<String> {
    let mut end = path.len();
    while end > 0 && !modules.contains_key(&path[..end]) {
        end -= 1;
    }
    let module = path[..end].to_vec();
    let Some(item) = path.get(end) else {
        return module;
    };
    let exported_by = modules[&module].iter().find_map(|line| {
        let tree = line.trim().strip_prefix("pub use ")?;
        let named = expand("", tree.trim_end_matches(';'));
        let child = named
            .iter()
            .find(|p| p.rsplit("::").next() == Some(item.as_str()))?;
        let first = child.split("::").next()?.to_owned();
        let mut to = module.clone();
        to.push(first);
        modules.contains_key(&to).then_some(to)
    });
    exported_by.unwrap_or(module)
}

/// Every import between two modules of `src/` that is neither one's ancestor, from code
/// outside `#[cfg(test)]` (a file's tests sit at its end, after that line at column 0). A
/// `use` statement is read whole, across the lines rustfmt wraps it over.
fn module_imports() -> Vec<Import> {
    let src = src_dir();
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(PathBuf, Vec<String>)> = paths
        .iter()
        .filter(|p| !p.ends_with("main.rs"))
        .map(|p| {
            let rel = p.strip_prefix(&src).unwrap().to_path_buf();
            let text = fs::read_to_string(p).unwrap();
            let code = text.lines().take_while(|l| *l != "#[cfg(test)]");
            (rel, code.map(str::to_owned).collect())
        })
        .collect();
    let mut modules: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for (rel, lines) in &files {
        let path = module_path(rel);
        let path = if path == ["lib"] { Vec::new() } else { path };
        modules.insert(path, lines.clone());
    }
    let mut found = Vec::new();
    for (rel, lines) in &files {
        let from = module_path(rel);
        let mut n = 0;
        while n < lines.len() {
            let first = n;
            let mut text = lines[n].trim().to_owned();
            let is_use = text.contains("use ") && !text.ends_with(';') && text.ends_with('{');
            while is_use && !text.ends_with(';') && n + 1 < lines.len() {
                n += 1;
                text.push_str(lines[n].trim());
            }
            n += 1;
            if is_comment(&lines[first]) {
                continue;
            }
            for path in paths_of(&text, &from) {
                let to = resolve(&path, &modules);
                found.push(Import {
                    from: from.clone(),
                    to,
                    at: format!("{}:{}: {}", rel.display(), first + 1, lines[first].trim()),
                });
            }
        }
    }
    found
}

/// The sibling modules an import joins: under their deepest common folder, the child that
/// holds each end (`redis::node` → `redis::cluster::Conn` joins `redis::node` and
/// `redis::cluster`); `None` when one end holds the other (a module and its own parts).
fn siblings(import: &Import) -> Option<(String, String)> {
    let common = (import.from.iter().zip(&import.to))
        .take_while(|(a, b)| a == b)
        .count();
    let (a, b) = (import.from.get(common)?, import.to.get(common)?);
    let folder = &import.from[..common];
    let name = |leaf: &String| {
        folder
            .iter()
            .chain([leaf])
            .cloned()
            .collect::<Vec<_>>()
            .join("::")
    };
    Some((name(a), name(b)))
}

/// Tarjan's strongly connected components of `edges` with more than one member: the circles.
fn circles(edges: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, Vec<String>>,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, (i, i));
        s.stack.push(v);
        for w in s.edges.get(v).into_iter().flatten() {
            match s.index.get(w.as_str()).copied() {
                None => {
                    visit(s, w);
                    let low = s.index[v].1.min(s.index[w.as_str()].1);
                    s.index.get_mut(v).unwrap().1 = low;
                }
                Some((wi, _)) if s.stack.contains(&w.as_str()) => {
                    s.index.get_mut(v).unwrap().1 = s.index[v].1.min(wi);
                }
                Some(_) => {}
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let at = s.stack.iter().rposition(|x| *x == v).unwrap();
            let mut component: Vec<String> = s.stack.drain(at..).map(str::to_owned).collect();
            component.sort();
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

#[test]
fn no_import_circle_at_any_level() {
    let imports = module_imports();
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (a, b) in imports.iter().filter_map(siblings) {
        edges.entry(a).or_default().push(b);
    }
    let mut found = Vec::new();
    for circle in circles(&edges) {
        let lines = imports.iter().filter(|i| {
            siblings(i).is_some_and(|(a, b)| circle.contains(&a) && circle.contains(&b))
        });
        let mut lines: Vec<String> = lines.map(|i| format!("    {}", i.at)).collect();
        lines.dedup();
        found.push(format!(
            "{{{}}}, by:\n{}",
            circle.join(", "),
            lines.join("\n")
        ));
    }
    report("import circles between sibling modules", &found);
}

#[test]
fn the_circle_check_reads_imports_as_the_compiler_does() {
    let from = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    let redis_node = from("redis::node");
    assert_eq!(
        paths_of("use super::conn::{Conn, Waits};", &redis_node),
        [from("redis::conn::Conn"), from("redis::conn::Waits")]
    );
    assert_eq!(
        paths_of("let b = x + super::sentinel::RESOLVE_WAIT;", &redis_node),
        [from("redis::sentinel::RESOLVE_WAIT")]
    );
    assert_eq!(
        paths_of(
            "use crate::redis::{Nodes, pool::Replies};",
            &from("fleet::x")
        ),
        [from("redis::Nodes"), from("redis::pool::Replies")]
    );
    let mut modules = BTreeMap::new();
    modules.insert(
        from("redis"),
        vec!["pub use pool::{quorum, Nodes};".to_owned()],
    );
    modules.insert(from("redis::pool"), Vec::new());
    assert_eq!(
        resolve(&from("redis::Nodes"), &modules),
        from("redis::pool")
    );
    let import = |f: &str, t: &str| Import {
        from: from(f),
        to: from(t),
        at: String::new(),
    };
    let joined = siblings(&import("redis::node", "redis::cluster"));
    assert_eq!(
        joined,
        Some(("redis::node".into(), "redis::cluster".into()))
    );
    assert_eq!(siblings(&import("redis::pool", "redis")), None);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_owned(), vec!["b".to_owned()]);
    edges.insert("b".to_owned(), vec!["c".to_owned()]);
    edges.insert("c".to_owned(), vec!["a".to_owned(), "d".to_owned()]);
    assert_eq!(circles(&edges), [["a", "b", "c"]]);
}

/// A folder's `# Layout` list in its module file (`- [`name`]` or `- `name`` entries), top to
/// bottom, as sibling names (`redis::pool`); `None` for a folder without one.
fn folder_layout(folder: &str) -> Option<Vec<String>> {
    let file = src_dir().join(folder).join("mod.rs");
    let text = fs::read_to_string(file).ok()?;
    let listed: Vec<String> = (text.lines())
        .skip_while(|l| l.trim() != "//! # Layout")
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//! - "))
        .filter_map(|l| l.trim_start_matches('[').strip_prefix('`')?.split_once('`'))
        .map(|(name, _)| format!("{folder}::{name}"))
        .collect();
    (!listed.is_empty()).then_some(listed)
}

#[test]
fn a_folders_layout_lists_its_files_and_imports_point_down_it() {
    let mut found = Vec::new();
    for folder in ["redis"] {
        let Some(order) = folder_layout(folder) else {
            found.push(format!("src/{folder}/mod.rs has no # Layout list"));
            continue;
        };
        let mut files = Vec::new();
        rust_files(&src_dir().join(folder), &mut files);
        for file in files.iter().filter(|f| !f.ends_with("mod.rs")) {
            let name = format!("{folder}::{}", file.file_stem().unwrap().to_string_lossy());
            if !order.contains(&name) {
                found.push(format!("{name} is not in src/{folder}/mod.rs's # Layout"));
            }
        }
        let place = |m: &str| order.iter().position(|o| o == m);
        for import in module_imports() {
            let Some((a, b)) = siblings(&import) else {
                continue;
            };
            if let (Some(pa), Some(pb)) = (place(&a), place(&b))
                && pb < pa
            {
                found.push(format!("{}: imports {b}, listed above {a}", import.at));
            }
        }
    }
    report("folder layouts", &found);
}
