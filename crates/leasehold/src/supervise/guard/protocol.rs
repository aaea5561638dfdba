//! The guard's protocol: what the guard reports to its supervisor
//! ([`Report`]) and what the supervisor tells it ([`Control`]), each
//! message encoded and decoded here and nowhere else — the guard process
//! (`mod.rs`) and the supervisor (`supervised/`) both use these types.
//! The format carries no version of its own: a supervisor passes its
//! build (`--build=BUILD`, [`super::GUARD_BUILD`]) and a guard of another
//! build starts nothing and reports `build BUILD`, its own — a guard
//! found on `$PATH`, or left beside a program that was upgraded alone, is
//! never trusted to speak this protocol.
//!
//! # Control socket (supervisor → guard)
//!
//! [`crate::host::control_socket_pair`]: `SOCK_SEQPACKET` on Linux,
//! `SOCK_DGRAM` on macOS; one message per datagram, with its descriptors
//! (`SCM_RIGHTS`) alongside:
//!
//! - `window NS`: the trust window ends at boot-clock NS;
//! - `env STREAMS JSON`: start the command with these variables added
//!   (a JSON object of strings). STREAMS is `-`, or which of `0`, `1`, `2`
//!   (stdin, stdout, stderr) are replaced by the descriptors that come with
//!   the message, in that order.
//!
//! # Report pipe (guard → supervisor)
//!
//! One line per report, each written in one `write` (a once-guard's
//! command process writes its spawn error to the same pipe): `group PID`
//! (a once-guard's G), `ready` (a slot's guard is up), `build BUILD` (this
//! guard is of another build than its supervisor, and ends), `started PID`,
//! `spawn-error CODE "MESSAGE"`, `deadline`, `exited code N` / `exited
//! signal N`. The spawn error's message is a JSON string, so that a
//! newline in it (a command's name may hold one) cannot end the line early
//! and pass the rest off as a report of its own.
//!
//! A message that does not decode is a [`DecodeError`]; both ends ignore
//! it, as a message that means nothing.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::process::Pid;

use crate::supervise::child::Exit;

/// What an `env` message adds to the command's environment.
pub(crate) type Env = BTreeMap<String, String>;

/// The command's stdin, stdout and stderr for a slot's run, passed with
/// its `env` message; where `None`, the guard's own.
pub(crate) type Streams = [Option<OwnedFd>; 3];

/// What the guard reports to its supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// A once-guard's command process leads this group.
    Group(Pid),
    /// A slot's guard is up.
    Ready,
    /// The guard is of this build, not its supervisor's: it started
    /// nothing, and ends.
    OtherBuild(String),
    /// The command runs, the leader of this group.
    Started(Pid),
    /// The command could not be started: the shell's code (127 not found,
    /// 126 otherwise) and why.
    SpawnError { code: u8, message: String },
    /// The trust window closed: the guard is stopping the command.
    Deadline,
    /// The run's whole tree is gone; its command ended so.
    Exited(Exit),
}

/// The longest report line: POSIX's least `PIPE_BUF` (macOS's own), so
/// that each report is one write that lands whole — a once-guard's
/// command process writes its spawn error to the pipe the guard reports
/// on, and neither may land inside the other's line.
pub(crate) const LINE_MAX: usize = 512;

/// A spawn error's line, its message (a JSON string: a newline in it
/// cannot end the line) cut with `…` until the line fits [`LINE_MAX`] —
/// a command line can be far longer.
fn spawn_error_line(code: u8, message: &str) -> String {
    let mut keep = message.chars().count();
    loop {
        let shown = crate::shorten(message, keep);
        let json = serde_json::to_string(&shown).expect("a string always serializes");
        let line = format!("spawn-error {code} {json}\n");
        if line.len() <= LINE_MAX || keep == 0 {
            return line;
        }
        // Escapes make the JSON longer than the text: cut by what is over.
        keep = keep.saturating_sub((line.len() - LINE_MAX).max(1).div_ceil(6).max(1));
    }
}

impl Report {
    /// The report's line, with its newline: one `write`.
    pub(crate) fn encode(&self) -> String {
        match self {
            Self::Group(pid) => format!("group {}\n", pid.as_raw_nonzero()),
            Self::Ready => "ready\n".into(),
            Self::OtherBuild(build) => format!("build {build}\n"),
            Self::Started(pid) => format!("started {}\n", pid.as_raw_nonzero()),
            Self::SpawnError { code, message } => spawn_error_line(*code, message),
            Self::Deadline => "deadline\n".into(),
            Self::Exited(Exit::Code(code)) => format!("exited code {code}\n"),
            Self::Exited(Exit::Signal(sig)) => format!("exited signal {sig}\n"),
        }
    }

