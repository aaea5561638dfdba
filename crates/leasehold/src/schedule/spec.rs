//! [`ScheduleSpec`]: a schedule's text and time zone, parsed once, and the
//! instants it fires at (its *slots*). The rules each kind of text follows
//! — cron in a zone, `@every` from the epoch, daylight saving — are the
//! module docs of [`crate::schedule`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ZonedDateTime};
use leasehold_backend::{limits, parse_duration};
use serde::{Deserialize, Serialize};

use super::civil::Local;
use super::error::{Problem, ScheduleError};

/// The longest schedule text, in bytes: a cron pattern listing every
/// minute of an hour is under 200; the bound keeps what a store keeps
/// small.
pub const SCHEDULE_TEXT_MAX: usize = 512;

/// The zone of a schedule that names none.
pub const DEFAULT_ZONE: &str = "UTC";

/// A change of clock that skips more than this many seconds is not
/// daylight saving ([`ScheduleSpec::cron_next`]).
const LONG_CHANGE_SECS: i32 = 2 * 3600;

/// The most long changes of clock one search goes past.
const LONG_CHANGES_CROSSED: usize = 4;

/// The shorthands for cron patterns (croner expands them; `@weekly` is
/// Sunday 00:00, `@yearly` and `@annually` 1 January 00:00).
const SHORTHANDS: [&str; 6] = ["hourly", "daily", "weekly", "monthly", "yearly", "annually"];

/// A schedule: five-field cron (`30 2 * * *`), six fields with seconds
/// first (`*/10 * * * * *`), a shorthand (`@hourly`, `@daily`,
/// `@weekly`, `@monthly`, `@yearly`), or `@every DUR` (`@every 200ms`,
/// `@every 5m`), in a time zone (an IANA name or `UTC`). Slots are
/// instants; show them in the schedule's zone with
/// [`ScheduleSpec::in_zone`].
///
/// Two specs are equal when their text (trimmed) and zone are; serialized
/// they are `{"cron": TEXT, "zone": ZONE}`, what a store keeps.
///
/// # Examples
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use leasehold::schedule::ScheduleSpec;
///
/// let spec = ScheduleSpec::parse("30 2 * * *", Some("Europe/Berlin"))?;
/// // 2026-03-29 is the night Berlin's clocks skip 02:00–03:00: the slot
/// // fires once, at 03:00 CEST (01:00 UTC).
/// let midnight_utc = UNIX_EPOCH + Duration::from_secs(1_774_742_400);
/// let slot = spec.next_after(midnight_utc).unwrap();
/// assert_eq!(spec.in_zone(slot).unwrap().to_string(), "2026-03-29T03:00:00+02:00[Europe/Berlin]");
///
/// let every = ScheduleSpec::parse("@every 200ms", None)?;
/// assert_eq!(every.next_after(UNIX_EPOCH), Some(UNIX_EPOCH + Duration::from_millis(200)));
/// assert!(ScheduleSpec::parse("@every 0s", None).is_err());
/// # Ok::<(), leasehold::schedule::ScheduleError>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "Stored", into = "Stored")]
pub struct ScheduleSpec {
    text: String,
    zone_name: String,
    zone: TimeZone,
    rule: Rule,
}

#[derive(Debug, Clone)]
enum Rule {
    /// A cron pattern — or, for a list of fixed times (`0,30 2 * * *`),
    /// one pattern per time ([`fixed_times`]); a slot is the earliest of
    /// theirs.
    Cron(Vec<Cron>),
    /// Slot k is the epoch + k × the interval.
    Every(Duration),
}

impl ScheduleSpec {
    /// Parse a schedule's text in the time zone `zone` (default
    /// [`DEFAULT_ZONE`]).
    ///
    /// # Errors
    /// [`ScheduleError`] naming the text (or zone), what is wrong with it
    /// and an example of the right form. Never panics, whatever the text.
    pub fn parse(text: &str, zone: Option<&str>) -> Result<Self, ScheduleError> {
        let zone_text = zone.unwrap_or(DEFAULT_ZONE);
        let refused = |problem| ScheduleError {
            text: text.to_owned(),
            problem,
        };
        let tz = TimeZone::get(zone_text).map_err(|_| ScheduleError {
            text: zone_text.to_owned(),
            problem: Problem::UnknownZone,
        })?;
        if text.len() > SCHEDULE_TEXT_MAX {
            return Err(refused(Problem::TooLong {
                bytes: text.len(),
                max: SCHEDULE_TEXT_MAX,
            }));
        }
        let trimmed = text.trim();
        let rule = parse_rule(trimmed).map_err(refused)?;
        let spec = ScheduleSpec {
            text: trimmed.to_owned(),
            zone_name: tz.iana_name().unwrap_or(zone_text).to_owned(),
            zone: tz,
            rule,
        };
        // A pattern that matches no date (30 February) is refused here,
        // not found out by a daemon that never fires it.
        if spec.next_after(UNIX_EPOCH).is_none() {
            return Err(refused(Problem::NeverFires));
        }
        Ok(spec)
    }

