//! The store's clock on etcd, for records (`record_clock`, a write's
//! `not_after`). etcd's protocol carries no time: no response header, no
//! compare in a transaction. What a member does say is the `Date` header
//! of every HTTP answer on its client URL (Go's `net/http` sets it): this
//! module reads it from `GET /version` (open to every client, also on a
//! cluster with authentication on), over TLS when the store uses TLS, and
//! estimates the member's clock from it as `htpdate` does.
//!
//! A `Date` has whole seconds: the member's clock read `Date` to
//! `Date + 1 s` at some instant between sending the request (`before`, on
//! this host's clock) and reading the answer (`after`). So one reading
//! says that the member's clock minus this host's, the offset, lies in
//! `[Date − after, Date + 1 s − before]`. Readings taken at different
//! fractions of a second narrow it: the estimate is the intersection of
//! the readings of the last [`KEPT`] (older ones are dropped, and so are
//! all before a reading that does not meet the newer ones: a clock was
//! stepped). The store's time is this host's now plus the middle of that
//! interval, within half its width (`StoreTime::within`, half a second
//! at first, less as readings accumulate).
//!
//! "This host's clock" here is its monotonic clock (`Instant`): a step of
//! the host's wall clock moves nothing, only the member's own clock does.
//! A reading is taken by the caller only when the newest is older than
//! [`REFRESH`] (the first call, or after an idle spell): `record_clock` may
//! be called often. Meanwhile a thread of the clock's own, while the clock
//! is used (and for [`IDLE`] after), takes one reading every one to two
//! seconds, timed as `htpdate` times them: sent so that it reaches the
//! member when, by the middle of the estimate, the member's second turns.
//! Whether the `Date` is that second or the one before says on which side
//! of the middle the offset lies, halving the interval: within a few
//! readings it is as narrow as the round trip. So one HTTP request every
//! one to two seconds per process that uses the clock, none when idle.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold_backend::StoreTime;

/// How old the newest reading may be before a fresh one is taken.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);

/// How long a reading counts towards the estimate.
pub(crate) const KEPT: Duration = Duration::from_secs(600);

/// How long after its last use the clock keeps sharpening its estimate.
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// The shortest time between two readings of the sharpening thread.
const SPACING: Duration = Duration::from_secs(1);

/// A second, in ns.
const SECOND: i128 = 1_000_000_000;

/// The most of an answer read for its headers.
const HEADERS_MAX: usize = 16 * 1024;

/// What one reading of a member's `Date` says: the offset of its clock
/// from this host's lies in `[low, high]` (ns, on [`DateClock::local`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reading {
    low: i128,
    high: i128,
    taken: Instant,
    /// When the request was sent (ns, on [`DateClock::local`]).
    sent: i128,
    /// Its round trip (ns).
    rtt: i128,
}

/// A member's client URL, as the clock reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    host: String,
    port: u16,
}

impl Member {
    /// `host:port`, `http://host:port` or `https://host:port` (`None`:
    /// no port).
    pub(crate) fn parse(endpoint: &str) -> Option<Self> {
        let address = endpoint
            .strip_prefix("https://")
            .or_else(|| endpoint.strip_prefix("http://"))
            .unwrap_or(endpoint)
            .trim_end_matches('/');
        let (host, port) = address.rsplit_once(':')?;
        Some(Self {
            host: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
            port: port.parse().ok()?,
        })
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why no member's clock could be read: what was tried, and each
/// member's failure.
#[derive(Debug)]
pub(crate) struct Unread {
    pub(crate) failures: Vec<(Member, MemberError)>,
}

/// Why one member's clock could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MemberError {
    #[error("cannot resolve {host}: {error}")]
    Resolve { host: String, error: io::Error },
    #[error("{0} resolves to no address")]
    NoAddress(String),
    #[error("cannot connect: {0}")]
    Connect(io::Error),
    #[error("cannot set the socket's timeouts: {0}")]
    Timeouts(io::Error),
    #[error("{host} is no TLS server name: {error}")]
    ServerName {
        host: String,
        error: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("TLS failed: {0}")]
    TlsSetup(rustls::Error),
    #[error("TLS failed: {0}")]
    Tls(io::Error),
    #[error("GET /version failed: {0}")]
    Exchange(io::Error),
    #[error(transparent)]
    Date(#[from] DateError),
}

/// Why an answer's head gives no time.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DateError {
    #[error("the answer is not HTTP ({0:?}): is this an etcd client URL?")]
    NotHttp(String),
    #[error("the answer ({0}) has no Date header")]
    NoDate(String),
    #[error("the answer's Date {date:?} is not an HTTP date: {error}")]
    Unreadable { date: String, error: jiff::Error },
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cannot read the cluster's clock (the Date header of GET /version on a member's client URL): ")?;
        for (i, (member, why)) in self.failures.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{member}: {why}")?;
        }
        Ok(())
    }
}