    /// One line of the report pipe, without its newline.
    pub(crate) fn decode(line: &str) -> Result<Self, DecodeError> {
        let malformed = |reason| DecodeError::new(line, reason);
        let Some((kind, rest)) = line.split_once(' ') else {
            return match line {
                "ready" => Ok(Self::Ready),
                "deadline" => Ok(Self::Deadline),
                _ => Err(malformed("not a report")),
            };
        };
        match kind {
            "group" => pid(rest).map(Self::Group).ok_or_else(|| malformed("not a process id")),
            "build" => Ok(Self::OtherBuild(rest.to_owned())),
            "started" => pid(rest)
                .map(Self::Started)
                .ok_or_else(|| malformed("not a process id")),
            "spawn-error" => {
                let (code, message) = rest.split_once(' ').ok_or_else(|| malformed("no message"))?;
                Ok(Self::SpawnError {
                    code: code.parse().map_err(|_| malformed("not an exit code"))?,
                    message: serde_json::from_str(message)
                        .map_err(|_| malformed("the message is not a JSON string"))?,
                })
            }
            "exited" => {
                let exit = match rest.split_once(' ') {
                    Some(("code", n)) => n.parse().map(Exit::Code),
                    Some(("signal", n)) => n.parse().map(Exit::Signal),
                    _ => return Err(malformed("neither a code nor a signal")),
                };
                exit.map(Self::Exited)
                    .map_err(|_| malformed("not a code or signal number"))
            }
            _ => Err(malformed("not a report")),
        }
    }
}

/// A process id as the guard writes it: positive.
fn pid(text: &str) -> Option<Pid> {
    text.parse::<i32>().ok().filter(|raw| *raw > 0).and_then(Pid::from_raw)
}

/// What the supervisor tells its guard.
#[derive(Debug)]
pub(crate) enum Control {
    /// The trust window now ends at this boot-clock time.
    Window(Duration),
    /// Start the command with these variables added, and these streams.
    Env(Env, Streams),
    /// Stop the run: SIGTERM to its tree (each process once), SIGKILL
    /// after the grace — as at the end of the trust window.
    Stop,
}

impl Control {
    /// The message's text, and the descriptors that go with it, in order.
    pub(crate) fn encode(&self) -> (String, Vec<BorrowedFd<'_>>) {
        match self {
            Self::Window(until) => (format!("window {}", until.as_nanos()), Vec::new()),
            Self::Stop => ("stop".into(), Vec::new()),
            Self::Env(env, streams) => {
                let mut names = String::new();
                let mut fds = Vec::new();
                for (name, fd) in ['0', '1', '2'].into_iter().zip(streams) {
                    if let Some(fd) = fd {
                        names.push(name);
                        fds.push(fd.as_fd());
                    }
                }
                if names.is_empty() {
                    names.push('-');
                }
                let env = serde_json::to_string(env).expect("a map of strings always serializes");
                (format!("env {names} {env}"), fds)
            }
        }
    }

    /// One message's text, and the descriptors that came with it (closed
    /// with the error when it does not decode).
    pub(crate) fn decode(text: &[u8], fds: Vec<OwnedFd>) -> Result<Self, DecodeError> {
        let text =
            std::str::from_utf8(text).map_err(|_| DecodeError::new(&String::from_utf8_lossy(text), "not UTF-8"))?;
        let malformed = |reason| DecodeError::new(text, reason);
        if text == "stop" {
            return if fds.is_empty() {
                Ok(Self::Stop)
            } else {
                Err(malformed("descriptors came with a stop"))
            };
        }
        match text.split_once(' ') {
            Some(("window", ns)) if fds.is_empty() => ns
                .parse()
                .map(|ns| Self::Window(Duration::from_nanos(ns)))
                .map_err(|_| malformed("not a time in nanoseconds")),
            Some(("window", _)) => Err(malformed("descriptors came with a window")),
            Some(("env", rest)) => {
                let (names, env) = rest.split_once(' ').ok_or_else(|| malformed("no environment"))?;
                let streams =
                    streams(names, fds).ok_or_else(|| malformed("the streams do not match the descriptors"))?;
                let env = serde_json::from_str(env)
                    .map_err(|_| malformed("the environment is not a JSON object of strings"))?;
                Ok(Self::Env(env, streams))
            }
            _ => Err(malformed("not a control message")),
        }
    }
}

