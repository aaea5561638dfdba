//! The fence record: the highest fencing token ever written to a file, as a
//! decimal number on one line. It only moves up, it is itself replaced
//! atomically and durably, and a record that does not parse is an error —
//! never reset, since a reset would let a stale holder write again.

use super::atomic::write_target;
use super::error::FileError;
use super::target::Target;
use crate::Token;

/// A record longer than this is not a token.
const MAX_LEN: usize = 32;

/// The highest token recorded, or `None` when there is no record yet.
pub fn read(fence: &Target) -> Result<Option<Token>, FileError> {
    let Some(data) = fence.read()? else {
        return Ok(None);
    };
    parse(&data).map(Some).map_err(|reason| FileError::CorruptFence {
        path: fence.path.clone(),
        reason,
    })
}

/// Parse a fence record: one decimal token, optionally followed by a
/// newline. The reason when it is not one (the caller names the file).
///
/// # Errors
/// Anything but a decimal `u64` on one line, or more than 32 bytes.
///
/// # Examples
/// ```
/// use leasehold::{Token, files::parse_fence_record};
/// assert_eq!(parse_fence_record(b"42\n"), Ok(Token(42)));
/// assert!(parse_fence_record(b"+42").is_err());
/// ```
pub fn parse(data: &[u8]) -> Result<Token, String> {
    if data.len() > MAX_LEN {
        return Err(format!("{} bytes, longer than any token", data.len()));
    }
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    if line.is_empty() || !line.iter().all(u8::is_ascii_digit) {
        return Err(format!("{:?} is not a decimal token", String::from_utf8_lossy(data)));
    }
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Token)
        .ok_or_else(|| format!("{:?} is out of range", String::from_utf8_lossy(line)))
}

/// Refuse `token` if it is lower than the record (a stale writer of
/// `data_path`); otherwise raise the record to `token`, durably, before the
/// caller writes. The caller holds the lock that serializes writers.
pub fn check_and_advance(data_path: &std::path::Path, fence: &Target, token: Token) -> Result<(), FileError> {
    match read(fence)? {
        Some(highest) if token < highest => Err(FileError::StaleToken {
            path: data_path.to_owned(),
            token,
            highest,
        }),
        Some(highest) if token == highest => Ok(()),
        _ => write_target(fence, format!("{token}\n").as_bytes(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_a_decimal_token_on_one_line() {
        assert_eq!(parse(b"42\n"), Ok(Token(42)));
        assert_eq!(parse(b"42"), Ok(Token(42)));
        assert_eq!(parse(b"18446744073709551615\n"), Ok(Token(u64::MAX)));
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
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