    /// The text, trimmed, as given.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The time zone's IANA name (`UTC` when none was given).
    #[must_use]
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// The first slot strictly after `t`; `None` past the last one that
    /// can be named (a cron pattern is searched up to the year 5000, as
    /// croner does; `@every` to the end of `SystemTime`).
    #[must_use]
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        match &self.rule {
            Rule::Every(interval) => every_next(*interval, t),
            Rule::Cron(crons) => {
                let from = Timestamp::try_from(t).ok()?;
                crons.iter().filter_map(|cron| self.cron_next(cron, from)).min()
            }
        }
    }

    /// croner's first time of `cron` strictly after `from`. croner carries
    /// a wall-clock time that a change of clock skips to the first instant
    /// after it only across a gap of up to 2 hours (daylight saving); in a
    /// longer one — Samoa (Pacific/Apia) skipped 30 December 2011 — its
    /// search fails. Such a change is the clock being set, not daylight
    /// saving: the wall-clock times it skips do not happen, for every kind
    /// of schedule (as Vixie cron treats a jump of more than 3 hours), and
    /// the search goes on from the first instant after it — rather than
    /// the schedule never firing again. Any other failure of croner (past
    /// the year 5000) is the end of the schedule's slots: `None`.
    fn cron_next(&self, cron: &Cron, from: Timestamp) -> Option<SystemTime> {
        let mut from = from;
        let mut inclusive = false;
        // A few long changes of clock in a row at most: the tz database
        // has none closer than years apart.
        for _ in 0..LONG_CHANGES_CROSSED {
            let local = Local(from.to_zoned_datetime(self.zone.clone()));
            match cron.find_next_occurrence(&local, inclusive) {
                Ok(next) => return SystemTime::try_from(next.0.timestamp()).ok(),
                Err(error) => {
                    let Some(after) = self.long_change_after(from) else {
                        tracing::debug!(schedule = %self.text, zone = %self.zone_name, "no slot after {from}: {error}");
                        return None;
                    };
                    // The first instant after the change: a slot there counts.
                    (from, inclusive) = (after, true);
                }
            }
        }
        None
    }

    /// The instant of the zone's first change of clock after `from` that
    /// skips more than croner carries a time across (2 hours).
    fn long_change_after(&self, from: Timestamp) -> Option<Timestamp> {
        // Looked for over the next 10 years: a zone with daylight saving
        // has changes without end.
        let until = from.checked_add(jiff::SignedDuration::from_hours(24 * 3653)).ok()?;
        self.zone
            .following(from)
            .take_while(|change| change.timestamp() <= until)
            .find(|change| {
                change
                    .timestamp()
                    .checked_sub(jiff::SignedDuration::from_secs(1))
                    .is_ok_and(|just_before| {
                        change.offset().seconds() - self.zone.to_offset(just_before).seconds() > LONG_CHANGE_SECS
                    })
            })
            .map(|change| change.timestamp())
    }

    /// The slots strictly after `t`, in order (`schedule next NAME -n N`:
    /// `.take(n)`).
    #[must_use]
    pub fn slots_after(&self, t: SystemTime) -> Slots<'_> {
        Slots {
            spec: self,
            after: Some(t),
        }
    }

    /// The slots in (`after`, `until`], at most `max` of them, earliest
    /// first: what fell due while no daemon was running. `more` says that
    /// further slots follow in the range; ask again from the last one
    /// returned to read them.
    #[must_use]
    pub fn slots_between(&self, after: SystemTime, until: SystemTime, max: usize) -> SlotsBetween {
        let mut due = self.slots_after(after).take_while(|slot| *slot <= until);
        let slots: Vec<SystemTime> = due.by_ref().take(max).collect();
        SlotsBetween {
            slots,
            more: due.next().is_some(),
        }
    }

    /// `slot` as a time in the schedule's zone, to show it; `None` outside
    /// the years jiff names (-9999 to 9999).
    #[must_use]
    pub fn in_zone(&self, slot: SystemTime) -> Option<ZonedDateTime> {
        Some(Timestamp::try_from(slot).ok()?.to_zoned_datetime(self.zone.clone()))
    }
}

