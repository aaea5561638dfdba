//! The fence record: the highest fencing token ever written to a file and,
//! when the writer said, the grant that wrote it and the lease it is of —
//! one line, `TOKEN`, `TOKEN GRANT` (a [`GrantId`]), and either followed
//! by ` lease NAME`. It only moves up, it is itself replaced atomically
//! and durably, and a record that does not parse is an error — never
//! reset, since a reset would let a stale holder write again.
//!
//! The grant is there for stores restored from an older copy, which issue
//! tokens again: a second grant with the token of the record is refused
//! even though its token is not lower (docs/STATE-FILES.md, "Fenced
//! writes", has the table of old and new writers and records). The lease
//! is there because tokens of two leases say nothing about each other: a
//! token of another lease is refused, naming both, unless the writer says
//! the file now belongs to its lease.

use std::fmt;

use super::atomic::write_target;
use super::error::FileError;
use super::target::Target;
use crate::{Grant, GrantId, Token};

/// A record longer than this is not a fence record (20 digits, a space,
/// 16 hexadecimal digits, ` lease ` and a 255-byte name fit).
const MAX_LEN: usize = 320;

/// What comes before the lease's name in a record.
const LEASE_MARK: &str = " lease ";

/// What a fenced write presents and a fence record keeps: a token and, when
/// known, the grant holding it. A bare [`Token`] converts into a `Fence`
/// without a grant, judged by its token alone.
///
/// # Examples
///
/// ```
/// use leasehold::{GrantId, Token, files::Fence};
/// let fence = Fence { token: Token(42), grant: Some(GrantId(0x1f)) };
/// assert_eq!(fence.to_string(), "42 000000000000001f");
/// assert_eq!(Fence::from(Token(7)).to_string(), "7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub token: Token,
    pub grant: Option<GrantId>,
}

/// The variable `leasehold run` sets to the grant's identity
/// ([`GrantId`]), next to `LEASEHOLD_TOKEN`.
pub const GRANT_VAR: &str = "LEASEHOLD_GRANT";

/// The variable `leasehold run` sets to the grant's token.
pub const TOKEN_VAR: &str = "LEASEHOLD_TOKEN";

/// The variable `leasehold run` sets to the lease's name.
pub const NAME_VAR: &str = "LEASEHOLD_NAME";

/// The lease of the `leasehold run` this process runs under when `token`
/// is that grant's (`LEASEHOLD_TOKEN` equal to it and `LEASEHOLD_NAME`
/// set): a command under `run` names its lease without passing anything.
#[must_use]
pub fn lease_from_env(token: Token) -> Option<String> {
    let ours = std::env::var(TOKEN_VAR).ok().and_then(|t| t.parse::<Token>().ok()) == Some(token);
    ours.then(|| std::env::var(NAME_VAR).ok())
        .flatten()
        .filter(|n| !n.is_empty())
}

/// A fenced write's grant is of one lease and the caller named another
/// ([`writer_lease`]): which lease the token is of cannot be told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the fence is a grant of lease {own}, but the lease named is {named}")]
pub struct LeaseMismatch {
    pub own: String,
    pub named: String,
}

/// The lease a fenced write's token is of, for [`FencedFile::with_lease`](super::FencedFile::with_lease):
/// `own` — the lease of the grant the writer presents, when that says (a
/// lease's own name) — else `named`, the lease the caller named.
///
/// # Errors
/// [`LeaseMismatch`] when both are given and differ.
///
/// # Examples
/// ```
/// use leasehold::files::writer_lease;
/// let named = || Some("nightly".to_owned());
/// assert_eq!(writer_lease(None, named()), Ok(named()));
/// assert_eq!(writer_lease(named(), named()), Ok(named()));
/// assert!(writer_lease(Some("hourly".into()), named()).is_err());
/// ```
pub fn writer_lease(own: Option<String>, named: Option<String>) -> Result<Option<String>, LeaseMismatch> {
    match (own, named) {
        (Some(own), Some(named)) if own != named => Err(LeaseMismatch { own, named }),
        (own, named) => Ok(own.or(named)),
    }
}

