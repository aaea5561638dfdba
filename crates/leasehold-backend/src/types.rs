//! Parameter and row types of the seam.

use std::fmt;
use std::str::FromStr;
#[cfg(feature = "test-clock")]
use std::sync::Arc;
#[cfg(feature = "test-clock")]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::LeaseName;

mod held;
mod units;

pub use held::*;
pub use units::*;

/// A fencing token: per name, strictly increasing, never reissued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(pub u64);

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Token {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse::<u64>().map(Token).map_err(|_| {
            format!(
                "{} is not a token (a positive whole number, as printed by `leasehold acquire`)",
                crate::quoted(s)
            )
        })
    }
}

/// How a grant shares its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Mode {
    /// The only live grant of its name.
    Exclusive,
    /// One of up to `limit` live shared grants (no limit when `None`).
    Shared { limit: Option<u32> },
}

impl Mode {
    #[must_use]
    pub fn is_exclusive(self) -> bool {
        matches!(self, Mode::Exclusive)
    }

    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared { .. } => "shared",
        }
    }
}

/// Who holds a grant: enough to tell, on the same host, whether the holder
/// is provably gone (see `leasehold::identity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id` of the holder's host.
    pub boot_id: String,
    /// Inode of the holder's pid namespace (`/proc/self/ns/pid`).
    pub pid_ns: Option<u64>,
    pub pid: u32,
    /// Start time of `pid` in clock ticks since boot (`/proc/PID/stat`
    /// field 22): tells a reused pid from the holder.
    pub start_time: Option<u64>,
    pub cmdline: String,
    /// Process group of the command the grant protects (`run`), which must
    /// be empty before a fast takeover.
    pub pgid: Option<u32>,
    /// The guard of the command the grant protects (`run`): it lives as
    /// long as any process of the command's tree, also those that left the
    /// group, so it must be gone before a fast takeover. Absent in grants
    /// of other holders and of versions before it (as JSON, every store
    /// reads a record without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardProcess>,
    /// Whether the grant lives by `pid`'s life (a library holder, the `run`
    /// supervisor, `--for-pid`). A grant of a bare `leasehold acquire` is not
    /// bound and lives by its TTL alone.
    pub bound: bool,
}

/// The guard process a `run` grant records ([`Holder::guard`]): its pid,
/// and its start time as `pid`'s (tells a reused pid from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardProcess {
    pub pid: u32,
    pub start_time: u64,
}

/// One holding of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub name: LeaseName,
    pub token: Token,
    pub owner: String,
    /// Whether the owner label was given explicitly (then it also scopes
    /// renew/release and makes re-acquisition idempotent).
    pub owner_explicit: bool,
    #[serde(flatten)]
    pub mode: Mode,
    pub holder: Holder,
    /// Wall-clock time of the grant; informational only.
    #[serde(with = "unix_ms")]
    pub acquired_at: SystemTime,
    #[serde(with = "millis")]
    pub ttl: Duration,
    /// Time left until the store expires the grant, as of the read.
    #[serde(with = "millis")]
    pub expires_in: Duration,
}

impl Grant {
    /// This grant's identity ([`GrantId`]).
    #[must_use]
    pub fn id(&self) -> GrantId {
        GrantId::of(self)
    }
}

/// Which grant, not only which token: a short hash of what a grant is
/// issued with and never changes — its name, token, acquisition time (in
/// ms) and holder (owner, host, boot, pid namespace, pid, start time).
///
/// A store restored from an older copy issues tokens again that sinks have
/// already seen; the grant that gets such a token again differs from the
/// first in its acquisition time and, almost always, its holder, so its
/// identity differs. A fence record that keeps the identity next to the
/// token (`leasehold::files`) then refuses the second grant. Computed, not
/// stored: every store (and every version) derives the same identity from
/// the same grant, with FNV-1a (64 bits) over the fields in a fixed order,
/// each ended by a 0 byte — a stable function, unlike std's hasher. Not a
/// secret: anyone who can read the grant can compute it.
///
/// Written as 16 lowercase hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrantId(pub u64);