impl PartialEq for ScheduleSpec {
    fn eq(&self, other: &Self) -> bool {
        // The rule and zone follow from these two.
        self.text == other.text && self.zone_name == other.zone_name
    }
}

impl Eq for ScheduleSpec {}

fn parse_rule(text: &str) -> Result<Rule, Problem> {
    if text.is_empty() {
        return Err(Problem::Empty);
    }
    if let Some(shorthand) = text.strip_prefix('@') {
        let (word, rest) = shorthand.split_once(char::is_whitespace).unwrap_or((shorthand, ""));
        if word.eq_ignore_ascii_case("every") {
            return parse_every(rest.trim()).map(Rule::Every);
        }
        if !rest.is_empty() || !SHORTHANDS.iter().any(|s| s.eq_ignore_ascii_case(word)) {
            return Err(Problem::UnknownShorthand(text.to_owned()));
        }
    } else {
        let fields = text.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(Problem::FieldCount(fields));
        }
    }
    let parse = |text: &str| {
        CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| Problem::Pattern(e.to_string()))
    };
    // The whole pattern first: its errors name what the user wrote — and
    // which field (croner's do not).
    let whole = parse(text).map_err(|problem| field_problem(text, &parse).unwrap_or(problem))?;
    match fixed_times(text) {
        Some(patterns) => Ok(Rule::Cron(patterns.iter().map(|p| parse(p)).collect::<Result<_, _>>()?)),
        None => Ok(Rule::Cron(vec![whole])),
    }
}

/// The fields of a six-field pattern (a five-field one has no second),
/// and the values each takes.
const FIELDS: [(&str, &str); 6] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    (
        "day-of-month",
        "1-31, L (the last day), 15W (the weekday nearest the 15th)",
    ),
    ("month", "1-12 or JAN-DEC"),
    (
        "day-of-week",
        "0-7 or SUN-SAT (0 and 7 are Sunday), 5L (the last Friday), 5#2 (the second Friday)",
    ),
];

/// The first field of the cron pattern `text` that croner refuses on its
/// own (every other field `*`), as a [`Problem::Field`]; `None` when each
/// is fine alone and only the whole is not.
fn field_problem(text: &str, parse: &dyn Fn(&str) -> Result<Cron, Problem>) -> Option<Problem> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let names = match fields.len() {
        6 => &FIELDS[..],
        5 => &FIELDS[1..],
        _ => return None,
    };
    fields
        .iter()
        .zip(names)
        .enumerate()
        .find_map(|(i, (value, (name, takes)))| {
            let alone: Vec<&str> = (0..fields.len()).map(|j| if j == i { *value } else { "*" }).collect();
            match parse(&alone.join(" ")) {
                Ok(_) => None,
                Err(Problem::Pattern(reason)) => Some(Problem::Field {
                    field: name,
                    value: (*value).to_owned(),
                    reason: croner_reason(&reason),
                    takes,
                }),
                Err(other) => Some(other),
            }
        })
}

/// croner's reason, as a clause: "Component error: Number out of
/// bounds." is "number out of bounds".
fn croner_reason(message: &str) -> String {
    let reason = ["Component error: ", "Pattern contains illegal characters: "]
        .iter()
        .fold(message, |m, prefix| m.strip_prefix(prefix).unwrap_or(m))
        .trim_end_matches('.');
    let mut chars = reason.chars();
    chars
        .next()
        .map_or_else(String::new, |first| first.to_lowercase().chain(chars).collect())
}

/// The most fixed times one pattern may list and still be read as fixed
/// times (`0,15,30,45 1,2 * * *` is 8); beyond it, a pattern is the
/// elapsed-time kind (rule 3 of the module docs).
const FIXED_TIMES_MAX: usize = 64;

