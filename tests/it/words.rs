//! Schedules in words (issue 33 item 5): each schedule of the table said in English and in
//! Chinese; `check` saying each job's schedule in the language of `--lang` or the locale; an
//! alert's template given the failed job's schedule as `{{ schedule_words }}`.

use crate::common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::Receiver;
use slotcron::unstable::time::calendar::{Calendar, DayFilter, Days, cn};
use slotcron::unstable::time::schedule::Schedule;
use slotcron::unstable::time::words::{Lang, describe};

/// The cron, its zone, its calendar (`cn:workdays`: a calendar named `cn`, built-in data if
/// there is such a built-in, and the days kept; "" for none), and the sentence in English and
/// in Chinese.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// Seconds fields, steps, ranges, lists, `L`, `#`, `W`, `LW`, names, nicknames, the `+` of a
/// day that must match both day fields, calendars (built-in and not, workdays and days off)
/// and zones.
const TABLE: &[Row] = &[
    (
        "0 30 9 * * *",
        "Asia/Shanghai",
        "cn:workdays",
        "09:30 on workdays (Asia/Shanghai), skipping public holidays, running on make-up workdays",
        "工作日 09:30（Asia/Shanghai），法定节假日跳过，调休上班日照常执行",
    ),
    (
        "0 30 9 * * *",
        "Asia/Shanghai",
        "",
        "09:30 every day (Asia/Shanghai)",
        "每天 09:30（Asia/Shanghai）",
    ),
    (
        "30 9 * * *",
        "Europe/Berlin",
        "",
        "09:30 every day (Europe/Berlin)",
        "每天 09:30（Europe/Berlin）",
    ),
    (
        "30 9 * * 1-5",
        "Asia/Shanghai",
        "",
        "09:30 Monday to Friday (Asia/Shanghai)",
        "每周一至周五 09:30（Asia/Shanghai）",
    ),
    (
        "0 9 * * 1,3,5",
        "UTC",
        "",
        "09:00 on Monday, Wednesday and Friday (UTC)",
        "每周一、三、五 09:00（UTC）",
    ),
    (
        "0 10 * * 6,0",
        "UTC",
        "",
        "10:00 on Saturday and Sunday (UTC)",
        "每周六、日 10:00（UTC）",
    ),
    (
        "0 18 L * *",
        "Asia/Shanghai",
        "",
        "18:00 on the last day of the month (Asia/Shanghai)",
        "每月最后一天 18:00（Asia/Shanghai）",
    ),
    (
        "0 9 1 * *",
        "UTC",
        "",
        "09:00 on the 1st of the month (UTC)",
        "每月 1 日 09:00（UTC）",
    ),
    (
        "0 9 1,15 * *",
        "UTC",
        "",
        "09:00 on the 1st and the 15th of the month (UTC)",
        "每月 1 日、15 日 09:00（UTC）",
    ),
    (
        "0 9 1-7 * *",
        "UTC",
        "",
        "09:00 on the 1st to the 7th of the month (UTC)",
        "每月 1 日至 7 日 09:00（UTC）",
    ),
    (
        "0 9 15W * *",
        "UTC",
        "",
        "09:00 on the weekday nearest the 15th of the month (UTC)",
        "每月离 15 日最近的工作日（周一至周五）09:00（UTC）",
    ),
    (
        "0 17 LW * *",
        "UTC",
        "",
        "17:00 on the last weekday of the month (UTC)",
        "每月最后一个工作日（周一至周五）17:00（UTC）",
    ),
    (
        "0 9 * * 5#3",
        "UTC",
        "",
        "09:00 on the third Friday of the month (UTC)",
        "每月第三个周五 09:00（UTC）",
    ),
    (
        "0 9 * * 1#1",
        "UTC",
        "",
        "09:00 on the first Monday of the month (UTC)",
        "每月第一个周一 09:00（UTC）",
    ),
    (
        "0 18 * * 5L",
        "UTC",
        "",
        "18:00 on the last Friday of the month (UTC)",
        "每月最后一个周五 18:00（UTC）",
    ),
    (
        "*/5 * * * *",
        "UTC",
        "",
        "every 5 minutes (UTC)",
        "每 5 分钟（UTC）",
    ),
    (
        "* * * * *",
        "UTC",
        "",
        "every minute (UTC)",
        "每分钟（UTC）",
    ),
    (
        "* * * * * *",
        "UTC",
        "",
        "every second (UTC)",
        "每秒（UTC）",
    ),
    (
        "*/5 * * * * *",
        "UTC",
        "",
        "every 5 seconds (UTC)",
        "每 5 秒（UTC）",
    ),
    (
        "*/10 * * * * *",
        "Asia/Tokyo",
        "cn:workdays",
        "every 10 seconds on workdays (Asia/Tokyo), skipping public holidays, running on make-up workdays",
        "工作日每 10 秒（Asia/Tokyo），法定节假日跳过，调休上班日照常执行",
    ),
    (
        "0 * * * *",
        "UTC",
        "",
        "every hour on the hour (UTC)",
        "每小时整点（UTC）",
    ),
    (
        "30 * * * *",
        "UTC",
        "",
        "every hour at minute 30 (UTC)",
        "每小时第 30 分（UTC）",
    ),
    (
        "0 */2 * * *",
        "UTC",
        "",
        "every 2 hours on the hour (UTC)",
        "每 2 小时整点（UTC）",
    ),
    (
        "0 9-17 * * *",
        "UTC",
        "",
        "every hour from 09:00 to 17:00 (UTC)",
        "09:00–17:00 每小时（UTC）",
    ),
    (
        "0 9-17 * * 1-5",
        "Asia/Shanghai",
        "cn:workdays",
        "every hour from 09:00 to 17:00, Monday to Friday (Asia/Shanghai), workdays only, skipping public holidays",
        "每周一至周五 09:00–17:00 每小时（Asia/Shanghai），仅限工作日：法定节假日跳过",
    ),
    (
        "*/15 9-17 * * 1-5",
        "Asia/Shanghai",
        "",
        "every 15 minutes between 09:00 and 17:59, Monday to Friday (Asia/Shanghai)",
        "每周一至周五 09:00–17:59 每 15 分钟（Asia/Shanghai）",
    ),
    (
        "*/15 9-17 * * *",
        "Asia/Shanghai",
        "cn:workdays",
        "every 15 minutes between 09:00 and 17:59 on workdays (Asia/Shanghai), skipping public holidays, running on make-up workdays",
        "工作日 09:00–17:59 每 15 分钟（Asia/Shanghai），法定节假日跳过，调休上班日照常执行",
    ),
    (
        "0,30 * * * *",
        "UTC",
        "",
        "every hour at minutes 0 and 30 (UTC)",
        "每小时第 0、30 分（UTC）",
    ),
    (
        "15 10-50/20 * * * *",
        "UTC",
        "",
        "every 20 minutes from minute 10 to 50 at second 15 (UTC)",
        "每小时第 10–50 分每 20 分钟（第 15 秒）（UTC）",
    ),
    (
        "0 30 9,18 * * *",
        "UTC",
        "",
        "09:30 and 18:30 every day (UTC)",
        "每天 09:30、18:30（UTC）",
    ),
    (
        "15 30 9 * * *",
        "UTC",
        "",
        "09:30:15 every day (UTC)",
        "每天 09:30:15（UTC）",
    ),
    (
        "0 0 1 1 *",
        "UTC",
        "",
        "00:00 on the 1st of January (UTC)",
        "每年 1 月 1 日 00:00（UTC）",
    ),
    (
        "@daily",
        "UTC",
        "",
        "00:00 every day (UTC)",
        "每天 00:00（UTC）",
    ),
    (
        "@hourly",
        "UTC",
        "",
        "every hour on the hour (UTC)",
        "每小时整点（UTC）",
    ),
    (
        "@weekly",
        "America/New_York",
        "",
        "00:00 every Sunday (America/New_York)",
        "每周日 00:00（America/New_York）",
    ),
    (
        "@monthly",
        "UTC",
        "",
        "00:00 on the 1st of the month (UTC)",
        "每月 1 日 00:00（UTC）",
    ),
    (
        "@yearly",
        "UTC",
        "",
        "00:00 on the 1st of January (UTC)",
        "每年 1 月 1 日 00:00（UTC）",
    ),
    (
        "0 9 * 3 *",
        "UTC",
        "",
        "09:00 every day in March (UTC)",
        "每年 3 月每天 09:00（UTC）",
    ),
    (
        "0 9 1 */3 *",
        "UTC",
        "",
        "09:00 on the 1st of January, April, July and October (UTC)",
        "每年 1 月、4 月、7 月、10 月 1 日 09:00（UTC）",
    ),
    (
        "0 9 * 6-8 1",
        "Europe/London",
        "",
        "09:00 every Monday in June to August (Europe/London)",
        "每年 6 月至 8 月的每周一 09:00（Europe/London）",
    ),
    (
        "0 9 1 * 1",
        "UTC",
        "",
        "09:00 on the 1st of the month and every Monday (UTC)",
        "每月 1 日及每周一 09:00（UTC）",
    ),
    (
        "0 9 1-7 * +1",
        "UTC",
        "",
        "09:00 on the 1st to the 7th of the month if it falls on Monday (UTC)",
        "每月 1 日至 7 日且逢周一 09:00（UTC）",
    ),
    (
        "0 9 * JAN-MAR MON-FRI",
        "UTC",
        "",
        "09:00 Monday to Friday in January to March (UTC)",
        "每年 1 月至 3 月的每周一至周五 09:00（UTC）",
    ),
    (
        "0 10 * * *",
        "Asia/Shanghai",
        "cn:holidays",
        "10:00 on days off (Asia/Shanghai), weekends and public holidays, not on make-up workdays",
        "节假日 10:00（Asia/Shanghai），含周末和法定节假日，调休上班日不执行",
    ),
    (
        "0 10 * * 6",
        "Asia/Shanghai",
        "cn:workdays",
        "10:00 every Saturday (Asia/Shanghai), workdays only, skipping public holidays, running on make-up workdays",
        "每周六 10:00（Asia/Shanghai），仅限工作日：法定节假日跳过，调休上班日照常执行",
    ),
    (
        "0 30 9 * * *",
        "Asia/Shanghai",
        "team:workdays",
        "09:30 on workdays (Asia/Shanghai), skipping the days off of calendar \"team\", running on the workdays listed in calendar \"team\"",
        "工作日 09:30（Asia/Shanghai），日历 team 的假日跳过，日历 team 的补班日照常执行",
    ),
    (
        "0 9 L * *",
        "Asia/Shanghai",
        "cn:workdays",
        "09:00 on the last day of the month (Asia/Shanghai), workdays only, skipping public holidays, running on make-up workdays",
        "每月最后一天 09:00（Asia/Shanghai），仅限工作日：法定节假日跳过，调休上班日照常执行",
    ),
    (
        "0 0 0 * * 1-5",
        "Asia/Shanghai",
        "cn:holidays",
        "00:00 Monday to Friday (Asia/Shanghai), days off only (public holidays)",
        "每周一至周五 00:00（Asia/Shanghai），仅限法定节假日",
    ),
    (
        "0 0 */6 * * *",
        "UTC",
        "",
        "every 6 hours on the hour (UTC)",
        "每 6 小时整点（UTC）",
    ),
    (
        "10-20 * * * *",
        "UTC",
        "",
        "every minute from minute 10 to 20 (UTC)",
        "每小时第 10–20 分每分钟（UTC）",
    ),
    (
        "0 0 9-17/2 * * *",
        "UTC",
        "",
        "every 2 hours from 09:00 to 17:00 (UTC)",
        "09:00–17:00 每 2 小时（UTC）",
    ),
    (
        "0 9 */2 * *",
        "UTC",
        "",
        "09:00 every 2 days from the 1st of the month (UTC)",
        "每月从 1 日起每 2 天 09:00（UTC）",
    ),
    (
        "0 8 * * 7",
        "UTC",
        "",
        "08:00 every Sunday (UTC)",
        "每周日 08:00（UTC）",
    ),
];