impl GrantId {
    /// The identity of `grant` (see the type's docs).
    #[must_use]
    pub fn of(grant: &Grant) -> Self {
        const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let h = &grant.holder;
        let fields = [
            grant.name.as_str().to_owned(),
            grant.token.0.to_string(),
            unix_ms::to_ms(grant.acquired_at).to_string(),
            grant.owner.clone(),
            h.host.clone(),
            h.boot_id.clone(),
            h.pid_ns.map(|n| n.to_string()).unwrap_or_default(),
            h.pid.to_string(),
            h.start_time.map(|t| t.to_string()).unwrap_or_default(),
        ];
        let mut hash = OFFSET_BASIS;
        for byte in fields.iter().flat_map(|f| f.bytes().chain([0])) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
        Self(hash)
    }
}

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl FromStr for GrantId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            u64::from_str_radix(s, 16).map(GrantId).map_err(|e| e.to_string())
        } else {
            Err(format!(
                "{} is not a grant identity (16 lowercase hexadecimal digits, as `leasehold run` \
                 exports in LEASEHOLD_GRANT)",
                crate::quoted(s)
            ))
        }
    }
}

impl Serialize for GrantId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GrantId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// `leasehold migrate --bump-tokens N`: raise every name's next token
/// above everything the store may have issued, plus `by`.
///
/// A store restored from a copy taken at token T of some name may have
/// issued that name tokens up to T + k before it was lost, where k is how
/// many grants it made since the copy; `by` must be at least the largest
/// such k (any one name's; on etcd, every write to the cluster counts,
/// since tokens are revisions). Too large costs nothing but digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokensBumpParams {
    pub by: u64,
}

impl TokensBumpParams {
    /// The largest bump: tokens are stored as signed 64-bit integers
    /// (SQLite, PostgreSQL, etcd revisions), and a bump of up to 10^15
    /// leaves room for thousands of bumps more.
    pub const MAX: u64 = 1_000_000_000_000_000;

    /// `highest + by`, the new floor, when `by` is within `1..=MAX` and the
    /// sum fits a stored token.
    ///
    /// # Errors
    /// Why not ([`TokensBumpRefused`]).
    ///
    /// # Examples
    /// ```
    /// use leasehold_backend::{Token, TokensBumpParams, TokensBumpRefused};
    /// assert_eq!(TokensBumpParams { by: 10 }.floor_above(Token(5)), Ok(Token(15)));
    /// assert_eq!(TokensBumpParams { by: 0 }.floor_above(Token(5)), Err(TokensBumpRefused::OutOfRange { by: 0 }));
    /// ```
    pub fn floor_above(&self, highest: Token) -> Result<Token, TokensBumpRefused> {
        let by = self.by;
        if by == 0 || by > Self::MAX {
            return Err(TokensBumpRefused::OutOfRange { by });
        }
        highest
            .0
            .checked_add(by)
            .filter(|floor| i64::try_from(*floor).is_ok())
            .map(Token)
            .ok_or(TokensBumpRefused::PastLargest { highest, by })
    }
}

/// Why a store refused a token bump (nothing was changed), said for the
/// user by `Display`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokensBumpRefused {
    /// `by` is 0 or above [`TokensBumpParams::MAX`].
    #[error("--bump-tokens {by} is out of range (1 to {max})", max = TokensBumpParams::MAX)]
    OutOfRange { by: u64 },
    /// `highest + by` would not fit a stored token (a signed 64-bit
    /// integer).
    #[error("tokens would pass the largest storable token ({max}) after a bump of {by}", max = i64::MAX)]
    PastLargest { highest: Token, by: u64 },
}

/// What [`Backend::tokens_bump`](crate::Backend::tokens_bump) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensBumped {
    /// The highest token the store may have issued before the bump (its
    /// newest counter or floor; on etcd, the cluster's revision plus the
    /// offset).
    pub highest: Token,
    /// Every token issued from now on is above this one
    /// (`highest + by`).
    pub floor: Token,
}