/// A cron pattern whose second, minute and hour fields are plain numbers
/// with at least one list among them (`0,30 2 * * *`), as one pattern per
/// time of day (`0 2 * * *`, `30 2 * * *`): each then follows the
/// fixed-time rules (1 and 2 of the module docs), as Vixie cron reads such
/// a list — its times in a skipped hour fire once right after the change,
/// those in a repeated hour once, the first time round. croner alone reads
/// a list as elapsed time: on the spring night none of them would fire,
/// on the autumn night each twice. `None` for any other pattern.
fn fixed_times(text: &str) -> Option<Vec<String>> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (time, rest) = match fields.len() {
        5 => (vec!["0", fields[0], fields[1]], &fields[2..]),
        6 => (fields[..3].to_vec(), &fields[3..]),
        _ => return None,
    };
    let plain = |field: &str| !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit() || b == b',');
    if !time.iter().all(|f| plain(f)) || !time.iter().any(|f| f.contains(',')) {
        return None;
    }
    let values: Vec<Vec<&str>> = time.iter().map(|f| f.split(',').collect()).collect();
    if values.iter().map(Vec::len).product::<usize>() > FIXED_TIMES_MAX {
        return None;
    }
    let mut patterns = Vec::new();
    for second in &values[0] {
        for minute in &values[1] {
            for hour in &values[2] {
                patterns.push(format!("{second} {minute} {hour} {}", rest.join(" ")));
            }
        }
    }
    Some(patterns)
}

fn parse_every(text: &str) -> Result<Duration, Problem> {
    let interval = parse_duration(text).map_err(|_| Problem::NotADuration(text.to_owned()))?;
    let interval = limits::EVERY.check(interval).map_err(Problem::EveryOutOfRange)?;
    if interval.subsec_nanos() % 1_000_000 != 0 {
        return Err(Problem::EveryNotWholeMillis(text.to_owned()));
    }
    Ok(interval)
}

/// The first multiple of `interval` since the epoch strictly after `t`
/// (before the epoch too). Not date arithmetic: slots of elapsed time,
/// counted in nanoseconds on the Unix time line.
fn every_next(interval: Duration, t: SystemTime) -> Option<SystemTime> {
    let step = i128::try_from(interval.as_nanos()).ok()?;
    let since_epoch = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).ok()?,
        Err(before) => -i128::try_from(before.duration().as_nanos()).ok()?,
    };
    let slot = (since_epoch.div_euclid(step) + 1).checked_mul(step)?;
    let nanos = slot.unsigned_abs();
    let distance = Duration::new(
        u64::try_from(nanos / 1_000_000_000).ok()?,
        (nanos % 1_000_000_000) as u32,
    );
    if slot >= 0 {
        UNIX_EPOCH.checked_add(distance)
    } else {
        UNIX_EPOCH.checked_sub(distance)
    }
}

/// The slots after a time, in order: [`ScheduleSpec::slots_after`].
#[derive(Debug, Clone)]
pub struct Slots<'a> {
    spec: &'a ScheduleSpec,
    after: Option<SystemTime>,
}

impl Iterator for Slots<'_> {
    type Item = SystemTime;

    fn next(&mut self) -> Option<SystemTime> {
        self.after = self.spec.next_after(self.after?);
        self.after
    }
}

/// What [`ScheduleSpec::slots_between`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotsBetween {
    /// The earliest slots of the range, in order.
    pub slots: Vec<SystemTime>,
    /// More slots follow in the range than `max` allowed.
    pub more: bool,
}

/// What a store keeps of a schedule.
#[derive(Serialize, Deserialize)]
struct Stored {
    cron: String,
    zone: String,
}

impl From<ScheduleSpec> for Stored {
    fn from(spec: ScheduleSpec) -> Self {
        Stored {
            cron: spec.text,
            zone: spec.zone_name,
        }
    }
}

impl TryFrom<Stored> for ScheduleSpec {
    type Error = ScheduleError;

