//! Fuzzes the duration fields of jobs.toml: arbitrary text (every unit, sign, overflow and typo)
//! placed in one of the fields. The loader must never panic; a config it accepts holds every
//! duration inside its documented range; and a plain value is accepted exactly when it parses
//! inside the field's range.
#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use slotcron::unstable::config::Config;
use slotcron::unstable::config::durations::{self, DurationRange};

const JOB: &str = "[[job]]\nname = \"j\"\nschedule = \"* * * * *\"\n";
const ACTION: &str = "[job.action]\ntype = \"log\"\ncontent = \"x\"\n";
const NODE: &str = "[redis]\nnodes = [\"redis://127.0.0.1:6379\"]\n";

/// A file with `value` in field `which`, and the field's range (`None` for a rate's window,
/// whose text also takes names such as `min`).
fn place(which: u8, value: &str) -> (String, Option<DurationRange>) {
    let job = |line: String| format!("{JOB}{line}\n{ACTION}");
    match which % 6 {
        0 => (
            job(format!("timeout = \"{value}\"")),
            Some(durations::TIMEOUT),
        ),
        1 => (
            job(format!("catch_up = \"{value}\"")),
            Some(durations::CATCH_UP),
        ),
        2 => (
            format!("[scheduler]\nmax_clock_skew = \"{value}\"\n{JOB}{ACTION}"),
            Some(durations::MAX_CLOCK_SKEW),
        ),
        3 => (
            format!("{NODE}node_timeout = \"{value}\"\n{JOB}{ACTION}"),
            Some(durations::NODE_TIMEOUT),
        ),
        4 => (
            format!("{NODE}retry_delay = \"{value}\"\n{JOB}{ACTION}"),
            Some(durations::RETRY_DELAY),
        ),
        _ => (
            format!(
                "{JOB}[job.action]\ntype = \"http\"\nurl = \"https://x.example/h\"\nrate = \"1/{value}\"\n"
            ),
            None,
        ),
    }
}

/// Every duration of an accepted config lies in its range.
fn assert_in_ranges(config: &Config) {
    let s = &config.scheduler;
    assert!(durations::MAX_CLOCK_SKEW.contains(s.max_clock_skew));
    if let Some(redis) = &config.redis {
        assert!(durations::NODE_TIMEOUT.contains(redis.lock.node_timeout));
        assert!(durations::RETRY_DELAY.contains(redis.lock.retry_delay));
    }
    for job in &config.jobs {
        assert!(durations::TIMEOUT.contains(job.timeout));
        if let Some(catch_up) = job.catch_up {
            assert!(durations::CATCH_UP.contains(catch_up.window));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    let (text, range) = place(which, value);
    let env: HashMap<String, String> = HashMap::new();
    let result = slotcron::unstable::config::parse(Path::new("fuzz.toml"), &text, &env);
    if let Ok(config) = &result {
        assert_in_ranges(config);
    }
    // Text TOML keeps as is: accepted exactly when it is a duration inside the range.
    let plain = value
        .chars()
        .all(|c| (c.is_ascii_graphic() && c != '"' && c != '\\') || c == ' ');
    if let (Some(range), true) = (range, plain) {
        let inside = humantime::parse_duration(value).is_ok_and(|d| range.contains(d));
        assert_eq!(
            result.is_ok(),
            inside,
            "{value:?}: {:?}",
            result.err().map(|e| e.to_string())
        );
    }
});