/// The estimate of the cluster's clock (see the module docs).
#[derive(Debug)]
pub(crate) struct DateClock {
    members: Vec<Member>,
    /// TLS towards the members (offering HTTP/1.1), when the store uses it.
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    /// The origin of [`DateClock::local`].
    origin: Instant,
    /// The readings that make the estimate, oldest first; all of them
    /// meet.
    readings: Mutex<Vec<Reading>>,
    /// Held while a reading is taken: one at a time.
    reading: Mutex<()>,
    /// The member that answered last, tried first.
    last: Mutex<usize>,
    /// When the clock was last asked.
    used: Mutex<Instant>,
    /// Whether the sharpening thread runs.
    sharpening: AtomicBool,
}

impl DateClock {
    pub(crate) fn new(members: Vec<Member>, tls: Option<Arc<rustls::ClientConfig>>, timeout: Duration) -> Self {
        Self {
            members,
            tls,
            timeout,
            origin: Instant::now(),
            readings: Mutex::new(Vec::new()),
            reading: Mutex::new(()),
            last: Mutex::new(0),
            used: Mutex::new(Instant::now()),
            sharpening: AtomicBool::new(false),
        }
    }

    /// This host's clock: ns since [`DateClock::origin`], monotonic.
    fn local(&self) -> i128 {
        self.origin.elapsed().as_nanos() as i128
    }

    /// The cluster's clock now: from the readings, after a fresh one if
    /// the newest is older than [`REFRESH`]; and the sharpening thread
    /// started if it is not running.
    pub(crate) fn now(self: &Arc<Self>) -> Result<StoreTime, Unread> {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        if !self.fresh() {
            let _one = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
            // Another caller may have taken one while this one waited.
            if !self.fresh() {
                let reading = self.read()?;
                add(
                    &mut self.readings.lock().unwrap_or_else(PoisonError::into_inner),
                    reading,
                );
            }
        }
        let (low, high) = intersection(&self.readings.lock().unwrap_or_else(PoisonError::into_inner))
            .expect("a reading was just taken");
        if !self.sharpening.swap(true, Ordering::AcqRel) {
            let clock = Arc::downgrade(self);
            let spawned = std::thread::Builder::new()
                .name("leasehold-etcd-clock".into())
                .spawn(move || sharpen(&clock));
            if spawned.is_err() {
                // No thread: readings are only taken by callers, every
                // REFRESH at most; the estimate is only wider.
                self.sharpening.store(false, Ordering::Release);
            }
        }
        Ok(estimate(self.local(), low, high))
    }

    /// How long the sharpening thread waits before its next request (see
    /// [`next_send`]); `None`: no reading to time it by.
    fn until_next_send(&self) -> Option<Duration> {
        let readings = self.readings.lock().unwrap_or_else(PoisonError::into_inner);
        let newest = *readings.last()?;
        let (low, high) = intersection(&readings)?;
        drop(readings);
        let send = next_send(low, high, newest.rtt, newest.sent + SPACING.as_nanos() as i128);
        Some(Duration::from_nanos(u64::try_from(send - self.local()).unwrap_or(0)))
    }