/// The state of one name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseState {
    pub name: LeaseName,
    /// The newest token ever issued for the name.
    pub last_token: Token,
    /// Live grants, oldest first.
    pub grants: Vec<Grant>,
    /// Live waiter registrations, in FIFO order.
    pub waiters: Vec<QueuedWaiter>,
}

/// An owner label, and whether the caller chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub label: String,
    pub explicit: bool,
}

/// A place in a name's FIFO of waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WaiterTicket(pub u64);

/// A waiter registration as a store read it: its place, the mode it waits
/// for, and the waiting process — what proof of a waiter's death is judged
/// by (`leasehold::identity`), as a grant's holder is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedWaiter {
    pub ticket: WaiterTicket,
    #[serde(flatten)]
    pub mode: Mode,
    /// The waiting process. `None` where a store kept no record of it
    /// (etcd registrations made before leasehold recorded one): such a
    /// waiter is never proved dead, and leaves when its registration
    /// expires.
    pub holder: Option<Holder>,
}

#[derive(Debug, Clone)]
pub struct LeaseAcquireParams {
    pub name: LeaseName,
    pub owner: Owner,
    pub mode: Mode,
    pub ttl: Duration,
    pub holder: Holder,
    /// This acquirer's place in the FIFO, when it is waiting.
    pub ticket: Option<WaiterTicket>,
    /// How long a (re-made) waiter registration lives without a refresh.
    pub waiter_ttl: Duration,
    /// Tokens of grants whose holders the caller has proved dead (fast
    /// takeover); removed only if still present.
    pub evict: Vec<Token>,
    /// Tickets of waiters the caller has proved dead (their processes are
    /// gone): they leave the queue, if still in it, before this acquirer
    /// is judged — in the same transaction. The acquirer's own ticket is
    /// never removed this way.
    pub evict_waiters: Vec<WaiterTicket>,
    /// The waiting process, when this acquirer waits (`ticket`): a
    /// registration re-made at the back of the queue records it. `None`:
    /// `holder`. (A waiter is the process that waits, even when the grant
    /// it waits for is bound to no process or to another one.)
    pub waiter_holder: Option<Holder>,
    /// Whether acquiring again for the same live process renews that
    /// process's grant (same token) instead of asking for another — for
    /// registrations on behalf of a process (`acquire --for-pid`, seed
    /// 002's `touch`). Off for holders inside the calling process, whose
    /// threads must keep excluding one another. See
    /// [`crate::rules::reacquires`].
    pub reacquire_by_process: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "returned once per call, never stored in bulk")]
pub enum LeaseAcquire {
    Acquired(Grant),
    Held(Held),
}

#[derive(Debug, Clone)]
pub struct LeaseRenewParams {
    pub name: LeaseName,
    pub token: Token,
    /// When given, it must equal the grant's owner label (explicit or
    /// not); otherwise the outcome is `Lost(NotOwner)`. A grant with an
    /// explicit owner must have it given: `Lost(OwnerRequired)` otherwise.
    pub owner: Option<String>,
    /// The caller's grant ([`GrantId`]): the token's grant in the store
    /// must be this one, else `Lost(OtherGrant)` — a store that lost data
    /// issues the token again, to someone else. `None` (a token alone)
    /// acts only on a grant bound to no process: one bound to a process
    /// is that process's to end (`Lost(BoundToProcess)`).
    pub grant: Option<GrantId>,
    pub ttl: Duration,
}

