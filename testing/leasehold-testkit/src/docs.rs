//! What the docs say, read as the tests that hold them to the code read it.

/// The names a Markdown table lists in its first column, in backticks
/// (`` | `name` | … ``), for the table of `text` between the first
/// `after` and the `before` that follows it.
///
/// # Panics
/// When `text` has no `after` followed by `before`: the table the test
/// holds to the code is not there.
#[must_use]
pub fn table_names<'a>(text: &'a str, after: &str, before: &str) -> Vec<&'a str> {
    let (table, _) = text
        .split_once(after)
        .and_then(|(_, rest)| rest.split_once(before))
        .unwrap_or_else(|| panic!("no table between {after:?} and {before:?}"));
    table
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|(name, _)| name))
        .collect()
}