    fn try_from(stored: Stored) -> Result<Self, ScheduleError> {
        ScheduleSpec::parse(&stored.cron, Some(&stored.zone))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Whether a refusal gave the reason a case expects.
    type Expected = fn(&Problem) -> bool;

    #[test]
    fn every_form_parses() {
        for text in [
            "30 2 * * *",
            "*/15 * * * *",
            "0 */5 * * * *",
            "0 9 * * MON-FRI",
            "0 0 L * *",
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@yearly",
            "@annually",
            "@DAILY",
            "@every 200ms",
            "@every 5m",
            "@every 1h30m",
            "@every 90",
            "@every 1y",
            "  30 2 * * *\n",
        ] {
            let spec = ScheduleSpec::parse(text, None).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(spec.text(), text.trim());
            assert_eq!(spec.zone_name(), "UTC");
        }
        let berlin = ScheduleSpec::parse("@daily", Some("Europe/Berlin")).unwrap();
        assert_eq!(berlin.zone_name(), "Europe/Berlin");
        assert_eq!(ScheduleSpec::parse("@daily", Some("UTC")).unwrap().zone_name(), "UTC");
    }

    #[test]
    fn hostile_text_is_refused_with_its_reason_never_a_panic() {
        let long = "x".repeat(10_000);
        let long_every = format!("@every {}", "9".repeat(10_000));
        let cases: [(&str, Expected); 22] = [
            ("", |p| *p == Problem::Empty),
            ("   \t", |p| *p == Problem::Empty),
            (&long, |p| matches!(p, Problem::TooLong { bytes: 10_000, .. })),
            (&long_every, |p| matches!(p, Problem::TooLong { .. })),
            ("* * * * * * * *", |p| *p == Problem::FieldCount(8)),
            ("0 0 1 1 * 2030", |p| {
                matches!(
                    p,
                    Problem::Field {
                        field: "day-of-week",
                        ..
                    }
                )
            }),
            ("* * * *", |p| *p == Problem::FieldCount(4)),
            ("99999999999999999999 * * * *", |p| {
                matches!(p, Problem::Field { field: "minute", .. })
            }),
            ("60 * * * *", |p| matches!(p, Problem::Field { field: "minute", .. })),
            ("0 24 * * *", |p| matches!(p, Problem::Field { field: "hour", .. })),
            ("*/0 * * * *", |p| matches!(p, Problem::Field { field: "minute", .. })),
            ("0 0 30 2 *", |p| *p == Problem::NeverFires),
            ("0 0 31 4,6,9,11 *", |p| *p == Problem::NeverFires),
            ("@reboot", |p| matches!(p, Problem::UnknownShorthand(_))),
            ("@daily 0 0 * * *", |p| matches!(p, Problem::UnknownShorthand(_))),
            ("@every 0s", |p| matches!(p, Problem::EveryOutOfRange(_))),
            ("@every 99ms", |p| matches!(p, Problem::EveryOutOfRange(_))),
            ("@every 100y", |p| matches!(p, Problem::EveryOutOfRange(_))),
            ("@every 18446744073709551615s", |p| {
                matches!(p, Problem::EveryOutOfRange(_) | Problem::NotADuration(_))
            }),
            ("@every", |p| matches!(p, Problem::NotADuration(_))),
            ("@every soon", |p| matches!(p, Problem::NotADuration(_))),
            ("@every 150ms 1us", |p| matches!(p, Problem::EveryNotWholeMillis(_))),
        ];
        for (text, expected) in cases {
            let e = ScheduleSpec::parse(text, None).unwrap_err();
            assert!(expected(&e.problem), "{text:.40}: {:?}", e.problem);
            let message = e.to_string();
            assert!(message.contains("write e.g. "), "{message}");
            assert!(message.chars().count() < 400, "a long text is cut: {message}");
        }
        assert_eq!(
            ScheduleSpec::parse("@every 0s", None).unwrap_err().to_string(),
            "\"@every 0s\" is not a schedule: an @every interval of 0ms is out of range: it must be at least \
             100ms and at most 1year; write e.g. @every 5m, @every 200ms, @hourly"
        );
    }

    #[test]
    fn a_refused_field_is_named_with_its_value_and_what_it_takes() {
        for (text, field, value, reason) in [
            ("61 * * * *", "minute", "61", "number out of bounds"),
            ("0 24 * * *", "hour", "24", "number out of bounds"),
            ("0 0 32 * *", "day-of-month", "32", "number out of bounds"),
            ("0 0 * 13 *", "month", "13", "number out of bounds"),
            ("0 0 * * 8", "day-of-week", "8", "number out of bounds"),
            ("5-1 * * * *", "minute", "5-1", "range out of bounds"),
            ("*/0 * * * *", "minute", "*/0", "step cannot be zero"),
            (
                "0 0 * * MOO",
                "day-of-week",
                "MOO",
                "cronPattern contains illegal character 'M' in part 'MOO'",
            ),
            ("60 0 0 * * *", "second", "60", "number out of bounds"),
            // Six fields are seconds first: a year is read as a day of the week.
            ("0 0 1 1 * 2030", "day-of-week", "2030", "number out of bounds"),
        ] {
            let e = ScheduleSpec::parse(text, None).unwrap_err();
            assert_eq!(
                e.problem,
                Problem::Field {
                    field: FIELDS.iter().find(|(name, _)| *name == field).unwrap().0,
                    value: value.into(),
                    reason: reason.into(),
                    takes: FIELDS.iter().find(|(name, _)| *name == field).unwrap().1,
                },
                "{text}"
            );
        }
        assert_eq!(
            ScheduleSpec::parse("0 24 * * *", None).unwrap_err().to_string(),
            "\"0 24 * * *\" is not a schedule: its hour field \"24\" is not valid (number out of bounds): it takes \
             0-23; write e.g. 30 2 * * * (02:30 daily), */15 * * * *, 0 */5 * * * * (with seconds), @daily"
        );
        // 7 is Sunday too, as in Vixie cron.
        ScheduleSpec::parse("0 0 * * 7", None).unwrap();
    }

    /// The dates of the first `n` slots of `text` (UTC) from Monday
    /// 2026-06-01 00:00.
    fn dates(text: &str, n: usize) -> Vec<String> {
        let june = UNIX_EPOCH + Duration::from_secs(1_780_272_000);
        let spec = ScheduleSpec::parse(text, None).unwrap();
        spec.slots_after(june)
            .take(n)
            .map(|slot| spec.in_zone(slot).unwrap().date().to_string())
            .collect()
    }

    /// docs/SCHEDULES.md, "Cron compatibility": a day-of-month and a
    /// day-of-week both restricted fire on either (Vixie cron's rule), and
    /// a step counts as restricted — `*/2` too, which Vixie cron counts as
    /// `*` (it looks at the first character) and so fires on both.
    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        // The 1st of a month or a Monday: June's Mondays, then 1 July (a
        // Wednesday).
        assert_eq!(
            dates("0 0 1 * MON", 6),
            [
                "2026-06-08",
                "2026-06-15",
                "2026-06-22",
                "2026-06-29",
                "2026-07-01",
                "2026-07-06"
            ]
        );
        // `*/2` is restricted: odd days or Mondays (Vixie cron: odd days
        // that are Mondays).
        assert_eq!(
            dates("0 0 */2 * MON", 5),
            ["2026-06-03", "2026-06-05", "2026-06-07", "2026-06-08", "2026-06-09"]
        );
        assert_eq!(
            dates("0 0 1 * */2", 4),
            ["2026-06-02", "2026-06-04", "2026-06-06", "2026-06-07"]
        );
        // `*` and `?` are not restricted: the other field alone decides.
        assert_eq!(dates("0 0 * * MON", 2), ["2026-06-08", "2026-06-15"]);
        assert_eq!(dates("0 0 ? * MON", 2), ["2026-06-08", "2026-06-15"]);
        assert_eq!(dates("0 0 1 * *", 2), ["2026-07-01", "2026-08-01"]);
        assert_eq!(dates("0 0 1 * ?", 2), ["2026-07-01", "2026-08-01"]);
    }