/// Why a token-scoped operation found no grant to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostReason {
    /// The grant's TTL ran out — also once it has been removed since, while
    /// the name's history still records its expiry
    /// ([`rules::lost_without_grant`](crate::rules::lost_without_grant)).
    Expired,
    /// There is no such grant any more: released, taken over from a dead
    /// holder, never issued, or ended so long ago that the history no
    /// longer says how.
    Gone,
    /// The grant exists but belongs to another owner.
    NotOwner,
    /// The grant was acquired with an explicit owner, and the caller did not
    /// name it (see [`rules::owner_verdict`](crate::rules::owner_verdict)).
    OwnerRequired,
    /// The store holds the token for another grant than the caller's: it
    /// was issued again — the store lost data (wiped, flushed, restored or
    /// replaced) since the caller's grant was made — or an unbound grant
    /// was re-acquired by another process under its explicit owner.
    OtherGrant,
    /// The caller named a token alone, and its grant is bound to a
    /// process (a `run` supervisor, a library holder, `--for-pid`): that
    /// process ends it, or a caller naming its grant id.
    BoundToProcess,
    /// The store lost data since the grant was made: the grant is gone (or
    /// its token belongs to another grant) and the store's identity is not
    /// the one it had (`leasehold::Store::identity`) — wiped, flushed,
    /// evicted, deleted and made again, replaced or restored. Said by the
    /// library's keeper, which compares identities; never by a store.
    StoreLostData,
    /// The store's file was deleted or replaced since this process opened
    /// it (an embedded store): the store at the path is another one, which
    /// never had the grant.
    StoreReplaced,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "its TTL ran out",
            LostReason::Gone => "it was released or taken over (or never issued)",
            LostReason::NotOwner => "it belongs to another owner",
            LostReason::OwnerRequired => {
                "it was acquired with an explicit owner, which must be named to renew or release it"
            }
            LostReason::OtherGrant => {
                "the store holds this token for another grant: the store lost data since this grant was made (wiped, flushed, restored from a copy or replaced), or the grant was re-acquired by another process under its owner"
            }
            LostReason::BoundToProcess => {
                "it is bound to its holder's process, which alone renews and releases it (or a caller naming its grant id)"
            }
            LostReason::StoreLostData => {
                "the store lost data since this grant was made — its identity changed (it was wiped, flushed, deleted and made again, replaced or restored from a copy), so every grant it held is gone and tokens it issued may be issued again; find out what happened to the store, and before using it again raise its tokens above any a sink has seen (`leasehold migrate --bump-tokens N`)"
            }
            LostReason::StoreReplaced => {
                "the store's file was deleted or replaced since this process opened it, so the store lost the grant"
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "returned once per call, never stored in bulk")]
pub enum LeaseRenew {
    Renewed(Grant),
    Lost(LostReason),
}

#[derive(Debug, Clone)]
pub struct LeaseReleaseParams {
    pub name: LeaseName,
    pub token: Token,
    /// As [`LeaseRenewParams::owner`].
    pub owner: Option<String>,
    /// As [`LeaseRenewParams::grant`].
    pub grant: Option<GrantId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRelease {
    Released,
    Lost(LostReason),
}

#[derive(Debug, Clone)]
pub struct LeaseFenceParams {
    pub name: LeaseName,
    pub token: Token,
    /// The caller's grant, when it knows it ([`GrantId`]): the token's
    /// grant in the store must be this one (after a restore the store may
    /// hold the token for another grant). `None`: judged by token alone.
    pub grant: Option<GrantId>,
    /// Who is passing through the gate (recorded in the history).
    pub caller: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "returned once per call, never stored in bulk")]
pub enum LeaseFence {
    Passed(Grant),
    /// Refused; `newest` is the newest token ever issued for the name.
    Refused {
        newest: Option<Token>,
        reason: FenceRefusal,
    },
}

impl LeaseFence {
    /// The one wording of a refusal of `token` of `name` — what the
    /// language packages raise (`StaleToken`) — or `None` when it passed.
    #[must_use]
    pub fn refusal(&self, name: &LeaseName, token: Token) -> Option<String> {
        let LeaseFence::Refused { newest, reason } = self else {
            return None;
        };
        let newest = newest
            .map(|n| format!(" (the newest token is {n})"))
            .unwrap_or_default();
        Some(format!(
            "token {token} of {name} is stale: {reason}{newest}; stop writing — the holder of a newer token may be writing"
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceRefusal {
    /// A newer grant of the name has been issued since this token (a fact
    /// about tokens: for a shared lease the token is refused because its own
    /// grant is no longer live, while newer shared grants may be).
    Superseded,
    /// The token's grant is no longer live (expired, released, taken over,
    /// or never issued) and no newer grant has been issued.
    NotLive,
}

impl fmt::Display for FenceRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FenceRefusal::Superseded => "a newer grant exists",
            FenceRefusal::NotLive => "its grant is no longer live",
        })
    }
}