/// The streams `names` (`-`, or some of `0`, `1`, `2` in that order) get
/// `fds`, one each in order; `None` unless they match.
fn streams(names: &str, fds: Vec<OwnedFd>) -> Option<Streams> {
    let mut streams: Streams = [None, None, None];
    let mut fds = fds.into_iter();
    match names {
        "-" => {}
        "" => return None,
        _ => {
            // The lowest stream a name may still be: each comes once, in order.
            let mut lowest = 0;
            for name in names.chars() {
                let i = name.to_digit(10).filter(|i| (lowest..3).contains(i))?;
                streams[i as usize] = Some(fds.next()?);
                lowest = i + 1;
            }
        }
    }
    // Every descriptor that came is named.
    fds.next().is_none().then_some(streams)
}

/// A message that does not decode: its text and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed message between the guard and its supervisor ({reason}): {text:?}")]
pub(crate) struct DecodeError {
    text: String,
    reason: &'static str,
}

impl DecodeError {
    fn new(text: &str, reason: &'static str) -> Self {
        Self {
            text: text.to_owned(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports() -> Vec<Report> {
        let pid = Pid::from_raw(4242).unwrap();
        vec![
            Report::Group(pid),
            Report::Ready,
            Report::OtherBuild(crate::supervise::GUARD_BUILD.to_owned()),
            Report::Started(pid),
            Report::SpawnError {
                code: 127,
                message: "cannot run nope: No such file or directory (os error 2)".into(),
            },
            // A command's name may hold a newline, quotes, backslashes.
            Report::SpawnError {
                code: 126,
                message: "cannot run x\nexited code 0\r\n\"q\" \\ é: denied".into(),
            },
            Report::SpawnError {
                code: 126,
                message: String::new(),
            },
            Report::Deadline,
            Report::Exited(Exit::Code(0)),
            Report::Exited(Exit::Code(255)),
            Report::Exited(Exit::Signal(9)),
        ]
    }

    #[test]
    fn every_report_is_one_line_that_decodes_to_itself() {
        for report in reports() {
            let line = report.encode();
            let text = line.strip_suffix('\n').unwrap();
            assert!(!text.contains(['\n', '\r']), "{line:?}");
            assert_eq!(Report::decode(text), Ok(report));
        }
    }

    #[test]
    fn reports_keep_their_wire_format() {
        let pid = Pid::from_raw(7).unwrap();
        assert_eq!(Report::Group(pid).encode(), "group 7\n");
        assert_eq!(Report::Ready.encode(), "ready\n");
        assert_eq!(Report::OtherBuild("0.1.0-00ff".into()).encode(), "build 0.1.0-00ff\n");
        assert_eq!(Report::Started(pid).encode(), "started 7\n");
        assert_eq!(Report::Deadline.encode(), "deadline\n");
        assert_eq!(Report::Exited(Exit::Code(3)).encode(), "exited code 3\n");
        assert_eq!(Report::Exited(Exit::Signal(15)).encode(), "exited signal 15\n");
        let spawn_error = Report::SpawnError {
            code: 127,
            message: "cannot run a\nb".into(),
        };
        assert_eq!(spawn_error.encode(), "spawn-error 127 \"cannot run a\\nb\"\n");
    }

    /// A report longer than the least `PIPE_BUF` could be torn by the
    /// command process's own write to the same pipe.
    #[test]
    fn every_report_fits_one_atomic_pipe_write() {
        for message in ["x".repeat(100_000), "\u{1}".repeat(10_000), "ü\n".repeat(5_000)] {
            let report = Report::SpawnError {
                code: 126,
                message: message.clone(),
            };
            let line = report.encode();
            assert!(line.len() <= LINE_MAX, "{} bytes", line.len());
            assert!(
                line.len() > LINE_MAX - 16,
                "cut no more than it must: {} bytes",
                line.len()
            );
            let Ok(Report::SpawnError { message: shown, .. }) = Report::decode(line.trim_end_matches('\n')) else {
                panic!("{line:?} does not decode")
            };
            assert!(
                shown.ends_with('…') && message.starts_with(shown.trim_end_matches('…')),
                "{shown:?}"
            );
        }
    }

    #[test]
    fn a_newline_in_a_spawn_error_cannot_pass_off_a_report_of_its_own() {
        let report = Report::SpawnError {
            code: 127,
            message: "cannot run x\nexited code 0".into(),
        };
        let lines: Vec<_> = report.encode().lines().map(Report::decode).collect();
        assert_eq!(lines, [Ok(report)]);
    }

    #[test]
    fn malformed_reports_are_errors() {
        for line in [
            "",
            " ",
            "hello",
            "ready now",
            "deadline 5",
            "group",
            "group ",
            "group x",
            "group 0",
            "group -5",
            "group 99999999999",
            "started 1.5",
            "exited",
            "exited code",
            "exited code x",
            "exited code 256",
            "exited code -1",
            "exited signal",
            "exited signal 300",
            "exited status 3",
            "spawn-error",
            "spawn-error 127",
            "spawn-error x \"m\"",
            "spawn-error 127 unquoted text",
            "spawn-error 127 \"unterminated",
            "spawn-error 127 \"one\" \"two\"",
            "spawn-error 127 7",
        ] {
            assert!(Report::decode(line).is_err(), "{line:?} decoded");
        }
    }

    /// Descriptors standing in for stdin, stdout, stderr.
    fn pipes(n: usize) -> Vec<OwnedFd> {
        (0..n).map(|_| crate::host::pipe(false).unwrap().0).collect()
    }

    fn same_file(a: Option<&OwnedFd>, b: Option<&OwnedFd>) -> bool {
        let id = |fd: &OwnedFd| rustix::fs::fstat(fd).map(|s| (s.st_dev, s.st_ino)).unwrap();
        match (a, b) {
            (Some(a), Some(b)) => id(a) == id(b),
            (None, None) => true,
            _ => false,
        }
    }

    /// Encode, pass the descriptors on (as the socket does: new numbers
    /// for the same files), decode.
    fn round_trip(message: &Control) -> Control {
        let (text, fds) = message.encode();
        let passed = fds.iter().map(|fd| fd.try_clone_to_owned().unwrap()).collect();
        Control::decode(text.as_bytes(), passed).unwrap()
    }

    #[test]
    fn every_control_message_decodes_to_itself() {
        let until = Duration::from_nanos(123_456_789_012);
        assert!(matches!(round_trip(&Control::Window(until)), Control::Window(back) if back == until));
        assert!(matches!(round_trip(&Control::Stop), Control::Stop));
        let env: Env = [
            ("LEASEHOLD_TOKEN", "42"),
            ("SPACED", "a b  c"),
            ("LINES", "one\ntwo"),
            ("QUOTED", "\"é\" \\"),
            ("EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        for passed in [
            [false, false, false],
            [true, false, false],
            [false, true, true],
            [true, true, true],
        ] {
            let mut fds = pipes(3).into_iter();
            let streams = passed.map(|p| fds.next().filter(|_| p));
            let message = Control::Env(env.clone(), streams);
            let Control::Env(back_env, back_streams) = round_trip(&message) else {
                panic!("not env");
            };
            let Control::Env(_, streams) = &message else {
                unreachable!()
            };
            assert_eq!(back_env, env);
            for (sent, came) in streams.iter().zip(&back_streams) {
                assert!(same_file(sent.as_ref(), came.as_ref()), "{passed:?}");
            }
        }
    }

    #[test]
    fn control_messages_keep_their_wire_format() {
        let window = Control::Window(Duration::from_nanos(5));
        let (text, fds) = window.encode();
        assert_eq!((text.as_str(), fds.len()), ("window 5", 0));
        assert_eq!(Control::Stop.encode().0, "stop");
        let env: Env = [("A".to_owned(), "b".to_owned())].into();
        let message = Control::Env(env.clone(), [None, None, None]);
        assert_eq!(message.encode().0, r#"env - {"A":"b"}"#);
        let mut fds = pipes(2).into_iter();
        let message = Control::Env(env, [None, fds.next(), fds.next()]);
        let (text, fds) = message.encode();
        assert_eq!((text.as_str(), fds.len()), (r#"env 12 {"A":"b"}"#, 2));
    }

    #[test]
    fn malformed_control_messages_are_errors() {
        for (text, fds) in [
            (&b""[..], 0),
            (b"window", 0),
            (b"window ", 0),
            (b"window x", 0),
            (b"window -1", 0),
            (b"window 1 2", 0),
            (b"window 5", 1),
            (b"stop now", 0),
            (b"stop", 1),
            (b"stop ", 0),
            (b"\xff\xfe window 5", 0),
            (b"env", 0),
            (b"env -", 0),
            (b"env - ", 0),
            (b"env - not json", 0),
            (b"env - [\"A\"]", 0),
            (br#"env - {"A":1}"#, 0),
            (br#"env - {"A":"b"} trailing"#, 0),
            (b"env - {}", 1),
            (b"env 0 {}", 0),
            (b"env 01 {}", 1),
            (b"env 0 {}", 2),
            (b"env 3 {}", 1),
            (b"env 10 {}", 2),
            (b"env 00 {}", 2),
            (b"env x {}", 1),
            (b"env  {}", 0),
        ] {
            assert!(
                Control::decode(text, pipes(fds)).is_err(),
                "{:?} with {fds} fds decoded",
                String::from_utf8_lossy(text)
            );
        }
    }
}
