//! "Did you mean": the word a slip most likely meant, among the keys, sections or values a
//! place takes; and serde's messages said the way a person fixes them (`invalid type: integer
//! `30`, expected a duration` becomes a duration "such as \"30s\"").

/// The candidate closest to `word`, if close enough to be a slip (a typo, two letters swapped,
/// one missing or doubled, another case): at most a third of the word's letters apart.
pub(super) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_lowercase();
    let most = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (distance(&word, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance: edits, with a swap of two neighbours counting as one.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows: Vec<Vec<usize>> = (0..=a.len())
        .map(|i| (0..=b.len()).map(|j| if i == 0 { j } else { i }).collect())
        .collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// The words in backquotes of serde's "expected one of `a`, `b`" (or "expected `a` or `b`").
fn quoted_words(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// serde's message for a key or value it refused, said with the fix: the known words beside an
/// unknown one (with `extra` keys serde does not see, the `NAME_file` forms), the closest
/// first; a value of the wrong type with an example of the right one.
pub(super) fn plain_serde_message(message: &str, extra: &[String]) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        return unknown_word(rest, "field", extra);
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        return unknown_word(rest, "value", &[]);
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or_default();
        return format!("missing field {name:?}: add {name} = ...");
    }
    if let Some(found) = message
        .strip_prefix("invalid type: ")
        .and_then(|m| m.strip_suffix(", expected a duration"))
    {
        return format!(
            "invalid type: {found}; write a duration in quotes, such as \"30s\", \"5m\" or \"1h\""
        );
    }
    if let Some(value) = message
        .strip_prefix("invalid value: string ")
        .and_then(|m| m.strip_suffix(", expected a duration"))
    {
        return format!(
            "{value} is not a duration: write a number and a unit, such as \"30s\", \"5m\" or \"1h\""
        );
    }
    if let Some((found, expected)) = message
        .strip_prefix("invalid type: ")
        .and_then(|m| m.split_once(", expected "))
    {
        return format!("invalid type: {found}, expected {}", plain_type(expected));
    }
    if is_duration_error(message) {
        return format!(
            "not a duration ({message}): write a number and a unit in quotes, such as \"30s\", \"5m\" or \"1h\""
        );
    }
    message.to_owned()
}

/// serde's name of a type, as it is written in TOML.
fn plain_type(expected: &str) -> String {
    let plain = match expected {
        "a string" => "a string in quotes",
        "a sequence" => "a list in brackets: [\"...\", \"...\"]",
        "a boolean" => "true or false",
        "a map" => "a table: { key = \"value\" }",
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number (0 or more), not in quotes",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number, not in quotes",
        other => other,
    };
    plain.to_owned()
}

/// humantime's refusals of a duration string (serde passes them on as they are).
fn is_duration_error(message: &str) -> bool {
    [
        "expected number",
        "unknown time unit",
        "time unit needed",
        "invalid character",
        "number is too large",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// "unknown field `x`, expected one of ..." said as `unknown field "x"; did you mean "y"?`, or
/// with the list of what the place takes when no word is close.
fn unknown_word(rest: &str, what: &str, extra: &[String]) -> String {
    let (word, expected) = rest.split_once('`').unwrap_or((rest, ""));
    let known = quoted_words(expected);
    let every = known
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str));
    match closest(word, every) {
        Some(near) => format!("unknown {what} {word:?}; did you mean {near:?}?"),
        None if known.is_empty() => format!("unknown {what} {word:?}: this table takes none"),
        None => format!(
            "unknown {what} {word:?} (expected one of: {}{})",
            known.join(", "),
            file_forms_note(extra)
        ),
    }
}

/// The `NAME_file` forms in a list of known keys: said once, with the first as an example.
fn file_forms_note(extra: &[String]) -> String {
    match extra.first() {
        Some(first) => format!("; each also as NAME_file, such as {first}"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slips_find_their_word_and_strangers_none() {
        let keys = ["timeout", "timezone", "schedule", "catch_up"];
        assert_eq!(closest("timout", keys), Some("timeout"));
        assert_eq!(closest("timezon", keys), Some("timezone"));
        assert_eq!(closest("shcedule", keys), Some("schedule"));
        assert_eq!(closest("Schedule", keys), Some("schedule"));
        assert_eq!(closest("colour", keys), None);
        assert_eq!(closest("x", keys), None);
    }

    #[test]
    fn serde_messages_say_the_fix() {
        let m = plain_serde_message(
            "unknown field `timout`, expected one of `name`, `timeout`",
            &[],
        );
        assert_eq!(m, "unknown field \"timout\"; did you mean \"timeout\"?");
        let m = plain_serde_message(
            "unknown field `webhok_file`, expected `webhook` or `content`",
            &["webhook_file".to_owned()],
        );
        assert_eq!(
            m,
            "unknown field \"webhok_file\"; did you mean \"webhook_file\"?"
        );
        let m = plain_serde_message("unknown variant `alow`, expected `skip` or `allow`", &[]);
        assert_eq!(m, "unknown value \"alow\"; did you mean \"allow\"?");
        let m = plain_serde_message("invalid type: integer `30`, expected a duration", &[]);
        assert!(m.contains("\"30s\""), "{m}");
    }
}
