//! Where each error is in the file's text. The checks work on plain TOML values (spans would
//! follow every value through `${VAR}` expansion and `NAME_file` reading); once they are done,
//! the file is read again with its spans (`toml::de::DeTable`) and each error's section and
//! field are looked up there: an unknown key points at the key, anything else at the value, a
//! missing key at its table's header.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::{ConfigError, Location, Section, SourceLine};
use crate::secret::Scrubber;

/// The fields whose values are secrets: their value is masked on the line shown.
const SECRET_FIELDS: [&str; 7] = [
    "webhook",
    "secret",
    "token",
    "url",
    "headers",
    "primary_password",
    "nodes",
];

/// The errors of one job: the range of the loader's errors recorded while checking the job at
/// `index` of the `[[job]]` array (names may repeat or be missing; the index cannot).
#[derive(Debug, Clone)]
pub(super) struct JobErrors {
    /// The errors, by position in the loader's list.
    pub errors: Range<usize>,
    /// The job's position in the file.
    pub index: usize,
}

/// Fills in each error's [`SourceLine`] from `text`; a secret on a shown line is masked.
pub(super) fn locate(
    text: &str,
    errors: &mut [ConfigError],
    jobs: &[JobErrors],
    scrubber: &Scrubber,
) {
    // A file with a syntax error is still read as far as it goes, for the line under it.
    let (root, _) = DeTable::parse_recoverable(text);
    for (i, e) in errors.iter_mut().enumerate() {
        let job = jobs.iter().find(|j| j.errors.contains(&i)).map(|j| j.index);
        let found = match &e.location {
            Location::Line { line, column, .. } => {
                offset_of(text, *line, *column).map(|at| Found {
                    span: at..at,
                    secret: false,
                })
            }
            Location::Field { section, field } => {
                let unknown_key = ["unknown field", "unknown section"]
                    .iter()
                    .any(|m| e.message.starts_with(m));
                section_of(&root, section, job).and_then(|t| field_in(t, field, unknown_key))
            }
            Location::File => None,
        };
        e.source = found.map(|f| source_line(text, f, scrubber));
    }
}

/// A place in the text, and whether the value there is a secret.
struct Found {
    span: Range<usize>,
    secret: bool,
}

/// The table a section stands for, with its span.
fn section_of<'a>(
    root: &'a Spanned<DeTable<'a>>,
    section: &Section,
    job: Option<usize>,
) -> Option<(&'a DeTable<'a>, Range<usize>)> {
    let top = (root.get_ref(), root.span());
    let child = |key: &str| table_at(top.0.get(key)?);
    match section {
        Section::Top => Some(top),
        Section::Scheduler => child("scheduler"),
        Section::Redis => child("redis"),
        Section::Http => child("http"),
        Section::Telemetry => child("telemetry"),
        Section::Calendar(name) => {
            table_at(table_at(top.0.get("calendar")?)?.0.get(name.as_str())?)
        }
        Section::Alert(name) => table_at(table_at(top.0.get("alert")?)?.0.get(name.as_str())?),
        Section::Job(name) => {
            let jobs = top.0.get("job")?.get_ref().as_array()?;
            let by_name = || {
                jobs.iter().find(|j| {
                    j.get_ref().get("name").and_then(|n| n.get_ref().as_str()) == Some(name)
                })
            };
            table_at(job.and_then(|i| jobs.get(i)).or_else(by_name)?)
        }
    }
}

fn table_at<'a>(value: &'a Spanned<DeValue<'a>>) -> Option<(&'a DeTable<'a>, Range<usize>)> {
    Some((value.get_ref().as_table()?, value.span()))
}

/// One step of a dotted field (`action.headers.X`, `nodes[1]`).
enum Step<'f> {
    Key(&'f str),
    Index(usize),
}

fn steps(field: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in field.split('.') {
        let (key, indices) = part.split_once('[').unwrap_or((part, ""));
        out.push(Step::Key(key));
        out.extend(
            indices
                .split('[')
                .filter_map(|i| i.trim_end_matches(']').parse().ok())
                .map(Step::Index),
        );
    }
    out
}

