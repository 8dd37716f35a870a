//! Reading a command's arguments, and the error lines redis-server answers a bad one with
//! (byte for byte: redis-rs tells `NOSCRIPT`, `LOADING`, `WRONGTYPE` and syntax errors apart
//! by them, and slotcron looks for "syntax error").

use super::resp::Reply;

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const MIN_MAX_NOT_FLOAT: &str = "ERR min or max is not a float";
pub const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
pub const LOADING: &str = "LOADING Redis is loading the dataset in memory";
pub const INVALID_STREAM_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// `ERR wrong number of arguments for 'name' command` (`name` as the server spells it:
/// lowercase, `script|load` for a subcommand).
pub fn arity(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// `ERR unknown command 'NAME', with args beginning with: 'a' 'b' `.
pub fn unknown_command(argv: &[Vec<u8>]) -> Reply {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        lossy(&argv[0])
    );
    for arg in &argv[1..] {
        text.push_str(&format!("'{}' ", lossy(arg)));
    }
    Reply::error(text)
}

/// `ERR unknown subcommand 'x'. Try NAME HELP.`
pub fn unknown_subcommand(command: &str, sub: &[u8]) -> Reply {
    Reply::error(format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        lossy(sub)
    ))
}

/// A command or script the model does not cover: an error that names it, so a new command or
/// a changed script in slotcron fails the differential test instead of passing unmodelled.
pub fn unmodelled(what: &str) -> Reply {
    Reply::error(format!("ERR sim model: {what} is not modelled"))
}

pub fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether `arg` is `word`, in any case (options are case-insensitive).
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// A whole number as Redis reads one (`string2ll`: no sign `+`, no spaces, no leading zeros).
pub fn int(arg: &[u8]) -> Result<i64, Reply> {
    let text = std::str::from_utf8(arg).map_err(|_| Reply::error(NOT_INTEGER))?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text != "-0";
    match text.parse::<i64>() {
        Ok(n) if canonical => Ok(n),
        _ => Err(Reply::error(NOT_INTEGER)),
    }
}

/// A float as Redis reads a score (`inf`, `+inf`, `-inf` too); NaN is refused.
pub fn float(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    let value = match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ if text.trim() != text || text.is_empty() => return None,
        _ => text.parse::<f64>().ok()?,
    };
    (!value.is_nan()).then_some(value)
}