    /// Samoa (Pacific/Apia) skipped 30 December 2011: 29 December 23:59:59
    /// (-10:00) was followed by 31 December 00:00 (+14:00). croner's search
    /// fails in such a gap; the schedule goes on past it, and never stops
    /// firing.
    #[test]
    fn a_skipped_calendar_day_is_passed_over_and_the_schedule_goes_on() {
        let december = UNIX_EPOCH + Duration::from_secs(1_322_697_600); // 2011-12-01T00:00:00Z
        let local = |text: &str, n: usize| -> Vec<String> {
            let spec = ScheduleSpec::parse(text, Some("Pacific/Apia")).unwrap();
            spec.slots_after(december)
                .take(n)
                .map(|slot| spec.in_zone(slot).unwrap().datetime().to_string())
                .collect()
        };
        assert_eq!(
            local("0 12 29-31 12 *", 4),
            [
                "2011-12-29T12:00:00",
                "2011-12-31T12:00:00",
                "2012-12-29T12:00:00",
                "2012-12-30T12:00:00"
            ]
        );
        assert_eq!(local("0 12 30 12 *", 1), ["2012-12-30T12:00:00"]);
        assert_eq!(
            local("@daily", 31)[28..],
            ["2011-12-29T00:00:00", "2011-12-31T00:00:00", "2012-01-01T00:00:00"]
        );
        let daily_noon = ScheduleSpec::parse("0 12 * * *", Some("Pacific/Apia")).unwrap();
        let around = UNIX_EPOCH + Duration::from_secs(1_325_000_000); // 2011-12-27
        let days: Vec<String> = daily_noon
            .slots_after(around)
            .take(4)
            .map(|slot| daily_noon.in_zone(slot).unwrap().date().to_string())
            .collect();
        assert_eq!(days, ["2011-12-27", "2011-12-28", "2011-12-29", "2011-12-31"]);
        // Every kind of schedule there, from any hour of the days around
        // it, has a next slot.
        for text in ["0 12 30 12 *", "30 2 * * *", "0,30 12 * * *", "*/15 * * * *", "@hourly"] {
            let spec = ScheduleSpec::parse(text, Some("Pacific/Apia")).unwrap();
            for hours in 24 * 27..24 * 33 {
                let t = december + Duration::from_secs(3600 * hours);
                assert!(
                    spec.next_after(t).is_some(),
                    "{text} after {}",
                    spec.in_zone(t).unwrap()
                );
            }
        }
    }

