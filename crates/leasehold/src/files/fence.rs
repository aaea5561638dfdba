//! The fence record: the highest fencing token ever written to a file and,
//! when the writer said, the grant that wrote it — one line, `TOKEN` or
//! `TOKEN GRANT` (a [`GrantId`]). It only moves up, it is itself replaced
//! atomically and durably, and a record that does not parse is an error —
//! never reset, since a reset would let a stale holder write again.
//!
//! The grant is there for stores restored from an older copy, which issue
//! tokens again: a second grant with the token of the record is refused
//! even though its token is not lower (docs/STATE-FILES.md, "Fenced
//! writes", has the table of old and new writers and records).

use std::fmt;

use super::atomic::write_target;
use super::error::FileError;
use super::target::Target;
use crate::{Grant, GrantId, Token};

/// A record longer than this is not a fence record (20 digits, a space and
/// 16 hexadecimal digits fit).
const MAX_LEN: usize = 64;

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
    pub fn with_grant_from_env(token: Token) -> Result<Self, String> {
        let ours = std::env::var(TOKEN_VAR).ok().and_then(|t| t.parse::<Token>().ok()) == Some(token);
        let grant = match std::env::var_os(GRANT_VAR) {
            Some(grant) if ours => Some(
                grant
                    .to_str()
                    .ok_or_else(|| format!("{GRANT_VAR} is not text"))?
                    .parse::<GrantId>()
                    .map_err(|e| format!("{GRANT_VAR}: {e}"))?,
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
pub fn read(fence: &Target) -> Result<Option<Fence>, FileError> {
    let Some(data) = fence.read()? else {
        return Ok(None);
    };
    parse(&data).map(Some).map_err(|reason| FileError::CorruptFence {
        path: fence.path.clone(),
        reason,
    })
}

/// Parse a fence record: one decimal token, optionally a space and a grant
/// identity, optionally a newline. The reason when it is not one (the
/// caller names the file).
///
/// # Errors
/// Anything else, or more than 64 bytes.
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
pub fn parse(data: &[u8]) -> Result<Fence, String> {
    if data.len() > MAX_LEN {
        return Err(format!("{} bytes, longer than any fence record", data.len()));
    }
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    let (token, grant) = match line.iter().position(|&b| b == b' ') {
        Some(space) => (&line[..space], Some(&line[space + 1..])),
        None => (line, None),
    };
    if token.is_empty() || !token.iter().all(u8::is_ascii_digit) {
        return Err(format!("{:?} is not a decimal token", String::from_utf8_lossy(data)));
    }
    let token = std::str::from_utf8(token)
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Token)
        .ok_or_else(|| format!("{:?} is out of range", String::from_utf8_lossy(token)))?;
    let grant = grant
        .map(|g| {
            std::str::from_utf8(g)
                .ok()
                .filter(|g| g.len() == 16)
                .and_then(|g| g.parse::<GrantId>().ok())
                .ok_or_else(|| format!("{:?} is not a grant identity", String::from_utf8_lossy(g)))
        })
        .transpose()?;
    Ok(Fence { token, grant })
}

/// What a fenced write does to a record: the refusal, or the record to
/// write first (`None`: the record stays as it is).
///
/// - A lower token is refused; a higher one is recorded, with its grant.
/// - An equal token with a different grant than the record's is refused:
///   the token was issued again (a store restored from an older copy).
/// - An equal token where either side names no grant is judged by the
///   token alone, as before grants were recorded; a grant writing an equal
///   token to a record without one is recorded, so that from then on a
///   third grant with that token is refused.
fn verdict(record: Option<Fence>, write: Fence) -> Result<Option<Fence>, Refused> {
    let Some(record) = record else {
        return Ok(Some(write));
    };
    match write.token.cmp(&record.token) {
        // Planted bug (scripts/mutants): a lower token writes, the mark stays.
        std::cmp::Ordering::Less
            if leasehold_backend::mutant::strikes(
                leasehold_backend::mutant::Mutant::FenceRecordSkipsComparison,
                || true,
            ) =>
        {
            Ok(None)
        }
        std::cmp::Ordering::Less => Err(Refused::Lower(record.token)),
        std::cmp::Ordering::Greater => Ok(Some(write)),
        std::cmp::Ordering::Equal => match (record.grant, write.grant) {
            (Some(recorded), Some(grant)) if recorded != grant => Err(Refused::OtherGrant(recorded, grant)),
            (None, Some(_)) => Ok(Some(write)),
            _ => Ok(None),
        },
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Refused {
    Lower(Token),
    OtherGrant(GrantId, GrantId),
}

/// Refuse `write` if the record says it is stale (see [`verdict`]);
/// otherwise raise the record, durably, before the caller writes. The
/// caller holds the lock that serializes writers.
pub fn check_and_advance(data_path: &std::path::Path, fence: &Target, write: Fence) -> Result<(), FileError> {
    match verdict(read(fence)?, write) {
        Err(Refused::Lower(highest)) => Err(FileError::StaleToken {
            path: data_path.to_owned(),
            token: write.token,
            highest,
        }),
        Err(Refused::OtherGrant(recorded, grant)) => Err(FileError::ReissuedToken {
            path: data_path.to_owned(),
            token: write.token,
            recorded,
            grant,
        }),
        Ok(None) => Ok(()),
        Ok(Some(record)) => write_target(fence, format!("{record}\n").as_bytes(), None),
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
        assert_eq!(verdict(None, fence(5, Some(1))), Ok(Some(fence(5, Some(1)))));
        // Lower: refused, whatever the grants.
        assert_eq!(
            verdict(Some(fence(5, Some(1))), fence(4, Some(1))),
            Err(Refused::Lower(Token(5)))
        );
        assert_eq!(
            verdict(Some(fence(5, None)), fence(4, None)),
            Err(Refused::Lower(Token(5)))
        );
        // Higher: recorded, with the writer's grant or without one.
        assert_eq!(
            verdict(Some(fence(5, Some(1))), fence(6, None)),
            Ok(Some(fence(6, None)))
        );
        assert_eq!(
            verdict(Some(fence(5, None)), fence(6, Some(2))),
            Ok(Some(fence(6, Some(2))))
        );
        // Equal, same grant: passes, record unchanged.
        assert_eq!(verdict(Some(fence(5, Some(1))), fence(5, Some(1))), Ok(None));
        // Equal, another grant: the token was issued again.
        assert_eq!(
            verdict(Some(fence(5, Some(1))), fence(5, Some(2))),
            Err(Refused::OtherGrant(GrantId(1), GrantId(2)))
        );
        // Equal, a side without a grant: judged by the token alone; a grant
        // meeting a token-only record is recorded.
        assert_eq!(verdict(Some(fence(5, Some(1))), fence(5, None)), Ok(None));
        assert_eq!(verdict(Some(fence(5, None)), fence(5, None)), Ok(None));
        assert_eq!(
            verdict(Some(fence(5, None)), fence(5, Some(2))),
            Ok(Some(fence(5, Some(2))))
        );
    }
}