#[derive(Debug, Clone)]
pub struct WaiterEnqueueParams {
    pub name: LeaseName,
    pub mode: Mode,
    pub holder: Holder,
    pub ttl: Duration,
}

/// Leave the FIFO of `name`.
#[derive(Debug, Clone)]
pub struct WaiterRemoveParams {
    pub name: LeaseName,
    pub ticket: WaiterTicket,
}

/// Keep a waiter's registration in the FIFO of `name` for another `ttl`
/// (see [`Backend::waiter_refresh`](crate::Backend::waiter_refresh)).
#[derive(Debug, Clone)]
pub struct WaiterRefreshParams {
    pub name: LeaseName,
    pub ticket: WaiterTicket,
    pub ttl: Duration,
}

/// What [`Backend::waiter_refresh`](crate::Backend::waiter_refresh) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaiterRefresh {
    /// The registration lives another TTL, in the same place.
    Refreshed,
    /// The registration is gone (it expired, or was evicted): the next
    /// attempt makes it again, at the back of the queue.
    Gone,
    /// This store refreshes a registration only by an attempt
    /// ([`Backend::lease_acquire`](crate::Backend::lease_acquire) with the
    /// ticket), which the waiter makes instead.
    NotOffered,
}

/// How [`Backend::wait_behind`](crate::Backend::wait_behind) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behind {
    /// The waiter just ahead left the queue (or may have, or there is
    /// none): read the name again.
    Moved,
    /// The time ran out, or the wait was interrupted
    /// ([`WaitTopic::interrupt`](crate::WaitTopic::interrupt)), with no change seen.
    Still,
    /// This store cannot wake a waiter for the one just ahead of it: the
    /// waiter sleeps instead, and reads the name now and then.
    NotOffered,
}

#[derive(Debug, Clone, Default)]
pub struct LeaseListParams {
    pub live_only: bool,
}

#[derive(Debug, Clone)]
pub struct LeaseHistoryParams {
    pub name: LeaseName,
    pub limit: u32,
}

/// What happened to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryEvent {
    Granted,
    /// An explicit owner re-acquired its own live grant (same token).
    Reacquired,
    Released,
    /// A grant's TTL ran out and it was removed.
    Expired,
    /// A live grant whose holder was proved dead was taken over.
    FastTakeover,
    FencePassed,
    FenceRefused,
    /// A renew or release with a token that is not live was refused.
    StaleRefused,
}

impl HistoryEvent {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryEvent::Granted => "granted",
            HistoryEvent::Reacquired => "reacquired",
            HistoryEvent::Released => "released",
            HistoryEvent::Expired => "expired",
            HistoryEvent::FastTakeover => "fast_takeover",
            HistoryEvent::FencePassed => "fence_passed",
            HistoryEvent::FenceRefused => "fence_refused",
            HistoryEvent::StaleRefused => "stale_refused",
        }
    }

    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [
            HistoryEvent::Granted,
            HistoryEvent::Reacquired,
            HistoryEvent::Released,
            HistoryEvent::Expired,
            HistoryEvent::FastTakeover,
            HistoryEvent::FencePassed,
            HistoryEvent::FenceRefused,
            HistoryEvent::StaleRefused,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    #[serde(with = "unix_ms")]
    pub at: SystemTime,
    pub event: HistoryEvent,
    pub token: Option<Token>,
    pub owner: Option<String>,
    pub detail: String,
}

/// What a backend can do. The conformance suite skips, with a message,
/// cases a backend declares it cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[allow(clippy::struct_excessive_bools, reason = "independent capability flags")]
pub struct Capabilities {
    /// The store's clock can be shifted by a [`ClockSkew`] in tests.
    pub clock_skew: bool,
    /// The store lives on this host only (its expiry clock restarts at boot).
    pub host_local: bool,
    /// Reopening the store from its location keeps all state (durability
    /// across restart can be tested by reopening).
    pub reopenable: bool,
}