/// A whole fence record: the [`Fence`] and, when the writer named it, the
/// lease the token is of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub fence: Fence,
    pub lease: Option<String>,
}

/// Why bytes are not a fence record ([`parse`], [`parse_record`]); the
/// caller names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceRecordError {
    /// Longer than any record (the length in bytes).
    #[error("{0} bytes, longer than any fence record")]
    TooLong(usize),
    /// After ` lease `: empty, not UTF-8, or holding a control character.
    #[error("{0:?} is not a lease name")]
    NotALeaseName(String),
    /// The token is not decimal digits (the whole record, as text).
    #[error("{0:?} is not a decimal token")]
    NotAToken(String),
    /// The token does not fit in 64 bits.
    #[error("{0:?} is out of range")]
    OutOfRange(String),
    /// After the token: not 16 hexadecimal digits.
    #[error("{0:?} is not a grant identity")]
    NotAGrant(String),
}

/// Why `LEASEHOLD_GRANT` cannot name the grant of this process's token
/// ([`Fence::with_grant_from_env`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantEnvError {
    /// Not UTF-8.
    #[error("{} is not text", GRANT_VAR)]
    NotText,
    /// Not a grant identity (why, in words).
    #[error("{var}: {0}", var = GRANT_VAR)]
    NotAGrant(String),
}

/// The record's line, without its newline.
impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fence.fmt(f)?;
        match &self.lease {
            Some(lease) => write!(f, "{LEASE_MARK}{lease}"),
            None => Ok(()),
        }
    }
}

impl Fence {
    /// The fence of `grant`: its token and its identity.
    #[must_use]
    pub fn of(grant: &Grant) -> Self {
        Self {
            token: grant.token,
            grant: Some(grant.id()),
        }
    }

    /// `token`, with the grant of the `leasehold run` this process runs
    /// under when `token` is that grant's (`LEASEHOLD_TOKEN` equal to it and
    /// `LEASEHOLD_GRANT` set): so a command under `run` names its grant
    /// without passing anything. Any other token is taken alone — the grant
    /// in the environment is not its grant.
    ///
    /// # Errors
    ///
    /// A `LEASEHOLD_GRANT` that is not a grant identity, for this token
    /// (rather than silently writing without it).
    pub fn with_grant_from_env(token: Token) -> Result<Self, GrantEnvError> {
        let ours = std::env::var(TOKEN_VAR).ok().and_then(|t| t.parse::<Token>().ok()) == Some(token);
        let grant = match std::env::var_os(GRANT_VAR) {
            Some(grant) if ours => Some(
                grant
                    .to_str()
                    .ok_or(GrantEnvError::NotText)?
                    .parse::<GrantId>()
                    .map_err(GrantEnvError::NotAGrant)?,
            ),
            _ => None,
        };
        Ok(Self { token, grant })
    }
}

impl From<Token> for Fence {
    fn from(token: Token) -> Self {
        Self { token, grant: None }
    }
}

impl From<&Grant> for Fence {
    fn from(grant: &Grant) -> Self {
        Self::of(grant)
    }
}

/// The record's line, without its newline.
impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.grant {
            Some(grant) => write!(f, "{} {grant}", self.token),
            None => write!(f, "{}", self.token),
        }
    }
}

/// The record, or `None` when there is none yet.
pub fn read(fence: &Target) -> Result<Option<Record>, FileError> {
    let Some(data) = fence.read()? else {
        return Ok(None);
    };
    parse_record(&data).map(Some).map_err(|reason| FileError::CorruptFence {
        path: fence.path.clone(),
        reason,
    })
}

