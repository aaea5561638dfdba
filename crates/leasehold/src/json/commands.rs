//! The documents of the commands that change things or run a command
//! (docs/JSON.md, "Success, and the details of each refusal"), and the
//! one shape of every failure: [`Failure`].

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::{Grant, documents};
use crate::{FenceRefusal, LeaseName, QueueName, TaskId, Token, TokensBumped};

/// Whenever leasehold exits non-zero for a reason of its own: `error` and
/// `exit_code`, and the refusal's details (`D`, a document or `()`) beside
/// them.
#[derive(Debug, Serialize)]
pub struct Failure<'a, D> {
    #[serde(flatten)]
    pub words: Words<'a>,
    pub exit_code: u8,
    #[serde(flatten)]
    pub details: D,
}

/// What a [`Failure`] says: an `error`, or for a refusal that is no
/// failure (`run --if-held skip`, exit 0) a `message`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Words<'a> {
    Error(&'a str),
    Message(&'a str),
}

documents! {
    /// `acquire` (and `run`) refused: held by others.
    pub struct LeaseHeld<'a> {
        pub name: &'a LeaseName,
        pub held: bool,
        pub waiters_ahead: u32,
        pub grants: Vec<Grant<'a>>,
    }

    /// A wait for a lease that SIGINT, SIGTERM or SIGHUP ended.
    pub struct WaitCancelled<'a> {
        pub name: &'a LeaseName,
        /// `"SIGTERM"`, ...
        pub signal: &'a str,
    }

    /// `release`.
    pub struct Released<'a> {
        pub name: &'a LeaseName,
        pub token: Token,
        pub released: bool,
    }

    /// `fence` passed.
    pub struct FencePassed<'a> {
        pub name: &'a LeaseName,
        pub token: Token,
        pub passed: bool,
        pub grant: Grant<'a>,
    }

    /// `fence` refused a stale token.
    pub struct FenceRefused<'a> {
        pub name: &'a LeaseName,
        pub token: Token,
        pub passed: bool,
        pub reason: FenceRefusal,
        /// The newest token, or `none`.
        pub newest_token: String,
    }

    /// `run`: the command ran; its code, passed through.
    pub struct RunEnded<'a> {
        pub name: &'a LeaseName,
        pub token: Token,
        pub owner: &'a str,
        pub exit_code: u8,
    }

    /// `run` refused: held (`skipped` with `--if-held skip`).
    pub struct RunHeld<'a> {
        pub name: &'a LeaseName,
        pub held: bool,
        pub skipped: bool,
    }

    /// `run`: the command could not start.
    pub struct RunNotStarted<'a> {
        pub name: &'a LeaseName,
        pub token: Token,
    }

    /// `lock` took the lock (`locked: true`), or the command could not
    /// start after it did (`locked: false`, with the failure).
    pub struct Locked<'a> {
        pub path: &'a Path,
        pub locked: bool,
        pub shared: bool,
        pub pid: u32,
    }

    /// `lock` refused: held.
    pub struct LockHeld<'a> {
        pub path: &'a Path,
        pub held: bool,
        /// The exclusive holder's, if there is one.
        pub pid: Option<u32>,
        pub pids: Vec<u32>,
    }

    /// `lock`: the command could not start.
    pub struct LockNotRun<'a> {
        pub path: &'a Path,
        pub locked: bool,
    }

    /// `write`, `update` wrote the file.
    pub struct Written<'a> {
        pub file: &'a Path,
        pub written: bool,
        pub bytes: usize,
        pub fence_token: Option<Token>,
        pub fence_grant: Option<String>,
        pub fence_file: Option<PathBuf>,
    }

    /// `update`: the filter failed; the file is unchanged.
    pub struct NotWritten<'a> {
        pub file: &'a Path,
        pub written: bool,
    }

    /// `doctor`.
    pub struct Doctor<'a> {
        pub ok: bool,
        pub checks: Vec<DoctorCheck<'a>>,
    }

    /// One of `doctor`'s checks.
    pub struct DoctorCheck<'a> {
        pub check: &'a str,
        pub ok: bool,
        pub detail: &'a str,
        /// Worth a look but not wrong (`ok` stays true, `doctor` passes):
        /// a large write-ahead log, a store file that is a plain copy.
        pub warning: bool,
    }

    /// `backup DEST`.
    pub struct BackedUp<'a> {
        /// The store copied (its URL, without secrets).
        pub location: &'a str,
        /// The copy, as DEST was given.
        pub path: &'a Path,
        pub bytes: u64,
        /// When its snapshot was taken (RFC 3339).
        pub taken_at: String,
    }

    /// `migrate`.
    pub struct Migrated<'a> {
        pub store: &'a str,
        pub location: &'a str,
        pub schema_version: Option<u32>,
        /// With `--bump-tokens N` only.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tokens_bumped: Option<TokensBumped>,
    }

    /// `completions SHELL`.
    pub struct Completions<'a> {
        pub shell: String,
        pub script: &'a str,
    }

    /// `man DIR`: the pages written, by file name.
    pub struct ManPages<'a> {
        pub dir: &'a std::path::Path,
        pub pages: Vec<&'a str>,
    }

    /// `task add`.
    pub struct TasksAdded<'a> {
        pub queue: &'a QueueName,
        pub added: usize,
        pub existing: usize,
        pub ids: Vec<&'a TaskId>,
    }

    /// `task claim` (printed with or without `--json`).
    pub struct Claim<'a> {
        pub queue: &'a QueueName,
        pub id: &'a TaskId,
        pub payload: &'a Value,
        pub attempt: u32,
        pub max_attempts: u32,
        pub token: Token,
        pub lease_until: String,
    }

    /// `task claim` found nothing to claim.
    pub struct NothingToClaim<'a> {
        pub queue: &'a QueueName,
        pub claimed: bool,
    }

    /// `task heartbeat`.
    pub struct TaskHeartbeat<'a> {
        pub queue: &'a QueueName,
        pub id: &'a TaskId,
        pub token: Token,
        pub state: &'static str,
        pub ttl_ms: u64,
    }

    /// `task done`.
    pub struct TaskDone<'a> {
        pub queue: &'a QueueName,
        pub id: &'a TaskId,
        pub token: Token,
        pub state: &'static str,
    }

    /// `task fail`: `pending` with `retry_at`, or `dead`.
    pub struct TaskFailed<'a> {
        pub queue: &'a QueueName,
        pub id: &'a TaskId,
        pub state: &'static str,
        pub retry_at: Option<String>,
    }

    /// `task retry`; `revived` is false when it already was pending.
    pub struct TaskRetried<'a> {
        pub queue: &'a QueueName,
        pub id: &'a TaskId,
        pub state: &'static str,
        pub revived: bool,
    }

    /// `task purge`.
    pub struct Purged<'a> {
        pub queue: &'a QueueName,
        pub purged: u64,
    }

    /// `leader NAME`, and each line of `leader NAME --observe`: who leads
    /// (`null`: nobody).
    pub struct LeaderChange<'a> {
        pub name: &'a LeaseName,
        pub leader: Option<Leader<'a>>,
    }

    /// The leader of a [`LeaderChange`].
    pub struct Leader<'a> {
        /// The candidate's id.
        pub owner: &'a str,
        pub token: Token,
        pub host: &'a str,
        pub pid: u32,
        pub since: String,
    }

    /// `work`, when the worker stops.
    pub struct WorkSummary<'a> {
        pub queue: &'a QueueName,
        pub done: u64,
        pub failed: u64,
        pub dead: u64,
        pub lost: u64,
        pub handed_back: u64,
    }
}

/// A leader change's document.
#[must_use]
pub fn leader_change(change: &crate::LeaderChange) -> LeaderChange<'_> {
    LeaderChange {
        name: &change.name,
        leader: change.leader.as_ref().map(|l| Leader {
            owner: &l.owner,
            token: l.token,
            host: &l.host,
            pid: l.pid,
            since: super::rfc3339(l.since),
        }),
    }
}

documents! {
    /// `--json --version`.
    pub struct Version<'a> {
        pub name: &'a str,
        pub version: &'a str,
        /// git's short hash, `$LEASEHOLD_COMMIT`, or `unknown`.
        pub commit: &'a str,
        pub target: &'a str,
        /// `release`, `snapshot` (a build of `scripts/dist --snapshot`:
        /// not a release) or `development`.
        pub build: &'a str,
        /// The stores this build opens.
        pub stores: Vec<&'static str>,
    }

    /// `--json help [COMMAND]`, `--help`, `-h`: the text as without `--json`.
    pub struct Help<'a> {
        pub help: &'a str,
    }
}
