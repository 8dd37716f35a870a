//! The `command` action: runs an argv (no shell unless asked for) with `SLOTCRON_JOB`,
//! `SLOTCRON_SLOT` and `SLOTCRON_REPLICA` in its environment. It runs in its own process group,
//! so the job's timeout kills everything it started; a non-zero exit is a failure; its output is
//! captured into the log, truncated.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::{ActionError, Delivery, SendContext};
use crate::action::check::Check;
use serde::Deserialize;
use serde_json::json;

/// Bytes of stdout and of stderr kept for the log.
pub const OUTPUT_LIMIT: usize = 4096;

#[derive(Debug)]
/// A checked `command` action: the argv run per slot.
pub struct CommandAction {
    /// The argv; with `shell = true` it is `["sh", "-c", script]`. Strings may be templates.
    pub argv: Value,
}

impl CommandAction {
    /// Sends this action for the slot in `ctx`; the delivery or why it failed.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let argv = ctx.render_json(&self.argv, "argv")?;
        let argv: Vec<String> = serde_json::from_value(argv).unwrap_or_default();
        let Some((program, args)) = argv.split_first() else {
            return Err(ActionError::Input {
                field: "argv",
                reason: "empty argv".to_owned(),
            });
        };
        // A command that started is never started again; one that cannot start inside the lock's
        // validity is handed off.
        ctx.may_send(1, false, "no attempt made before the deadline")?;
        let mut child = spawn(ctx, program, args)?;
        // Taken now: once the shell has exited and been reaped, `child.id()` is `None`, while its
        // background children may still hold the group (and the output pipes) open.
        let pgid = child.id();
        let stdout = read_capped(child.stdout.take());
        let stderr = read_capped(child.stderr.take());
        let remaining = ctx
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let waited = tokio::time::timeout(remaining, async {
            let (status, out, err) = tokio::join!(child.wait(), stdout, stderr);
            (status, out, err)
        })
        .await;
        let Ok((status, out, err)) = waited else {
            kill_group(pgid);
            let _ = child.wait().await;
            return Err(ActionError::GaveUp {
                attempts: 1,
                reason: format!(
                    "{program:?} still running at the job's timeout: killed its process group"
                ),
                uncertain: true,
            });
        };
        tracing::info!(job = %ctx.job, slot = %ctx.slot, replica = %ctx.replica, stdout = %out, stderr = %err, "command output");
        verdict(program, status, &err)
    }
}

/// Starts `program` with the slot in its environment, in its own process group (so a timeout
/// kills the children it started too), its output piped for the log.
fn spawn(
    ctx: &SendContext<'_>,
    program: &str,
    args: &[String],
) -> Result<tokio::process::Child, ActionError> {
    Command::new(program)
        .args(args)
        .env("SLOTCRON_JOB", ctx.job)
        .env("SLOTCRON_SLOT", ctx.slot.rfc3339_utc())
        .env("SLOTCRON_REPLICA", ctx.replica)
        .env("SLOTCRON_FENCE", ctx.fence.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout kills the children it started too.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ActionError::Rejected {
            attempts: 1,
            reason: format!("cannot start {program:?}: {e}"),
        })
}

/// A finished command's outcome: exit 0 is done, anything else is rejected.
fn verdict(
    program: &str,
    status: std::io::Result<std::process::ExitStatus>,
    err: &str,
) -> Result<Delivery, ActionError> {
    match status {
        Ok(s) if s.success() => Ok(Delivery { attempts: 1 }),
        Ok(s) => Err(ActionError::Rejected {
            attempts: 1,
            reason: format!("{program:?} exited with {s}; stderr: {}", err.trim()),
        }),
        Err(e) => Err(ActionError::Rejected {
            attempts: 1,
            reason: format!("waiting for {program:?} failed: {e}"),
        }),
    }
}

/// SIGKILL to the whole process group led by `pid`.
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: killpg only sends a signal; a stale group id fails with ESRCH, which is fine.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

/// Reads a pipe to its end, keeping the first [`OUTPUT_LIMIT`] bytes (the rest is drained so the
/// child never blocks on a full pipe).
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut total = 0usize;
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        total += n;
        let room = OUTPUT_LIMIT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if total > kept.len() {
        text.push_str(&format!("… ({} bytes more)", total - kept.len()));
    }
    text
}

// --- Checking the `[job.action]` table (at load) ---

/// `type = "command"` as written: `argv` and `shell` both optional here so that `parse` can
/// say "give either" in one error instead of serde's two.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCommand {
    pub(crate) argv: Option<Vec<String>>,
    pub(crate) shell: Option<String>,
}

/// Checks a `type = "command"` action table; errors go to `check`.
pub(crate) fn parse(check: &mut impl Check, raw: RawCommand) -> Option<CommandAction> {
    let argv = match (raw.argv, raw.shell) {
        (Some(argv), None) if !argv.is_empty() => argv,
        (None, Some(script)) => vec!["sh".to_owned(), "-c".to_owned(), script],
        _ => {
            check.error(
                "argv",
                "give either argv = [\"program\", \"arg\", …] (no shell) or shell = \"a script\"",
            );
            return None;
        }
    };
    let argv = check.check_json_templates(json!(argv), "argv")?;
    Some(CommandAction { argv })
}