/// Parse a fence record's token and grant: one decimal token, optionally a
/// space and a grant identity, optionally ` lease NAME` (see
/// [`parse_record`]), optionally a newline. The reason when it is not one
/// (the caller names the file).
///
/// # Errors
/// [`FenceRecordError`]: anything else, or more than 64 bytes.
///
/// # Examples
/// ```
/// use leasehold::{GrantId, Token, files::{Fence, parse_fence_record}};
/// assert_eq!(parse_fence_record(b"42\n"), Ok(Fence::from(Token(42))));
/// assert_eq!(
///     parse_fence_record(b"42 00000000000000ff\n"),
///     Ok(Fence { token: Token(42), grant: Some(GrantId(255)) })
/// );
/// assert!(parse_fence_record(b"+42").is_err());
/// ```
pub fn parse(data: &[u8]) -> Result<Fence, FenceRecordError> {
    parse_record(data).map(|r| r.fence)
}

/// Parse a whole fence record, the lease's name included.
///
/// # Errors
/// As [`parse`]; a lease name that is empty or holds a control character.
///
/// # Examples
/// ```
/// use leasehold::{Token, files::parse_fence_record_with_lease};
/// let record = parse_fence_record_with_lease(b"42 lease nightly report\n")?;
/// assert_eq!((record.fence.token, record.lease.as_deref()), (Token(42), Some("nightly report")));
/// # Ok::<(), leasehold::files::FenceRecordError>(())
/// ```
pub fn parse_record(data: &[u8]) -> Result<Record, FenceRecordError> {
    if data.len() > MAX_LEN {
        return Err(FenceRecordError::TooLong(data.len()));
    }
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    // The name comes last and may hold spaces; neither a token nor a grant
    // holds the mark.
    let mark = LEASE_MARK.as_bytes();
    let (line, lease) = match line.windows(mark.len()).position(|w| w == mark) {
        Some(at) => {
            let name = std::str::from_utf8(&line[at + mark.len()..])
                .ok()
                .filter(|n| !n.is_empty() && !n.chars().any(char::is_control))
                .ok_or_else(|| {
                    FenceRecordError::NotALeaseName(String::from_utf8_lossy(&line[at + mark.len()..]).into_owned())
                })?;
            (&line[..at], Some(name.to_owned()))
        }
        None => (line, None),
    };
    let (token, grant) = match line.iter().position(|&b| b == b' ') {
        Some(space) => (&line[..space], Some(&line[space + 1..])),
        None => (line, None),
    };
    if token.is_empty() || !token.iter().all(u8::is_ascii_digit) {
        return Err(FenceRecordError::NotAToken(String::from_utf8_lossy(data).into_owned()));
    }
    let token = std::str::from_utf8(token)
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Token)
        .ok_or_else(|| FenceRecordError::OutOfRange(String::from_utf8_lossy(token).into_owned()))?;
    let grant = grant
        .map(|g| {
            std::str::from_utf8(g)
                .ok()
                .filter(|g| g.len() == 16)
                .and_then(|g| g.parse::<GrantId>().ok())
                .ok_or_else(|| FenceRecordError::NotAGrant(String::from_utf8_lossy(g).into_owned()))
        })
        .transpose()?;
    Ok(Record {
        fence: Fence { token, grant },
        lease,
    })
}

