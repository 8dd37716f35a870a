//! `slotcron init --robot R [PATH]`: writes a commented starter jobs.toml for one robot (or the
//! `http` and `command` actions). What it writes passes `check` as it is, with no variable set:
//! the robot's job stays `enabled = false` until its webhook variable is exported, and a log job
//! runs meanwhile. An existing file is never overwritten.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::out::{errln, outln};

/// The settings and the log job every starter begins with.
const HEAD: &str = include_str!("starters/head.toml");

/// Which job the starter holds, by its action's `type`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Robot {
    /// A WeCom (企业微信) group robot.
    Wecom,
    /// A DingTalk (钉钉) custom robot.
    Dingtalk,
    /// A Feishu (飞书) custom bot.
    Feishu,
    /// A Slack incoming webhook.
    Slack,
    /// Any HTTP request.
    Http,
    /// A local command.
    Command,
}

impl Robot {
    /// The starter's job for this robot, after [`HEAD`].
    fn job(self) -> &'static str {
        match self {
            Robot::Wecom => include_str!("starters/wecom.toml"),
            Robot::Dingtalk => include_str!("starters/dingtalk.toml"),
            Robot::Feishu => include_str!("starters/feishu.toml"),
            Robot::Slack => include_str!("starters/slack.toml"),
            Robot::Http => include_str!("starters/http.toml"),
            Robot::Command => include_str!("starters/command.toml"),
        }
    }
}

/// `slotcron init --robot R [PATH]`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The job the starter holds: wecom, dingtalk, feishu, slack, http or command.
    #[arg(long, value_enum)]
    pub robot: Robot,
    /// Where to write it; an existing file is left as it is (exit 1).
    #[arg(default_value = "jobs.toml")]
    pub path: PathBuf,
}

/// Writes the starter to a new file: `create_new`, so an existing file (or one made meanwhile)
/// is refused by the file system itself, never truncated.
pub fn init(args: &InitArgs) -> ExitCode {
    let shown = args.path.display();
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.path)
        .and_then(|mut file| file.write_all(format!("{HEAD}{}", args.robot.job()).as_bytes()));
    match written {
        Ok(()) => {
            outln!("wrote {shown}; check it with: slotcron check --config {shown}");
            ExitCode::SUCCESS
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            errln!(
                "slotcron init: {shown} exists; left as it was (remove it or name another path)"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            errln!("slotcron init: cannot write {shown}: {e}");
            ExitCode::FAILURE
        }
    }
}
