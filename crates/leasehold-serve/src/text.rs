//! Stored text and figures as the page shows them to people.
//!
//! Stored text — names, owners, command lines, errors, payloads — may hold
//! characters that hide or reorder what is around them (a bidi override
//! makes `bidi\u{202e}evil` read "bidilive"). `maud` escapes HTML; this
//! module makes such text inert as well: every character the library
//! says hides or reorders text ([`leasehold::hides_or_reorders`], the set
//! the CLI escapes) is shown as a visible `\u{…}` escape, and the text is
//! isolated (`<bdi>`) so a right-to-left name cannot reorder the cells and
//! words beside it. Attributes and SVG, which cannot hold markup, get the
//! escaped string ([`plain`]).
//!
//! Durations, times and counts are written as the library's timeline
//! writes them for people (`leasehold::timeline::words`): one way on the
//! page, in the terminal and in `assets/app.js`'s countdowns.

use std::time::SystemTime;

use maud::{Markup, html};

/// Stored text as inert HTML: isolated, with every hidden or reordering
/// character shown as a marked escape.
#[must_use]
pub fn shown(s: &str) -> Markup {
    if !s.chars().any(leasehold::hides_or_reorders) {
        return html! { bdi { (s) } };
    }
    let mut parts: Vec<(bool, String)> = Vec::new();
    for c in s.chars() {
        let hidden = leasehold::hides_or_reorders(c);
        match parts.last_mut() {
            Some((h, run)) if *h == hidden && !hidden => run.push(c),
            _ => parts.push((hidden, c.to_string())),
        }
    }
    html! {
        bdi {
            @for (hidden, run) in &parts {
                @if *hidden {
                    @let c = run.chars().next().unwrap_or_default();
                    span.esc title={ "U+" (format!("{:04X}", u32::from(c))) ", a character that hides or reorders text" } {
                        (c.escape_unicode().to_string())
                    }
                } @else {
                    (run)
                }
            }
        }
    }
}

/// Stored text for an attribute, a tooltip or SVG: hidden and reordering
/// characters as `\u{…}` escapes.
#[must_use]
pub fn plain(s: &str) -> String {
    leasehold::escape_hidden(s)
}

/// At most `max` characters of `s`, a cut marked with `…` (the one
/// cutting rule, `leasehold::shorten`).
pub use leasehold::shorten;

pub use leasehold::timeline::words::{ago, clock, count, duration, reword};

/// A `<time>` element: the time for people, exact in its tooltip.
#[must_use]
pub fn time(t: SystemTime) -> Markup {
    let exact = leasehold::format_time(t);
    html! { time datetime=(exact) title=(exact) { (clock(t)) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_shown_as_escapes_in_logical_order() {
        let html = shown("bidi\u{202e}evil").into_string();
        assert!(!html.contains('\u{202e}'), "{html}");
        let text: String = {
            // The text a reader sees: tags dropped.
            let mut out = String::new();
            let mut tag = false;
            for c in html.chars() {
                match c {
                    '<' => tag = true,
                    '>' => tag = false,
                    c if !tag => out.push(c),
                    _ => {}
                }
            }
            out
        };
        assert_eq!(text, "bidi\\u{202e}evil");
        assert_eq!(plain("a\u{200b}b"), "a\\u{200b}b");
        assert_eq!(shown("<b>").into_string(), "<bdi>&lt;b&gt;</bdi>");
    }
}