/// A schedule of the table.
fn schedule(cron: &str, zone: &str, calendar: &str) -> Schedule {
    let schedule = Schedule::parse(cron, zone.parse().expect("zone")).expect("cron");
    let Some((name, days)) = calendar.split_once(':') else {
        return schedule;
    };
    let mut calendar = Calendar::new(name);
    if let Some(builtin) = cn::builtin(name) {
        calendar.add_builtin(builtin);
    }
    let days = match days {
        "workdays" => Days::Workdays,
        "holidays" => Days::Holidays,
        other => panic!("days {other:?}"),
    };
    schedule.on_days(DayFilter {
        calendar: Arc::new(calendar),
        days,
    })
}

#[test]
fn every_schedule_of_the_table_is_said_in_english_and_in_chinese() {
    assert!(
        TABLE.len() >= 40,
        "the issue asks for at least 40 schedules"
    );
    let mut wrong = Vec::new();
    for (cron, zone, calendar, en, zh) in TABLE {
        let schedule = schedule(cron, zone, calendar);
        for (lang, expected) in [(Lang::En, en), (Lang::Zh, zh)] {
            let said = describe(&schedule, lang);
            if said != *expected {
                wrong.push(format!("{cron:?} {zone} {calendar:?} {lang:?}:\n  said     {said}\n  expected {expected}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} sentence(s) differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_language_follows_the_locale() {
    for (locale, lang) in [
        ("zh_CN.UTF-8", Some(Lang::Zh)),
        ("zh_TW", Some(Lang::Zh)),
        ("en_US.UTF-8", Some(Lang::En)),
        ("C", Some(Lang::En)),
        ("", None),
    ] {
        assert_eq!(Lang::from_locale(locale), lang, "{locale:?}");
    }
}

/// `slotcron ARGS` with no locale or config variable of the caller's.
fn slotcron() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
    for var in [
        "LC_ALL",
        "LC_MESSAGES",
        "LANG",
        "SLOTCRON_CONFIG",
        "RUST_LOG",
        "WECOM_WEBHOOK",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    stdout.into_owned()
}

#[test]
fn check_says_the_shipped_jobs_schedules_in_the_flags_or_the_locales_language() {
    // As shipped: the WeCom stand-up is disabled (its webhook variable unset), and still said.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs.toml");
    let check = |lang: Option<&str>, locale: Option<&str>| {
        let mut cmd = slotcron();
        cmd.args(["check", "--next", "2", "--config"]).arg(&path);
        cmd.env(
            "WECOM_WEBHOOK",
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K",
        );
        lang.map(|l| cmd.args(["--lang", l]));
        locale.map(|l| cmd.env("LANG", l));
        stdout_of(&mut cmd)
    };
    let zh = [
        "  计划：每 5 秒（Asia/Shanghai）\n",
        "  计划：工作日 09:30（Asia/Shanghai），法定节假日跳过，调休上班日照常执行\n",
    ];
    let en = [
        "  schedule: every 5 seconds (Asia/Shanghai)\n",
        "  schedule: 09:30 on workdays (Asia/Shanghai), skipping public holidays, running on make-up workdays\n",
    ];
    for (output, lines) in [
        (check(Some("zh"), None), zh),
        (check(None, Some("zh_CN.UTF-8")), zh),
        (check(Some("en"), Some("zh_CN.UTF-8")), en),
        (check(None, None), en),
    ] {
        for line in lines {
            assert!(output.contains(line), "no {line:?} in:\n{output}");
        }
    }
}

#[test]
fn an_alert_template_gets_the_failed_jobs_schedule_in_words() {
    let alerts = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
        [calendar.cn]
        builtin = "cn"
        [alert.oncall]
        type = "http"
        url = "{}/alert"
        body = "{{{{ job }}}} {{{{ outcome }}}}: {{{{ schedule_words }}}}"
        [[job]]
        name = "report"
        schedule = "0 30 9 * * *"
        timezone = "Asia/Shanghai"
        calendar = "cn"
        days = "workdays"
        on_failure = "oncall"
        [job.action]
        type = "command"
        argv = ["false"]
        "#,
        alerts.uri()
    );
    let path = common::write_config(dir.path(), &config);
    let out = slotcron()
        .args(["trigger", "report", "--config"])
        .arg(&path)
        .env("LANG", "zh_CN.UTF-8")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the job's command fails");
    // The alert is sent before trigger exits; the wait only covers a slow receiver thread.
    let received = alerts.wait_for(1, Duration::from_secs(30));
    let body = String::from_utf8_lossy(&received[0].body).into_owned();
    assert_eq!(
        body,
        "report failed: 工作日 09:30（Asia/Shanghai），法定节假日跳过，调休上班日照常执行"
    );
}