    #[test]
    fn an_unknown_zone_is_refused_by_name() {
        for zone in [
            "Mars/Olympus",
            "",
            "europe/berlin ",
            "../../etc/passwd",
            "/etc/localtime",
            &"Z".repeat(10_000),
        ] {
            let e = ScheduleSpec::parse("@daily", Some(zone)).unwrap_err();
            assert_eq!(e.problem, Problem::UnknownZone, "{zone:.40}");
            assert_eq!(e.text, zone);
        }
        assert_eq!(
            ScheduleSpec::parse("@daily", Some("Mars/Olympus"))
                .unwrap_err()
                .to_string(),
            "\"Mars/Olympus\" is not a time zone: there is no time zone of that name in the tz database leasehold \
             is built with; write e.g. Europe/Berlin, America/New_York, UTC"
        );
    }

    #[test]
    fn every_slots_are_multiples_of_the_interval_since_the_epoch() {
        let spec = ScheduleSpec::parse("@every 200ms", Some("Asia/Kolkata")).unwrap();
        let after = |ms: i64| {
            let t = if ms >= 0 {
                UNIX_EPOCH + MS * ms as u32
            } else {
                UNIX_EPOCH - MS * ms.unsigned_abs() as u32
            };
            spec.next_after(t)
        };
        assert_eq!(after(12_345), Some(UNIX_EPOCH + MS * 12_400));
        assert_eq!(after(12_400), Some(UNIX_EPOCH + MS * 12_600), "strictly after");
        assert_eq!(after(-150), Some(UNIX_EPOCH));
        assert_eq!(after(-200), Some(UNIX_EPOCH));
        assert_eq!(after(-201), Some(UNIX_EPOCH - MS * 200));
        // Any two specs with one interval share every slot, wherever they
        // start counting.
        let now = UNIX_EPOCH + Duration::new(1_790_000_000, 123_456_789);
        let a: Vec<_> = spec.slots_after(now).take(10).collect();
        let later = ScheduleSpec::parse("@every 200ms", None).unwrap();
        assert_eq!(later.slots_after(a[4] - MS).take(5).collect::<Vec<_>>(), a[4..9]);
        // The last slot a SystemTime holds has no successor.
        let year = ScheduleSpec::parse("@every 1y", None).unwrap();
        assert_eq!(year.next_after(UNIX_EPOCH + Duration::from_secs(i64::MAX as u64)), None);
    }

    #[test]
    fn slots_between_is_capped_and_pages_on() {
        let spec = ScheduleSpec::parse("@every 200ms", None).unwrap();
        let start = UNIX_EPOCH + Duration::from_secs(1_790_000_000);
        let first = spec.slots_between(start, start + Duration::from_secs(1), 3);
        assert_eq!(first.slots, [start + MS * 200, start + MS * 400, start + MS * 600]);
        assert!(first.more);
        let rest = spec.slots_between(first.slots[2], start + Duration::from_secs(1), 3);
        assert_eq!(rest.slots, [start + MS * 800, start + MS * 1000], "(a, b] holds b");
        assert!(!rest.more);
        assert_eq!(spec.slots_between(start, start, 3).slots, []);
        assert_eq!(spec.slots_between(start, start + Duration::from_secs(1), 0).slots, []);
        // A day down, hourly in a zone: 24 slots.
        let hourly = ScheduleSpec::parse("@hourly", Some("America/New_York")).unwrap();
        let day = hourly.slots_between(start, start + Duration::from_secs(86_400), 100);
        assert_eq!((day.slots.len(), day.more), (24, false));
    }