/// What a fenced write does to a record: the refusal, or the record to
/// write first (`None`: the record stays as it is).
///
/// - A record of another lease than the writer's refuses it, whatever the
///   tokens (tokens of two leases say nothing about each other), unless the
///   writer says the file now belongs to its lease (`new_lease`): then the
///   writer's record replaces it.
/// - A lower token is refused; a higher one is recorded, with its grant
///   and lease.
/// - An equal token with a different grant than the record's is refused:
///   the token was issued again (a store restored from an older copy).
/// - An equal token where either side names no grant is judged by the
///   token alone, as before grants were recorded; a grant (or a lease)
///   writing an equal token to a record without one is recorded, so that
///   from then on a third grant with that token is refused. A side that
///   names no lease is judged as before leases were recorded.
fn verdict(record: Option<Record>, write: Record, new_lease: bool) -> Result<Option<Record>, Refused> {
    let Some(record) = record else {
        return Ok(Some(write));
    };
    if let (Some(recorded), Some(lease)) = (&record.lease, &write.lease)
        && recorded != lease
    {
        return if new_lease {
            Ok(Some(write))
        } else {
            Err(Refused::OtherLease(record))
        };
    }
    match write.fence.token.cmp(&record.fence.token) {
        // Planted bug (scripts/mutants): a lower token writes, the mark stays.
        std::cmp::Ordering::Less
            if leasehold_backend::mutant::strikes(
                leasehold_backend::mutant::Mutant::FenceRecordSkipsComparison,
                || true,
            ) =>
        {
            Ok(None)
        }
        std::cmp::Ordering::Less => Err(Refused::Lower(record.fence.token, record.lease)),
        std::cmp::Ordering::Greater => Ok(Some(write)),
        std::cmp::Ordering::Equal => match (record.fence.grant, write.fence.grant) {
            (Some(recorded), Some(grant)) if recorded != grant => Err(Refused::OtherGrant(recorded, grant)),
            (recorded, grant) => {
                let merged = Record {
                    fence: Fence {
                        token: record.fence.token,
                        grant: grant.or(recorded),
                    },
                    lease: write.lease.or_else(|| record.lease.clone()),
                };
                Ok((merged != record).then_some(merged))
            }
        },
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Refused {
    Lower(Token, Option<String>),
    OtherGrant(GrantId, GrantId),
    OtherLease(Record),
}

/// Refuse `write` if the record says it is stale (see [`verdict`]);
/// otherwise raise the record, durably, before the caller writes. The
/// caller holds the lock that serializes writers.
pub fn check_and_advance(
    data_path: &std::path::Path,
    fence: &Target,
    write: Record,
    new_lease: bool,
) -> Result<(), FileError> {
    let token = write.fence.token;
    match verdict(read(fence)?, write.clone(), new_lease) {
        Err(Refused::Lower(highest, lease)) => Err(FileError::StaleToken {
            path: data_path.to_owned(),
            token,
            highest,
            lease,
        }),
        Err(Refused::OtherGrant(recorded, grant)) => Err(FileError::ReissuedToken {
            path: data_path.to_owned(),
            token,
            recorded,
            grant,
        }),
        Err(Refused::OtherLease(recorded)) => Err(FileError::OtherLease {
            path: data_path.to_owned(),
            token,
            lease: write.lease.unwrap_or_default(),
            recorded_token: recorded.fence.token,
            recorded_lease: recorded.lease.unwrap_or_default(),
        }),
        Ok(None) => Ok(()),
        Ok(Some(record)) => write_target(fence, format!("{record}\n").as_bytes(), None, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(token: u64, grant: Option<u64>) -> Fence {
        Fence {
            token: Token(token),
            grant: grant.map(GrantId),
        }
    }

    fn rec(token: u64, grant: Option<u64>) -> Record {
        Record {
            fence: fence(token, grant),
            lease: None,
        }
    }

    fn of(token: u64, lease: &str) -> Record {
        Record {
            fence: fence(token, None),
            lease: Some(lease.to_owned()),
        }
    }

    #[test]
    fn parses_a_token_and_an_optional_grant_on_one_line() {
        assert_eq!(parse(b"42\n"), Ok(fence(42, None)));
        assert_eq!(parse(b"42"), Ok(fence(42, None)));
        assert_eq!(parse(b"18446744073709551615\n"), Ok(fence(u64::MAX, None)));
        assert_eq!(parse(b"7 00000000000000ab\n"), Ok(fence(7, Some(0xab))));
        assert_eq!(
            parse(b"18446744073709551615 ffffffffffffffff\n"),
            Ok(fence(u64::MAX, Some(u64::MAX)))
        );
        for bad in [
            &b""[..],
            b"\n",
            b"+4\n",
            b"4 \n",
            b"-1",
            b"4\n\n",
            b"x",
            b"18446744073709551616",
            &[b'9'; 40],
            b" 00000000000000ab",
            b"4 00000000000000AB",
            b"4 00000000000000a",
            b"4 00000000000000abc",
            b"4  00000000000000ab",
            b"4 00000000000000ab ",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        for f in [
            fence(1, None),
            fence(99, Some(0)),
            fence(u64::MAX, Some(0x0123_4567_89ab_cdef)),
        ] {
            assert_eq!(parse(format!("{f}\n").as_bytes()), Ok(f));
        }
    }

    #[test]
    fn the_verdict_refuses_lower_tokens_and_other_grants_of_the_same_token() {
        // No record: recorded as written.
        assert_eq!(verdict(None, rec(5, Some(1)), false), Ok(Some(rec(5, Some(1)))));
        // Lower: refused, whatever the grants.
        assert_eq!(
            verdict(Some(rec(5, Some(1))), rec(4, Some(1)), false),
            Err(Refused::Lower(Token(5), None))
        );
        assert_eq!(
            verdict(Some(rec(5, None)), rec(4, None), false),
            Err(Refused::Lower(Token(5), None))
        );
        // Higher: recorded, with the writer's grant or without one.
        assert_eq!(
            verdict(Some(rec(5, Some(1))), rec(6, None), false),
            Ok(Some(rec(6, None)))
        );
        assert_eq!(
            verdict(Some(rec(5, None)), rec(6, Some(2)), false),
            Ok(Some(rec(6, Some(2))))
        );
        // Equal, same grant: passes, record unchanged.
        assert_eq!(verdict(Some(rec(5, Some(1))), rec(5, Some(1)), false), Ok(None));
        // Equal, another grant: the token was issued again.
        assert_eq!(
            verdict(Some(rec(5, Some(1))), rec(5, Some(2)), false),
            Err(Refused::OtherGrant(GrantId(1), GrantId(2)))
        );
        // Equal, a side without a grant: judged by the token alone; a grant
        // meeting a token-only record is recorded.
        assert_eq!(verdict(Some(rec(5, Some(1))), rec(5, None), false), Ok(None));
        assert_eq!(verdict(Some(rec(5, None)), rec(5, None), false), Ok(None));
        assert_eq!(
            verdict(Some(rec(5, None)), rec(5, Some(2)), false),
            Ok(Some(rec(5, Some(2))))
        );
    }

    #[test]
    fn a_record_names_its_lease_and_another_lease_is_refused_unless_the_file_moves_to_it() {
        assert_eq!(parse_record(b"10 lease other job\n"), Ok(of(10, "other job")));
        assert_eq!(
            parse_record(b"10 00000000000000ab lease a\n").map(|r| r.fence),
            Ok(fence(10, Some(0xab)))
        );
        assert_eq!(parse(b"10 lease a\n"), Ok(fence(10, None)));
        for bad in [&b"10 lease \n"[..], b"10 lease a\tb", b"lease a"] {
            assert!(parse_record(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse_record(format!("{}\n", of(3, "a b")).as_bytes()), Ok(of(3, "a b")));
        // Another lease: refused whatever the tokens, the record named.
        assert_eq!(
            verdict(Some(of(10, "b")), of(3, "a"), false),
            Err(Refused::OtherLease(of(10, "b")))
        );
        assert_eq!(
            verdict(Some(of(3, "a")), of(10, "b"), false),
            Err(Refused::OtherLease(of(3, "a")))
        );
        // ... unless the file now belongs to the writer's lease.
        assert_eq!(verdict(Some(of(10, "b")), of(3, "a"), true), Ok(Some(of(3, "a"))));
        // The same lease: tokens compared, the lease named in a refusal.
        assert_eq!(
            verdict(Some(of(10, "a")), of(3, "a"), false),
            Err(Refused::Lower(Token(10), Some("a".into())))
        );
        assert_eq!(verdict(Some(of(3, "a")), of(4, "a"), false), Ok(Some(of(4, "a"))));
        // No lease on one side: by token alone; an equal token names its lease.
        assert_eq!(
            verdict(Some(rec(10, None)), of(3, "a"), false),
            Err(Refused::Lower(Token(10), None))
        );
        assert_eq!(verdict(Some(rec(3, None)), of(3, "a"), false), Ok(Some(of(3, "a"))));
        assert_eq!(verdict(Some(of(3, "a")), rec(3, None), false), Ok(None));
    }
}