    /// Whether the newest reading is younger than [`REFRESH`].
    fn fresh(&self) -> bool {
        self.readings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last()
            .is_some_and(|r| r.taken.elapsed() < REFRESH)
    }

    /// One reading, from the member that answered last or else the
    /// others in turn.
    fn read(&self) -> Result<Reading, Unread> {
        let first = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failures = Vec::new();
        for i in (0..self.members.len()).map(|i| (first + i) % self.members.len()) {
            let member = &self.members[i];
            match self.read_member(member) {
                Ok(reading) => {
                    *self.last.lock().unwrap_or_else(PoisonError::into_inner) = i;
                    return Ok(reading);
                }
                Err(why) => failures.push((member.clone(), why)),
            }
        }
        Err(Unread { failures })
    }

    /// `GET /version` on `member`: the offset interval its `Date` gives.
    fn read_member(&self, member: &Member) -> Result<Reading, MemberError> {
        let address = (member.host.as_str(), member.port)
            .to_socket_addrs()
            .map_err(|error| MemberError::Resolve {
                host: member.host.clone(),
                error,
            })?
            .next()
            .ok_or_else(|| MemberError::NoAddress(member.host.clone()))?;
        let mut socket = TcpStream::connect_timeout(&address, self.timeout).map_err(MemberError::Connect)?;
        let timeouts = socket
            .set_read_timeout(Some(self.timeout))
            .and_then(|()| socket.set_write_timeout(Some(self.timeout)));
        timeouts.map_err(MemberError::Timeouts)?;
        let request =
            format!("GET /version HTTP/1.1\r\nHost: {member}\r\nUser-Agent: leasehold\r\nConnection: close\r\n\r\n");
        let (before, head, after) = match &self.tls {
            None => self.exchange(&mut socket, request.as_bytes()),
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(member.host.clone()).map_err(|error| {
                    MemberError::ServerName {
                        host: member.host.clone(),
                        error,
                    }
                })?;
                let mut tls = rustls::ClientConnection::new(config.clone(), name).map_err(MemberError::TlsSetup)?;
                // The handshake first: `before` is when the request leaves.
                while tls.is_handshaking() {
                    tls.complete_io(&mut socket).map_err(MemberError::Tls)?;
                }
                self.exchange(&mut rustls::Stream::new(&mut tls, &mut socket), request.as_bytes())
            }
        }
        .map_err(MemberError::Exchange)?;
        let date = date_header(&head)?;
        Ok(Reading {
            low: date - after,
            high: date + SECOND - before,
            taken: Instant::now(),
            sent: before,
            rtt: after - before,
        })
    }

    /// Send `request`, read the answer's head: `(before, head, after)`,
    /// with this host's clock when the request was sent and when the head
    /// was read.
    fn exchange(&self, stream: &mut (impl Read + Write), request: &[u8]) -> io::Result<(i128, String, i128)> {
        let before = self.local();
        stream.write_all(request)?;
        stream.flush()?;
        let mut head = Vec::new();
        let mut chunk = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                if head.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the connection was closed without an answer",
                    ));
                }
                break;
            }
            head.extend_from_slice(&chunk[..n]);
            if head.len() > HEADERS_MAX {
                break;
            }
        }
        let after = self.local();
        Ok((before, String::from_utf8_lossy(&head).into_owned(), after))
    }
}

/// The sharpening thread of `clock` (see the module docs): a reading at
/// each [`next_send`], until the clock is dropped or idle for [`IDLE`].
/// A failed reading is skipped: callers report failures when the
/// readings they need are stale.
fn sharpen(clock: &Weak<DateClock>) {
    loop {
        let wait = {
            let Some(c) = clock.upgrade() else { return };
            if c.used.lock().unwrap_or_else(PoisonError::into_inner).elapsed() > IDLE {
                c.sharpening.store(false, Ordering::Release);
                return;
            }
            c.until_next_send().unwrap_or(REFRESH)
        };
        std::thread::sleep(wait);
        let Some(c) = clock.upgrade() else { return };
        let _one = c.reading.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(reading) = c.read() {
            add(&mut c.readings.lock().unwrap_or_else(PoisonError::into_inner), reading);
        }
    }
}

