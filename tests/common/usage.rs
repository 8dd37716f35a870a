//! A process's CPU time and peak RSS from `/proc`: the benchmarks' replica and node costs. No
//! import of the harness, so `benches/peers.rs` includes this file as it is.

/// CPU seconds (utime + stime) and peak RSS in KiB (VmHWM, or VmRSS if larger) of `pid`;
/// zeros once it has exited.
pub fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu = (ticks(11) + ticks(12)) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (cpu, kib("VmHWM:").max(kib("VmRSS:")))
}