/// The write lock of a store whose every write takes one lock for the whole
/// store (SQLite's), as [`crate::Backend::write_lock`] reports it: who
/// holds it now, as the kernel says. Displayed as what follows "the write
/// lock is": `free`, `held by pid 4242 (…), which is stopped (…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteLock {
    /// Nobody holds it now.
    Free,
    /// Held by this process.
    HeldBy(leasehold_host::ProcessReport),
    /// Held by a process this one cannot name (in another pid namespace,
    /// such as another container sharing the store's directory).
    HeldUnnamed,
}

impl WriteLock {
    /// The holder is stopped or held by a debugger: it will not let go
    /// until someone acts on it.
    #[must_use]
    pub fn halted(&self) -> bool {
        matches!(self, WriteLock::HeldBy(p) if p.state.is_some_and(leasehold_host::ProcessState::is_halted))
    }
}

impl fmt::Display for WriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteLock::Free => f.write_str("free"),
            WriteLock::HeldBy(holder) => write!(f, "held by {holder}"),
            WriteLock::HeldUnnamed => f.write_str("held by a process outside this pid namespace (another container?)"),
        }
    }
}

/// Facts about a store for `doctor` and messages.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StoreInfo {
    /// Which kind of store (`sqlite`, `postgres`, `etcd`).
    pub kind: &'static str,
    /// Where it is (a path or endpoints, without secrets).
    pub location: String,
    pub schema_version: Option<u32>,
    /// Store-specific facts, as (label, value) pairs.
    pub facts: Vec<(String, String)>,
    /// What the store's own checks found wrong (integrity, schema), as
    /// (label, what is wrong and what to do) pairs; empty when nothing is.
    /// `doctor` fails on any.
    pub problems: Vec<(String, String)>,
    /// What the store's checks found worth a look but not wrong (a large
    /// write-ahead log, a file that is a copy), as (label, what was found
    /// and what to do) pairs. `doctor` prints them and still passes.
    pub warnings: Vec<(String, String)>,
}

/// Where [`Backend::store_backup`](crate::Backend::store_backup) writes its
/// copy: a path where nothing is yet (never overwritten), in a directory
/// that exists (never created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreBackupParams {
    pub dest: std::path::PathBuf,
}

/// A copy [`Backend::store_backup`](crate::Backend::store_backup) took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreBackup {
    /// Where the copy is (the destination as given).
    pub path: std::path::PathBuf,
    /// Its length.
    pub bytes: u64,
    /// When its snapshot was taken (the wall clock: for people).
    pub taken_at: SystemTime,
}

/// A shift added to a store's clock, for tests: expiry is tested by moving
/// this forward instead of sleeping. Only with the `test-clock` feature,
/// which the stores' own tests turn on: a production build has no way to
/// shift a store's clock, and no statement that adds a shift.
#[cfg(feature = "test-clock")]
#[derive(Debug, Clone, Default)]
pub struct ClockSkew(Arc<AtomicU64>);