/// When to send the next request (ns, this host's clock), at `earliest`
/// or after: so that it reaches the member (half the round trip `rtt`
/// after it is sent) when the member's clock, were its offset the middle
/// of `[low, high]`, turns a second. The `Date` answered then is that
/// second if the offset is above the middle, the one before if below.
fn next_send(low: i128, high: i128, rtt: i128, earliest: i128) -> i128 {
    let middle = low + (high - low) / 2;
    let member = earliest + rtt / 2 + middle;
    let turn = member.div_euclid(SECOND) * SECOND + if member.rem_euclid(SECOND) == 0 { 0 } else { SECOND };
    turn - middle - rtt / 2
}

/// The `Date` of an HTTP answer's head, in ns since the epoch.
fn date_header(head: &str) -> Result<i128, DateError> {
    let status = head.lines().next().unwrap_or_default();
    if !status.starts_with("HTTP/") {
        return Err(DateError::NotHttp(status[..status.len().min(60)].to_owned()));
    }
    let date = head
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim().eq_ignore_ascii_case("date").then(|| value.trim())
        })
        .ok_or_else(|| DateError::NoDate(status.to_owned()))?;
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(date)
        .map_err(|error| DateError::Unreadable {
            date: date.to_owned(),
            error,
        })?;
    Ok(at.as_nanosecond())
}

/// Add `new` to `readings`: those older than [`KEPT`] go, and so do all
/// before the newest one that does not meet the readings after it.
fn add(readings: &mut Vec<Reading>, new: Reading) {
    readings.retain(|r| new.taken.saturating_duration_since(r.taken) <= KEPT);
    readings.push(new);
    let (mut low, mut high) = (new.low, new.high);
    let mut keep = readings.len() - 1;
    for (i, r) in readings.iter().enumerate().rev().skip(1) {
        if r.low.max(low) > r.high.min(high) {
            break;
        }
        (low, high) = (r.low.max(low), r.high.min(high));
        keep = i;
    }
    readings.drain(..keep);
}

/// The offset interval all `readings` agree on.
fn intersection(readings: &[Reading]) -> Option<(i128, i128)> {
    readings
        .iter()
        .map(|r| (r.low, r.high))
        .reduce(|(l, h), (rl, rh)| (l.max(rl), h.min(rh)))
}

/// The store's time at this host's `local` (ns), with the offset in
/// `[low, high]`.
fn estimate(local: i128, low: i128, high: i128) -> StoreTime {
    let at = local + low + (high - low) / 2;
    let since = Duration::from_nanos(u64::try_from(at.unsigned_abs()).unwrap_or(u64::MAX));
    StoreTime {
        at: if at >= 0 {
            UNIX_EPOCH + since
        } else {
            UNIX_EPOCH - since
        },
        within: Duration::from_nanos(u64::try_from((high - low) / 2).unwrap_or(0)),
    }
}