/// The span of `field` in `table`: its key's for an unknown key, else its value's (a missing
/// key: the table's). A field read from `NAME_file` is found under that key.
fn field_in(
    (table, table_span): (&DeTable<'_>, Range<usize>),
    field: &str,
    unknown_key: bool,
) -> Option<Found> {
    let mut value: Option<&Spanned<DeValue<'_>>> = None;
    let mut key_span = None;
    let mut secret = false;
    for step in steps(field) {
        let next = match step {
            Step::Key("(table)") => break,
            Step::Key(key) => {
                let here = match value {
                    Some(v) => v.get_ref().as_table(),
                    None => Some(table),
                };
                here.and_then(|t| {
                    t.get_key_value(key)
                        .or_else(|| t.get_key_value(format!("{key}_file").as_str()))
                })
                .map(|(k, v)| {
                    key_span = Some(k.span());
                    secret |= SECRET_FIELDS.contains(&key);
                    v
                })
            }
            Step::Index(i) => value.and_then(|v| v.get_ref().as_array()?.get(i)),
        };
        match next {
            Some(v) => value = Some(v),
            None => break,
        }
    }
    let span = match (value, key_span) {
        (Some(_), Some(key)) if unknown_key => key,
        (Some(v), _) => v.span(),
        // A table's span is its `[header]` line: where a missing key belongs.
        (None, _) => table_span,
    };
    Some(Found { span, secret })
}

/// The byte offset of a line and column (both from 1, the column in characters).
fn offset_of(text: &str, line: usize, column: usize) -> Option<usize> {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let rest = text.get(start..)?;
    let within = rest
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(rest.len(), |(i, _)| i);
    Some(start + within)
}

/// Longest text the caret underlines, and longest rest of the line shown after it (a
/// 2048-byte template on one line would fill the terminal).
const MAX_MARKED: usize = 60;
const MAX_AFTER: usize = 40;

/// The line holding `found`, its position, and the caret's width (to the span's end or the
/// line's, whichever comes first); a secret value masked, and known secrets scrubbed.
fn source_line(text: &str, found: Found, scrubber: &Scrubber) -> SourceLine {
    let start = text.floor_char_boundary(found.span.start.min(text.len()));
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let end = text.floor_char_boundary(found.span.end.clamp(start, line_end));
    let raw_before = &text[line_start..start];
    let marked = match found.secret {
        true => mask(&text[start..end]),
        false => text[start..end].to_owned(),
    };
    let shown = |part: &str, most: usize| cut(&redact_urls(&scrubber.scrub(part)), most);
    let before = redact_urls(&scrubber.scrub(raw_before));
    let marked = shown(&marked, MAX_MARKED);
    let after = shown(text[end..line_end].trim_end_matches('\r'), MAX_AFTER);
    SourceLine {
        line: text[..line_start].matches('\n').count() + 1,
        column: raw_before.chars().count() + 1,
        caret: before.chars().count() + 1,
        width: marked.chars().count().max(1),
        text: format!("{before}{marked}{after}"),
    }
}

/// `text`, cut to `most` characters and an ellipsis.
fn cut(text: &str, most: usize) -> String {
    match text.char_indices().nth(most) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A secret value as shown: each string in it a URL without its secret parts, a `${VAR}` as
/// written (the name is no secret), or `***`.
fn mask(value: &str) -> String {
    map_strings(value, |inner| {
        let placeholder = inner.starts_with("${") && inner.ends_with('}') && !inner.contains(":-");
        match redact_url(inner) {
            Some(url) => url,
            None if placeholder => inner.to_owned(),
            None => "***".to_owned(),
        }
    })
}

/// Every URL in a string of `text` without its password, query values and token-like path
/// parts.
fn redact_urls(text: &str) -> String {
    map_strings(text, |inner| {
        redact_url(inner).unwrap_or_else(|| inner.to_owned())
    })
}

/// `text` if it is a URL: without its secret parts, or as written when it has none.
fn redact_url(text: &str) -> Option<String> {
    let url = url::Url::parse(text)
        .ok()
        .filter(|_| text.contains("://"))?;
    let redacted = crate::secret::redacted(&url);
    Some(match redacted == url {
        true => text.to_owned(),
        false => redacted.to_string(),
    })
}

/// `text` with the inside of each TOML string (`"..."`, `'...'`) replaced by `f` of it; an
/// unterminated one runs to the end.
fn map_strings(text: &str, f: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find(['"', '\'']) {
        let quote = rest[open..].chars().next().unwrap_or('"');
        out.push_str(&rest[..=open]);
        let inside = &rest[open + 1..];
        let close = string_end(inside, quote).unwrap_or(inside.len());
        out.push_str(&f(&inside[..close]));
        rest = &inside[close..];
        if let Some(end) = rest.strip_prefix(quote) {
            out.push(quote);
            rest = end;
        }
    }
    out.push_str(rest);
    out
}

/// Where a string opened by `quote` ends in `inside` (a `\"` in a basic string does not end it).
fn string_end(inside: &str, quote: char) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in inside.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quote == '"' => escaped = true,
            c if c == quote => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_found_under_its_job_by_index() {
        let text = "[[job]]\nname = \"a\"\n[[job]]\nname = \"a\"\ntimout = \"3s\"\n";
        let mut errors = vec![ConfigError::field(
            Section::Job("a".into()),
            "timout",
            "unknown field \"timout\"",
        )];
        let jobs = [JobErrors {
            errors: 0..1,
            index: 1,
        }];
        locate(text, &mut errors, &jobs, &Scrubber::default());
        let source = errors[0].source.clone().unwrap();
        assert_eq!((source.line, source.column, source.width), (5, 1, 6));
        assert_eq!(source.text, "timout = \"3s\"");
    }

    #[test]
    fn strings_are_masked_one_by_one() {
        assert_eq!(
            mask(r#"{ Authorization = "Bearer x\"y", X = '${V}' }"#),
            r#"{ Authorization = "***", X = '${V}' }"#
        );
        assert_eq!(
            redact_urls(r#"nodes = ["redis://:pw@h:1", "redis://h:2"]"#),
            r#"nodes = ["redis://:***@h:1", "redis://h:2"]"#
        );
        assert_eq!(cut("abcdef", 3), "abc…");
    }

    #[test]
    fn a_secret_value_is_masked_on_the_line() {
        let text = "[redis]\nnodes = [\"ftp://:pw1234@h:1\"]\nretry_count = \"x\"\n";
        let mut errors = vec![ConfigError::field(
            Section::Redis,
            "nodes[0]",
            "not a Redis URL",
        )];
        locate(text, &mut errors, &[], &Scrubber::default());
        let source = errors[0].source.clone().unwrap();
        assert!(!source.text.contains("pw1234"), "{}", source.text);
        assert_eq!(source.line, 2);
    }
}
