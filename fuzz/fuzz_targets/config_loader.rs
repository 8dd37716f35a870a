//! Fuzzes the jobs.toml loader with arbitrary bytes: it must return Ok or Err, never panic.
#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env: HashMap<String, String> = HashMap::from([(
        "WECOM_WEBHOOK".to_owned(),
        "https://x/send?key=k".to_owned(),
    )]);
    let _ = slotcron::unstable::config::parse(Path::new("fuzz.toml"), text, &env);
});
