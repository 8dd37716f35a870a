//! `slotcron check`: the configuration checked, and each job's next slots printed.

use super::out::out;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::Args;

use super::shared::{ConfigArg, load_or_exit};
use crate::config::{Config, Job, RedisMode};
use crate::time::calendar::{Day, DayFilter, Days};
use crate::time::jitter;
use crate::time::schedule::{Schedule, Slot, TransitionKind};
use crate::time::words::{self, Lang};

#[derive(Debug, Args)]
/// `slotcron check`.
pub struct CheckArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// How many upcoming slots to print per job.
    #[arg(long, default_value_t = 5)]
    pub next: usize,
    /// The language of the schedules in words (default: from LANG).
    ///
    /// `zh` says `工作日 09:30（Asia/Shanghai），法定节假日跳过，调休上班日照常执行`, `en`
    /// `09:30 on workdays (Asia/Shanghai), ...`. Default: the locale's, from the first of
    /// LC_ALL, LC_MESSAGES and LANG that is set (zh for zh_CN.UTF-8 and other zh locales, en
    /// for any other), en when none is set.
    #[arg(long, value_enum)]
    pub lang: Option<Lang>,
}

pub(super) fn check(args: &CheckArgs) -> ExitCode {
    let config = match load_or_exit(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let lang = args.lang.unwrap_or_else(Lang::from_env);
    out!("{}", render_check_in(&config, args.next, lang));
    ExitCode::SUCCESS
}

/// The lock `check` reports: the mode, its nodes and what it guarantees, and the prefix; or
/// standalone. Offline: nothing is asked of Redis.
fn describe_lock(config: &Config) -> String {
    let Some(redis) = &config.redis else {
        return "standalone (in-process lock, one replica only)".to_owned();
    };
    let nodes: Vec<String> = redis.nodes.iter().map(ToString::to_string).collect();
    let (nodes, mode) = (nodes.join(", "), &redis.mode);
    let over = match mode {
        RedisMode::Redlock => format!("redlock over {} node(s): {nodes}", redis.nodes.len()),
        RedisMode::Sentinel { master } => format!(
            "sentinel: master {master:?} through {} sentinel(s): {nodes}, wait_replicas {}",
            redis.nodes.len(),
            redis.wait_replicas
        ),
        RedisMode::Cluster => format!(
            "cluster, {} seed node(s): {nodes}, wait_replicas {}",
            redis.nodes.len(),
            redis.wait_replicas
        ),
    };
    // The prefix names the fleet: two deployments on one Redis need different ones.
    format!(
        "{over}, key_prefix {:?}, deployment {}\nguarantee ({} mode): {}",
        config.scheduler.key_prefix,
        config.scheduler.deployment,
        mode.name(),
        mode.guarantee()
    )
}

/// The text `check` prints, its schedules in words in the locale's language ([`Lang::from_env`]).
pub fn render_check(config: &Config, next: usize) -> String {
    render_check_in(config, next, Lang::from_env())
}

/// The text `check` prints: the lock, then each job with its schedule in words in `lang` and
/// its next slots in its zone.
pub fn render_check_in(config: &Config, next: usize, lang: Lang) -> String {
    let mut out = String::new();
    let lock = describe_lock(config);
    out.push_str(&format!(
        "{}: ok, {} job(s), lock: {lock}\n",
        config.path.display(),
        config.jobs.len()
    ));
    let stagger = crate::slot::stagger_warning(&config.scheduler);
    for warning in config.warnings.iter().chain(&stagger) {
        out.push_str(&format!("warning: {warning}\n"));
    }
    let now = Utc::now();
    for job in &config.jobs {
        let target = job
            .action
            .target()
            // A command's argv may hold a value from the environment: scrubbed like the logs.
            .map(|t| format!(" -> {}", config.scrubber.scrub(&t)))
            .unwrap_or_default();
        let days = job
            .schedule
            .day_filter()
            .map(|f| format!(" on {} of calendar {:?}", f.days, f.calendar.name()))
            .unwrap_or_default();
        out.push_str(&format!(
            "\njob {:?}: {:?} in {}{days}, timeout {}{}, {}{target}\n",
            job.name,
            job.schedule.expression(),
            job.zone(),
            humantime::format_duration(job.timeout),
            jitter_note(job.jitter),
            job.action.kind(),
        ));
        out.push_str(&words_line(&job.schedule, lang));
        for line in slot_lines(job, &config.scheduler.key_prefix, now, next) {
            out.push_str(&format!("  {line}\n"));
        }
        for line in dst_lines(job, now) {
            out.push_str(&format!("  {line}\n"));
        }
    }
    for name in &config.disabled {
        out.push_str(&format!("\njob {name:?}: disabled (enabled = false)\n"));
        if let Some(schedule) = config.disabled_schedules.get(name) {
            out.push_str(&words_line(schedule, lang));
        }
    }
    out
}

/// The line under a job's heading that says its schedule in words.
fn words_line(schedule: &Schedule, lang: Lang) -> String {
    let label = match lang {
        Lang::Zh => "计划：",
        Lang::En => "schedule: ",
    };
    format!("  {label}{}\n", words::describe(schedule, lang))
}

/// A job's next slots, one line each. With a calendar, also the days between them the calendar
/// skipped (and why), and what makes a kept day notable: a holiday or make-up workday, or a
/// date past the built-in data, where Monday to Friday is assumed.
fn slot_lines(job: &Job, prefix: &str, now: DateTime<Utc>, next: usize) -> Vec<String> {
    let schedule = &job.schedule;
    let slots = schedule.upcoming(now, next);
    let Some(filter) = schedule.day_filter() else {
        return slots.iter().map(|&s| slot_text(job, prefix, s)).collect();
    };
    let mut lines = Vec::new();
    let mut date = schedule.local_date(Slot::at(now));
    for slot in slots {
        let slot_date = schedule.local_date(slot);
        while date < slot_date {
            if !filter.keeps(date) && schedule.cron_fires_on(date, now) {
                lines.push(format!("{date} skipped: {}", filter.calendar.day(date)));
            }
            let Some(following) = date.succ_opt() else {
                break;
            };
            date = following;
        }
        lines.push(format!(
            "{}{}",
            slot_text(job, prefix, slot),
            day_note(filter, slot_date)
        ));
    }
    lines
}

/// `, jitter 1m 30s` in a job's heading when it has one.
fn jitter_note(jitter: std::time::Duration) -> String {
    match jitter.is_zero() {
        true => String::new(),
        false => format!(", jitter {}", humantime::format_duration(jitter)),
    }
}

/// A slot in the job's zone; with jitter, also the delayed instant it is raced and sent at
/// (the same on every replica): `2026-11-27T09:00:00+08:00 sent at 2026-11-27T09:00:41.337+08:00
/// (jitter_ms 41337)`. The nominal instant stays the slot's name everywhere else.
fn slot_text(job: &Job, prefix: &str, slot: Slot) -> String {
    let nominal = slot.rfc3339_in(job.zone());
    if job.jitter.is_zero() {
        return nominal;
    }
    let delay = jitter::delay(prefix, &job.name, slot, job.jitter);
    let delayed = jitter::delayed(slot, delay).with_timezone(&job.zone());
    let delayed = delayed.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    format!(
        "{nominal} sent at {delayed} (jitter_ms {})",
        delay.as_millis()
    )
}

/// A job whose cron names a wall time that a DST transition of the next year skips or
/// repeats: its policy, then each such transition with the slots the policy gives it (the
/// first and last of many).
fn dst_lines(job: &Job, now: DateTime<Utc>) -> Vec<String> {
    let schedule = &job.schedule;
    let effects = schedule.dst_effects(now, now + chrono::Duration::days(DST_LOOKAHEAD_DAYS));
    if effects.is_empty() {
        return Vec::new();
    }
    let policy = schedule.dst_policy();
    let source = if schedule.dst_policy_configured() {
        "configured"
    } else {
        "default"
    };
    let mut lines = vec![format!(
        "dst: dst_repeat = {:?}, dst_gap = {:?} ({source})",
        policy.repeat.name(),
        policy.gap.name()
    )];
    for effect in effects {
        let what = match effect.kind {
            TransitionKind::Gap => "do not exist",
            TransitionKind::Repeat => "happen twice",
        };
        let zone = job.zone();
        let slots = match effect.slots.as_slice() {
            [] => "no slot".to_owned(),
            [one] => one.rfc3339_in(zone),
            [one, two] => format!("{}, {}", one.rfc3339_in(zone), two.rfc3339_in(zone)),
            [first, .., last] => format!(
                "{} slots, {} .. {}",
                effect.slots.len(),
                first.rfc3339_in(zone),
                last.rfc3339_in(zone)
            ),
        };
        lines.push(format!(
            "  {} {}-{} {what}: {slots}",
            effect.walls.start.format("%Y-%m-%d"),
            effect.walls.start.format("%H:%M"),
            effect.walls.end.format("%H:%M"),
        ));
    }
    lines
}

/// How far ahead `check` looks for DST transitions: a year, so both of a zone's show.
const DST_LOOKAHEAD_DAYS: i64 = 366;

/// What `check` says beside a kept slot of a calendar job.
fn day_note(filter: &DayFilter, date: chrono::NaiveDate) -> String {
    let calendar = &filter.calendar;
    let mut note = match (calendar.day(date), filter.days) {
        (day @ (Day::Holiday(_) | Day::MakeUp(_)), _) => format!("  {day}"),
        // On a holidays job a plain weekend is the usual kept day: say so, as for the others.
        (day @ Day::Weekend, Days::Holidays) => format!("  {day}"),
        (Day::Weekday | Day::Weekend, _) => String::new(),
    };
    if let Some(coverage) = calendar
        .coverage()
        .filter(|_| calendar.is_beyond_coverage(date))
    {
        note.push_str(&format!(
            "  (past the built-in {} data ({}-{}): Monday to Friday assumed)",
            coverage.builtin,
            coverage.first.format("%Y"),
            coverage.last.format("%Y")
        ));
    }
    note
}