/// How far this host's wall clock is from `store`, in words for `doctor`.
pub(crate) fn host_offset(store: StoreTime, host: SystemTime) -> String {
    let (ms, way) = match store.at.duration_since(host) {
        Ok(d) => (d.as_millis(), "behind"),
        Err(e) => (e.duration().as_millis(), "ahead of"),
    };
    format!(
        "this host's clock is {ms} ms {way} the cluster's (± {} ms)",
        store.within.as_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = 1_000_000_000;

    fn reading(low: i128, high: i128, taken: Instant) -> Reading {
        Reading {
            low,
            high,
            taken,
            sent: 0,
            rtt: 0,
        }
    }

    #[test]
    fn a_request_is_timed_to_reach_the_member_as_its_second_turns_by_the_middle() {
        let ms = 1_000_000;
        // Offset between 0.2 and 0.6 s: the middle is 0.4 s, so the
        // member's second turns at this host's 0.6, 1.6, ...; a 10 ms
        // round trip is sent 5 ms before.
        let send = next_send(200 * ms, 600 * ms, 10 * ms, 0);
        assert_eq!(send, 595 * ms);
        assert_eq!(next_send(200 * ms, 600 * ms, 10 * ms, 700 * ms), 1595 * ms);
        // Sent so, a member whose offset is above the middle answers the
        // new second: the interval halves to [middle, high].
        let date = 1000 * ms; // member: 0.6 + offset 0.45 ≥ 1.0
        let (before, after) = (send, send + 10 * ms);
        let (low, high) = (date - after, date + SECOND - before);
        // (less half the round trip: when it was handled is known only
        // to within it).
        assert_eq!((low.max(200 * ms), high.min(600 * ms)), (395 * ms, 600 * ms));
    }

    #[test]
    fn readings_narrow_the_offset_and_a_stepped_clock_starts_anew() {
        let t = Instant::now();
        let mut readings = Vec::new();
        add(&mut readings, reading(0, S, t));
        add(&mut readings, reading(S / 2, 3 * S / 2, t + Duration::from_secs(2)));
        assert_eq!(intersection(&readings), Some((S / 2, S)));
        // A reading that does not meet the others: the member's clock was
        // stepped; the old readings go.
        add(&mut readings, reading(10 * S, 11 * S, t + Duration::from_secs(4)));
        assert_eq!(readings.len(), 1);
        assert_eq!(intersection(&readings), Some((10 * S, 11 * S)));
        // A reading older than KEPT goes.
        add(
            &mut readings,
            reading(10 * S, 11 * S, t + KEPT + Duration::from_secs(5)),
        );
        assert_eq!(readings.len(), 1);
    }

    #[test]
    fn the_estimate_is_the_middle_within_half_the_width() {
        let at = estimate(0, 1_700_000_000 * S, 1_700_000_000 * S + S / 2);
        assert_eq!(at.at, UNIX_EPOCH + Duration::from_millis(1_700_000_000_250));
        assert_eq!(at.within, Duration::from_millis(250));
    }

    #[test]
    fn dates_are_read_from_the_head() {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ndate: Sun, 06 Dec 2026 20:02:40 GMT\r\n\r\n";
        let at = date_header(head).unwrap();
        let expected: jiff::Timestamp = "2026-12-06T20:02:40Z".parse().unwrap();
        assert_eq!(at, expected.as_nanosecond());
        assert!(
            date_header("HTTP/1.1 200 OK\r\n\r\n")
                .unwrap_err()
                .to_string()
                .contains("no Date header")
        );
        assert!(
            date_header("\u{0}\u{0}\u{0}\u{4}")
                .unwrap_err()
                .to_string()
                .contains("not HTTP")
        );
        assert!(
            date_header("HTTP/1.1 200 OK\r\nDate: yesterday\r\n\r\n")
                .unwrap_err()
                .to_string()
                .contains("not an HTTP date")
        );
    }

    #[test]
    fn members_are_read_from_the_endpoints() {
        let m = |e: &str| Member::parse(e).map(|m| m.to_string());
        assert_eq!(m("127.0.0.1:2379").as_deref(), Some("127.0.0.1:2379"));
        assert_eq!(m("https://etcd.example:2379/").as_deref(), Some("etcd.example:2379"));
        assert_eq!(m("http://[::1]:2379").as_deref(), Some("[::1]:2379"));
        assert_eq!(m("etcd.example"), None);
    }

    #[test]
    fn a_member_without_http_says_which_and_why() {
        // A port nothing listens on: a closed one, found by closing it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let clock = Arc::new(DateClock::new(
            vec![Member::parse(&format!("127.0.0.1:{port}")).unwrap()],
            None,
            Duration::from_secs(2),
        ));
        let e = clock.now().unwrap_err().to_string();
        assert!(e.contains(&format!("127.0.0.1:{port}: cannot connect")), "{e}");
        assert!(e.contains("GET /version"), "{e}");
    }
}
