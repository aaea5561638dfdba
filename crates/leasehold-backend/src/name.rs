use std::fmt;

/// A lease (or queue) name: 1–255 bytes of UTF-8 without control
/// characters, and not blank.
///
/// Names are stored exactly as given, never used as a path, and never split
/// on a separator, so `../../etc/passwd` is just a name and `job` and `job/1`
/// are unrelated names on every store.
///
/// A name of nothing but whitespace (`" "`) is refused rather than shown
/// quoted: it would be an empty cell in every table, an invisible word in
/// every message, and a name no one can tell apart from another blank one
/// by looking. Names with visible characters keep their spaces, inside or
/// around them, exactly as given.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct LeaseName(String);

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a name must not be empty")]
    Empty,
    #[error(
        "a name must not be blank (only whitespace): it would show as nothing in tables and messages; use a name with a visible character"
    )]
    Blank,
    #[error("name is {0} bytes long; the limit is 255 bytes")]
    TooLong(usize),
    #[error(
        "name contains the control character {0:?} at byte {1}; names may not contain control characters (newlines, tabs, NUL)"
    )]
    Control(char, usize),
}

impl LeaseName {
    /// The longest name accepted, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validate a name.
    ///
    /// # Errors
    /// [`NameError`] if the name is empty, blank, longer than 255 bytes or
    /// contains a control character.
    ///
    /// # Examples
    /// ```
    /// use leasehold_backend::LeaseName;
    /// assert!(LeaseName::new("nightly-report").is_ok());
    /// assert!(LeaseName::new("bad\nname").is_err());
    /// assert!(LeaseName::new(" ").is_err());
    /// ```
    pub fn new(name: impl Into<String>) -> Result<Self, NameError> {
        let name = Self::stored(name)?;
        if name.0.trim().is_empty() {
            return Err(NameError::Blank);
        }
        Ok(name)
    }

    /// A name read back from a store, held to the rules names have always
    /// had (not empty, at most 255 bytes, no control characters) but not
    /// to the newer blank rule of [`LeaseName::new`]: a blank name stored
    /// by an earlier leasehold is shown (and expires) like any other,
    /// rather than making the store read as damaged.
    ///
    /// # Errors
    /// [`NameError`] if the name is empty, longer than 255 bytes or
    /// contains a control character.
    pub fn stored(name: impl Into<String>) -> Result<Self, NameError> {
        let name = name.into();
        if name.is_empty() {
            return Err(NameError::Empty);
        }
        if name.len() > Self::MAX_LEN {
            return Err(NameError::TooLong(name.len()));
        }
        if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
            return Err(NameError::Control(c, at));
        }
        Ok(Self(name))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl<'de> serde::Deserialize<'de> for LeaseName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_and_odd_but_printable_names() {
        for ok in [
            "a",
            "job/1",
            "../../etc/passwd",
            "/abs",
            "it's; DROP TABLE x",
            "ünï",
            &"x".repeat(255),
        ] {
            assert_eq!(LeaseName::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_blank_names_but_keeps_spaces_around_visible_ones() {
        for blank in [" ", "   ", "\u{a0}", "\u{3000}", " \u{2003} "] {
            assert_eq!(LeaseName::new(blank), Err(NameError::Blank), "{blank:?}");
            assert_eq!(
                LeaseName::stored(blank).unwrap().as_str(),
                blank,
                "one stored earlier still reads back"
            );
        }
        for spaced in [" job", "job ", "a b", " . "] {
            assert_eq!(LeaseName::new(spaced).unwrap().as_str(), spaced);
        }
        assert_eq!(LeaseName::stored(""), Err(NameError::Empty));
        assert_eq!(LeaseName::stored("a\nb"), Err(NameError::Control('\n', 1)));
    }

    #[test]
    fn refuses_empty_long_and_control_characters() {
        assert_eq!(LeaseName::new(""), Err(NameError::Empty));
        assert_eq!(LeaseName::new("x".repeat(256)), Err(NameError::TooLong(256)));
        assert_eq!(LeaseName::new("a\ntoken=999"), Err(NameError::Control('\n', 1)));
        assert_eq!(LeaseName::new("a\0b"), Err(NameError::Control('\0', 1)));
        // 255 bytes but multi-byte characters: measured in bytes, not chars.
        assert!(LeaseName::new("é".repeat(128)).is_err());
    }
}
