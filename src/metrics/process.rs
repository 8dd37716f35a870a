//! The standard `process_*` metrics (the names every Prometheus client library exports), read
//! from `/proc/self` at scrape time: prometheus-client has no process collector of its own.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads the process's counters on each scrape; on a system without `/proc` it exports nothing.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of `/proc/self`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStats {
    /// CPU time, user and system.
    pub cpu_seconds: f64,
    /// Resident set size.
    pub resident_memory_bytes: f64,
    /// Virtual memory size.
    pub virtual_memory_bytes: f64,
    /// When the process started (unix time).
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The limit on them.
    pub max_fds: f64,
}

impl ProcessStats {
    /// This process now; `None` where `/proc` is missing or unreadable.
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_time = boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let mut stats = parse_stat(&stat, boot_time, clock_ticks()?, page_size()?)?;
        stats.open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
        stats.max_fds = max_fds()?;
        Some(stats)
    }
}

/// `/proc/self/stat`: the fields after the command name (which may hold spaces and parentheses).
fn parse_stat(stat: &str, boot_time: f64, ticks: f64, page: f64) -> Option<ProcessStats> {
    let after_comm = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // Field numbers of proc(5), minus the 3 before `state`.
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) / ticks,
        start_time_seconds: boot_time + field(22)? / ticks,
        virtual_memory_bytes: field(23)?,
        resident_memory_bytes: field(24)? * page,
        open_fds: 0.0,
        max_fds: 0.0,
    })
}

/// `btime` of `/proc/stat`: the boot instant, in seconds since the epoch.
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn clock_ticks() -> Option<f64> {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then_some(ticks as f64)
}

fn page_size() -> Option<f64> {
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    (page > 0).then_some(page as f64)
}

fn max_fds() -> Option<f64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0).then_some(limit.rlim_cur as f64)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        let help = "Total user and system CPU time spent in seconds.";
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            help,
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_command_holds_spaces_and_parentheses() {
        let stat = "4242 (slot cron (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    250 150 0 0 20 0 9 0 1000 104857600 2560 18446744073709551615";
        let s = parse_stat(stat, 1_700_000_000.0, 100.0, 4096.0).unwrap();
        assert_eq!(s.cpu_seconds, 4.0);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_memory_bytes, 104_857_600.0);
        assert_eq!(s.resident_memory_bytes, 2560.0 * 4096.0);
    }

    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read().expect("/proc/self on Linux");
        assert!(s.open_fds >= 3.0 && s.max_fds >= s.open_fds, "{s:?}");
        assert!(
            s.resident_memory_bytes > 0.0 && s.cpu_seconds >= 0.0,
            "{s:?}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86_400.0 * 365.0);
    }
}