#[cfg(feature = "test-clock")]
impl ClockSkew {
    /// Move the store's clock forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        let by = duration_nanos(by);
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |ns| Some(ns.saturating_add(by)));
    }

    #[must_use]
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_bump_says_why_with_its_numbers() {
        let refused = |by, highest| TokensBumpParams { by }.floor_above(Token(highest)).unwrap_err();
        assert_eq!(
            refused(0, 1).to_string(),
            "--bump-tokens 0 is out of range (1 to 1000000000000000)"
        );
        assert_eq!(
            refused(TokensBumpParams::MAX + 1, 1),
            TokensBumpRefused::OutOfRange {
                by: TokensBumpParams::MAX + 1
            }
        );
        let past = refused(10, i64::MAX as u64 - 5);
        assert_eq!(
            past,
            TokensBumpRefused::PastLargest {
                highest: Token(i64::MAX as u64 - 5),
                by: 10
            }
        );
        assert_eq!(
            past.to_string(),
            "tokens would pass the largest storable token (9223372036854775807) after a bump of 10"
        );
    }

    fn grant(token: u64, acquired_ms: i64, pid: u32) -> Grant {
        Grant {
            name: LeaseName::new("job").unwrap(),
            token: Token(token),
            owner: "host:1".into(),
            owner_explicit: false,
            mode: Mode::Exclusive,
            holder: Holder {
                host: "host".into(),
                boot_id: "boot".into(),
                pid_ns: Some(4),
                pid,
                start_time: Some(99),
                cmdline: "cmd".into(),
                pgid: None,
                guard: None,
                bound: true,
            },
            acquired_at: unix_ms::from_ms(acquired_ms),
            ttl: Duration::from_secs(60),
            expires_in: Duration::from_secs(60),
        }
    }

    /// The one wording of a refusal, which the CLI and Python both print.
    #[test]
    fn a_refusal_names_each_holder_and_what_keeps_the_acquirer_out() {
        let mut first = grant(7, 1_700_000_000_000, 41);
        first.holder.cmdline = "x".repeat(100);
        let held = Held {
            grants: vec![first, grant(8, 1_700_000_000_000, 42)],
            waiters_ahead: 0,
            ahead: Vec::new(),
            ticket: None,
        };
        let cut = format!("{}…", "x".repeat(HOLDER_COMMAND_MAX - 1));
        assert_eq!(
            held.refusal("job", Mode::Exclusive, None).to_string(),
            format!(
                "job is held: exclusive by host:1 (host pid 41 ({cut})), token 7, expires in 1m; exclusive by host:1 (host pid 42 (cmd)), token 8, expires in 1m"
            )
        );
        assert!(
            held.refusal("job", Mode::Exclusive, Some(Duration::from_secs(2)))
                .to_string()
                .starts_with("job is still held after waiting 2s: exclusive by host:1 (host pid 41 (")
        );
        let waiting = Held {
            grants: Vec::new(),
            waiters_ahead: 3,
            ..held.clone()
        };
        assert_eq!(waiting.to_string(), "3 waiter(s) queued ahead");
        let mut shared = grant(9, 1_700_000_000_000, 43);
        shared.mode = Mode::Shared { limit: Some(1) };
        let full = Held {
            grants: vec![shared],
            ..waiting
        };
        let said = full.by(Mode::Shared { limit: None }).to_string();
        assert!(
            said.starts_with("shared by host:1 (host pid 43 (cmd)), token 9, expires in 1m — 1 shared holder(s), and a holder asked for at most 1"),
            "{said}"
        );
    }

    #[test]
    fn a_grant_id_is_a_stable_hash_of_what_the_grant_was_issued_with() {
        let g = grant(42, 1_700_000_000_000, 7);
        // Pinned: every version and every store must compute the same id.
        assert_eq!(g.id().to_string(), "f1c4c99655537780");
        // What changes as a grant is kept does not change its id.
        let mut kept = g.clone();
        kept.expires_in = Duration::from_secs(1);
        kept.owner_explicit = true;
        kept.holder.cmdline = "other".into();
        assert_eq!(kept.id(), g.id());
        // The same token issued again, later or to another process, differs.
        assert_ne!(grant(42, 1_700_000_000_001, 7).id(), g.id());
        assert_ne!(grant(42, 1_700_000_000_000, 8).id(), g.id());
        assert_ne!(grant(43, 1_700_000_000_000, 7).id(), g.id());
    }

    #[test]
    fn a_grant_id_reads_back_as_written_and_nothing_else_parses() {
        for id in [GrantId(0), GrantId(0xab), GrantId(u64::MAX)] {
            assert_eq!(id.to_string().parse::<GrantId>(), Ok(id));
            assert_eq!(
                serde_json::from_value::<GrantId>(serde_json::to_value(id).unwrap()).unwrap(),
                id
            );
        }
        for bad in [
            "",
            "ab",
            "00000000000000AB",
            "000000000000000g",
            "00000000000000abc",
            "-0000000000000ab",
        ] {
            assert!(bad.parse::<GrantId>().is_err(), "{bad:?}");
        }
    }
}
