//! `history NAME --timeline`: the library's timeline model
//! (`leasehold::timeline`) drawn in Unicode blocks for the terminal — the
//! status page draws the same model as SVG.

#![allow(clippy::cast_precision_loss, reason = "columns and seconds, far below 2^52")]

use leasehold::timeline::words::count;
use leasehold::timeline::{Bar, End, Timeline, axis_label};
use std::fmt::Write as _;
use std::time::SystemTime;

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const BLUE: &str = "\x1b[34m";
const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// Bars drawn at most; older ones are summed up in one line.
pub const MAX_ROWS: usize = 40;

/// The width of the labels left of the bars ("token 12").
const LABEL_W: usize = 10;

fn column(t: SystemTime, tl: &Timeline, width: usize) -> usize {
    ((tl.fraction(t) * width as f64) as usize).min(width.saturating_sub(1))
}

/// The timeline in `width` columns (the bar area is what is left after
/// the labels), coloured when `colour`. Every text from the store goes
/// through `clean` (the CLI escapes characters that hide or reorder
/// text).
#[must_use]
pub fn render(tl: &Timeline, width: usize, colour: bool, clean: &dyn Fn(&str) -> String) -> String {
    let paint = |code: &str, s: &str| {
        if colour {
            format!("{code}{s}{RESET}")
        } else {
            s.to_owned()
        }
    };
    let area = width.saturating_sub(LABEL_W + 1).clamp(20, 400);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} — {} to {} (UTC)",
        paint(BOLD, &clean(tl.name.as_str())),
        leasehold::format_time(tl.from),
        leasehold::format_time(tl.to)
    );
    match tl.reach {
        Some(r) => {
            let _ = writeln!(
                out,
                "{}",
                paint(
                    DIM,
                    &format!(
                        "history reaches back to {} ({} kept)",
                        leasehold::format_time(r),
                        count(tl.entries as u64, "entry", "entries")
                    )
                )
            );
        }
        None => {
            let _ = writeln!(out, "{}", paint(DIM, "no history kept for this name"));
        }
    }
    write_axis(&mut out, tl, area);
    let shown = tl.bars.len().min(MAX_ROWS);
    if tl.bars.len() > shown {
        let _ = writeln!(
            out,
            "{}",
            paint(DIM, &format!("… {} earlier grants not drawn", tl.bars.len() - shown))
        );
    }
    for bar in &tl.bars[tl.bars.len() - shown..] {
        write_bar(&mut out, bar, tl, area, &paint, clean);
    }
    if !tl.marks.is_empty() {
        write_marks(&mut out, tl, area, &paint, clean);
    }
    if tl.bars.is_empty() && tl.marks.is_empty() {
        let _ = writeln!(out, "{}", paint(DIM, "nothing happened in this range"));
    }
    let _ = writeln!(
        out,
        "{}",
        paint(
            DIM,
            "█ held  ▶ live  † holder proved dead, takeable now  ▏ released  ✕ expired  \
             ⚡ taken over (holder proved dead)  ? lapsed, not yet recorded  \
             ◇ takeover after expiry  ↻ reacquired  ✓ fence passed  ✗ fence refused  ! stale token refused"
        )
    );
    out
}

/// The time axis: five ticks, labelled where the labels fit.
fn write_axis(out: &mut String, tl: &Timeline, area: usize) {
    let range = tl.to.duration_since(tl.from).unwrap_or_default();
    let mut ticks = vec![' '; area];
    let mut labels = String::new();
    for i in 0..=4u32 {
        let t = tl.from + range.mul_f64(f64::from(i) / 4.0);
        let c = column(t, tl, area);
        ticks[c] = '┼';
        let text = axis_label(t, range);
        let len = text.chars().count();
        let at = if i == 4 { (c + 1).saturating_sub(len) } else { c };
        let used = labels.chars().count();
        // A label that would run into the one before is left out.
        if at >= used + usize::from(used > 0) {
            labels.push_str(&" ".repeat(at - used));
            labels.push_str(&text);
        }
    }
    let axis: String = ticks.iter().map(|c| if *c == ' ' { '─' } else { *c }).collect();
    let _ = writeln!(out, "{:LABEL_W$} {labels}", "");
    let _ = writeln!(out, "{:LABEL_W$} {axis}", "");
}

/// One grant's row: its bar across the axis, its holder and how it
/// ended.
fn write_bar(
    out: &mut String,
    bar: &Bar,
    tl: &Timeline,
    area: usize,
    paint: &dyn Fn(&str, &str) -> String,
    clean: &dyn Fn(&str) -> String,
) {
    let a = column(bar.start.max(tl.from), tl, area);
    let b = column(bar.end_at.min(tl.to), tl, area).max(a);
    let mut row: Vec<String> = vec![" ".to_owned(); area];
    let (code, last) = match bar.end {
        End::Live(_) => (GREEN, '▶'),
        End::Released => (BLUE, '▏'),
        End::Expired => (YELLOW, '✕'),
        End::TakenOver => (RED, '⚡'),
        End::Lapsed => (DIM, '?'),
        End::Dead(_) => (RED, '†'),
    };
    for cell in row.iter_mut().take(b + 1).skip(a) {
        *cell = paint(code, "█");
    }
    row[b] = paint(code, &last.to_string());
    if !bar.start_known {
        row[a] = paint(code, "…");
    }
    let end = match bar.end {
        End::Live(left) => format!("live, expires in {}", leasehold::format_duration(left)),
        End::Dead(_) => bar.end.label().to_owned(),
        End::Expired if bar.after_expiry => "expired (after a takeover by expiry)".to_owned(),
        e => e.label().to_owned(),
    };
    let took = if bar.after_expiry {
        ", took over after expiry"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "{:>LABEL_W$} {}  {} {}{}",
        format!("token {}", bar.token),
        row.concat(),
        clean(&bar.owner),
        end,
        took
    );
}

/// The events row (a glyph at each mark) and the ten newest marks
/// spelled out.
fn write_marks(
    out: &mut String,
    tl: &Timeline,
    area: usize,
    paint: &dyn Fn(&str, &str) -> String,
    clean: &dyn Fn(&str) -> String,
) {
    let mut row: Vec<String> = vec![" ".to_owned(); area];
    for m in &tl.marks {
        let c = column(m.at, tl, area);
        let glyph = m.kind.glyph().to_string();
        row[c] = if m.kind.alarming() {
            paint(RED, &glyph)
        } else {
            paint(GREEN, &glyph)
        };
    }
    let _ = writeln!(out, "{:>LABEL_W$} {}", "events", row.concat());
    for m in tl.marks.iter().rev().take(10).rev() {
        let token = m.token.map(|t| format!(" token {t}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "{:>LABEL_W$} {} {} {}{}: {}",
            "",
            m.kind.glyph(),
            leasehold::format_time(m.at),
            m.kind.label(),
            token,
            clean(&m.detail)
        );
    }
}