    #[test]
    fn serde_keeps_text_and_zone_and_reads_back_equal() {
        for (text, zone) in [
            ("30 2 * * *", Some("Europe/Berlin")),
            ("@every 200ms", None),
            ("0 */5 * * * *", Some("America/New_York")),
        ] {
            let spec = ScheduleSpec::parse(text, zone).unwrap();
            let json = serde_json::to_string(&spec).unwrap();
            let back: ScheduleSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(back, spec);
            let now = UNIX_EPOCH + Duration::from_secs(1_790_000_000);
            assert_eq!(
                back.slots_after(now).take(5).collect::<Vec<_>>(),
                spec.slots_after(now).take(5).collect::<Vec<_>>()
            );
        }
        let spec = ScheduleSpec::parse(" 30 2 * * *", Some("Europe/Berlin")).unwrap();
        assert_eq!(
            serde_json::to_string(&spec).unwrap(),
            r#"{"cron":"30 2 * * *","zone":"Europe/Berlin"}"#
        );
        let stored_wrong = r#"{"cron":"30 2 * * *","zone":"Mars/Olympus"}"#;
        let e = serde_json::from_str::<ScheduleSpec>(stored_wrong).unwrap_err();
        assert!(e.to_string().contains("Mars/Olympus"), "{e}");
        assert_ne!(spec, ScheduleSpec::parse("30 2 * * *", None).unwrap());
    }

    /// Schedules of every kind, in zones with one-hour, half-hour and no
    /// changes of clock.
    fn any_spec() -> impl Strategy<Value = ScheduleSpec> {
        let text = proptest::sample::select(vec![
            "30 2 * * *",
            "0 30 1 * * *",
            "0,30 2 * * *",
            "*/7 * * * *",
            "*/13 */3 * * * *",
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@yearly",
            "0 0 29 2 *",
            "59 23 L * *",
            "0 0 * * 5#L",
            "@every 200ms",
            "@every 7s",
            "@every 1h",
            "@every 36h",
        ]);
        let zone = proptest::sample::select(vec![
            "UTC",
            "Europe/Berlin",
            "America/New_York",
            "Australia/Lord_Howe",
            "Asia/Kathmandu",
            "America/Santiago",
        ]);
        (text, zone).prop_map(|(t, z)| ScheduleSpec::parse(t, Some(z)).unwrap())
    }

    /// Any instant from 1970 to 2100, to the nanosecond.
    fn any_time() -> impl Strategy<Value = SystemTime> {
        (0..4_102_444_800u64, 0..1_000_000_000u32).prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n))
    }

    proptest! {
        #[test]
        fn slots_lie_after_and_strictly_increase(spec in any_spec(), t in any_time()) {
            let mut last = t;
            for slot in spec.slots_after(t).take(30) {
                prop_assert!(slot > last, "{} then {}", spec.in_zone(last).unwrap(), spec.in_zone(slot).unwrap());
                last = slot;
            }
        }

        #[test]
        fn every_start_between_two_slots_finds_the_later(spec in any_spec(), t in any_time(), part in 0.0..1.0f64) {
            // Wherever a daemon starts counting, it meets the same next
            // slot: none skipped, none found twice.
            let next = spec.next_after(t).unwrap();
            let between = t + next.duration_since(t).unwrap().mul_f64(part);
            prop_assert_eq!(spec.next_after(between), Some(next));
            prop_assert_eq!(spec.next_after(next - Duration::from_nanos(1)), Some(next));
        }

        #[test]
        fn any_text_is_parsed_or_refused_without_a_panic(
            fields in proptest::collection::vec(
                proptest::sample::select(vec![
                    "*", "*/0", "*/1", "1-5", "5-1", "0", "59", "60", "99999999999", "-1", "L", "W", "1W", "5#L",
                    "#", "?", "+1", "MON", "JAN", "@every", "@hourly", "@", "1,2,,3", "1/2", ",", "1h", "0.5s", "é",
                ]),
                0..9,
            ),
            junk in "\\PC{0,20}",
        ) {
            let _ = ScheduleSpec::parse(&fields.join(" "), None);
            let _ = ScheduleSpec::parse(&junk, Some(&junk));
            let _ = ScheduleSpec::parse(&format!("@every {junk}"), None);
        }
    }
}
