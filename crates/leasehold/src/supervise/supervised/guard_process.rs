//! The guard process beside a supervised command: spawning it (one at a
//! time, so that no guard inherits another's descriptors), the slot that
//! keeps one guard for a worker's runs ([`GuardSlot`]), the control
//! socket's messages to it ([`send`]) and the thread that turns its
//! reports into events ([`read_reports`]).

use std::io::{BufRead, BufReader, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};

use super::{Event, Spec, Supervised, lock};
use crate::supervise::guard::protocol::{Control, Report};
use crate::supervise::{GUARD_BUILD, GuardProgram, SuperviseError};
use crate::{LostReason, Refusal, host};

/// The guard process, and where its reports go: shared by a
/// [`GuardSlot`] and the commands it runs one after another, or owned by
/// one [`Supervised`] command.
#[derive(Debug)]
pub(super) struct Guard<L> {
    pub(super) program: String,
    pub(super) child: Mutex<Child>,
    /// Our end of the control socket: the command's environment, then
    /// trust windows (from keeper threads, hence shared); closing it (or
    /// our death) tells the guard we are gone.
    pub(super) control: Arc<Mutex<Option<OwnedFd>>>,
    /// The event loop of the command that runs now, fed by the thread
    /// reading the guard's reports.
    pub(super) sink: Arc<Mutex<Sink<L>>>,
}

#[derive(Debug)]
pub(super) struct Sink<L> {
    pub(super) tx: Option<mpsc::Sender<Event<L>>>,
    /// The report pipe closed: the guard is gone.
    pub(super) gone: bool,
}

impl<L> Guard<L> {
    pub(super) fn close_control(&self) {
        drop(lock(&self.control).take());
    }
}

impl<L> Drop for Guard<L> {
    fn drop(&mut self) {
        // The guard ends on EOF, after stopping whatever still runs.
        self.close_control();
        let _ = lock(&self.child).wait();
    }
}

/// Spawning a guard hands it the child ends of a socket and a pipe;
/// serializing the spawns (and so the moments those ends are inheritable)
/// keeps one guard from inheriting another's ends, which would keep them
/// open after its guard died.
static SPAWN: Mutex<()> = Mutex::new(());

/// Make `fd` survive exec (inherited by the guard).
pub(super) fn inheritable(fd: &OwnedFd) -> Result<(), SuperviseError> {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(|e| SuperviseError::Io {
        what: "cannot pass a descriptor to the guard",
        error: e.into(),
    })
}

/// A pipe, both ends close-on-exec: (read, write).
pub(super) fn pipe() -> Result<(OwnedFd, OwnedFd), SuperviseError> {
    host::pipe(false).map_err(|error| SuperviseError::Io {
        what: "cannot create a pipe for the command",
        error,
    })
}

/// Start `spec`'s guard program — or, where it cannot be started, its
/// fallback ([`GuardProgram::or_else`]) — with `extra` arguments, the
/// command's stdin, stdout and stderr piped where `piped` says (else
/// inherited), its reports sent on `tx`. Returns the guard and the
/// program it runs.
pub(super) fn start_guard<L: Refusal>(
    spec: &Spec,
    cwd: Option<&std::path::Path>,
    extra: &[&str],
    piped: [bool; 3],
    tx: &mpsc::Sender<Event<L>>,
) -> Result<(Guard<L>, GuardProgram), SuperviseError> {
    let mut program = spec.guard.clone();
    loop {
        match spawn_guard(spec, &program, cwd, extra, piped, tx) {
            Ok(guard) => return Ok((guard, program)),
            Err(error) => program = next_program(&program, error)?,
        }
    }
}

/// `program` is not this build's guard (`error` says how): its fallback,
/// or the error when it has none.
pub(super) fn next_program(program: &GuardProgram, error: SuperviseError) -> Result<GuardProgram, SuperviseError> {
    let next = program.fallback().ok_or(error)?;
    tracing::debug!("starting the guard program {next} instead of {program}");
    Ok(next.clone())
}

fn spawn_guard<L: Refusal>(
    spec: &Spec,
    guard: &GuardProgram,
    cwd: Option<&std::path::Path>,
    extra: &[&str],
    piped: [bool; 3],
    tx: &mpsc::Sender<Event<L>>,
) -> Result<Guard<L>, SuperviseError> {
    let program = guard.to_string();
    let stdio = |yes: bool| if yes { Stdio::piped() } else { Stdio::inherit() };
    let (child, control, report) = {
        let _one_at_a_time = lock(&SPAWN);
        let (control, control_child) = host::control_socket_pair().map_err(|error| SuperviseError::Io {
            what: "cannot create the guard's control socket",
            error,
        })?;
        let (report, report_child) = host::pipe(false).map_err(|error| SuperviseError::Io {
            what: "cannot create a pipe to the guard",
            error,
        })?;
        inheritable(&control_child)?;
        inheritable(&report_child)?;
        let mut command = match cwd {
            // A relative path to the guard is this process's, not the
            // command's directory's.
            Some(_) if guard.program().is_relative() && guard.program().components().count() > 1 => GuardProgram::new(
                std::path::absolute(guard.program()).map_err(|error| SuperviseError::Io {
                    what: "cannot find the guard program's absolute path",
                    error,
                })?,
            )
            .with_args(guard.args().to_vec())
            .command(),
            _ => guard.command(),
        };
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        let child = command
            .arg(format!("--control-fd={}", control_child.as_raw_fd()))
            .arg(format!("--report-fd={}", report_child.as_raw_fd()))
            .arg(format!("--grace={}ms", spec.grace.as_millis()))
            .args(extra)
            .arg("--")
            .args(&spec.command)
            .stdin(stdio(piped[0]))
            .stdout(stdio(piped[1]))
            .stderr(stdio(piped[2]))
            // A group of its own: a kill -9 of the supervisor's whole
            // process group (a shell's `kill -9 %1`, a process manager
            // killing what it started) leaves the guard alive to see the
            // control socket close and stop the command — in the
            // supervisor's group, both died at once and the command ran
            // on past the lease's TTL.
            .process_group(0)
            .spawn()
            .map_err(|error| SuperviseError::GuardSpawn {
                program: program.clone(),
                error,
            })?;
        (child, control, report)
    };
    let sink = Arc::new(Mutex::new(Sink {
        tx: Some(tx.clone()),
        gone: false,
    }));
    read_reports(report, sink.clone());
    Ok(Guard {
        program,
        child: Mutex::new(child),
        control: Arc::new(Mutex::new(Some(control))),
        sink,
    })
}

impl<L> Guard<L> {
    /// The error of a guard whose first report was `build THEIRS`.
    pub(super) fn other_build(&self, theirs: String) -> SuperviseError {
        SuperviseError::GuardOtherBuild {
            program: self.program.clone(),
            theirs,
            ours: GUARD_BUILD.to_owned(),
        }
    }

    /// The error of a guard that ended before its first report.
    pub(super) fn silent(&self) -> SuperviseError {
        SuperviseError::GuardSilent {
            program: self.program.clone(),
        }
    }

    /// Send this guard's reports nowhere: it runs no command now (a
    /// slot's, until the next run), or was not this build's guard.
    pub(super) fn mute(&self) {
        lock(&self.sink).tx = None;
    }
}

/// A command's event channel: the guard's reports (and stops, signals)
/// go in, the event loop takes them out.
pub(super) type Channel<L> = (mpsc::Sender<Event<L>>, mpsc::Receiver<Event<L>>);

/// A guard that runs the same command once per [`GuardSlot::next`], each
/// run in a new process group of its own, one run at a time — what a
/// worker keeps per slot, so that a task pays for no process but its
/// command. Each run is supervised as a [`Supervised`] command is: tied to
/// its own claim's keeper ([`Supervised::follow`]), stopped by the guard
/// when its trust window closes, its whole tree gone before it is
/// reported finished. Dropping the slot ends the guard.
#[derive(Debug)]
pub struct GuardSlot<L: Refusal = LostReason> {
    guard: Arc<Guard<L>>,
    spec: Spec,
}

impl<L: Refusal> GuardSlot<L> {
    /// Start a guard for `spec`'s command, grace, output and stall watch
    /// (its `stdin` is ignored: each run gets its own, from
    /// [`GuardSlot::next`]).
    ///
    /// # Errors
    /// [`SuperviseError`] when the guard cannot be started or does not
    /// report.
    pub fn spawn(spec: Spec) -> Result<Self, SuperviseError> {
        let mut spec = spec;
        loop {
            let (tx, rx) = mpsc::channel();
            let (guard, program) = start_guard(&spec, None, &["--slot"], [false; 3], &tx)?;
            let error = match rx.recv() {
                Ok(Event::Ready) => {
                    guard.mute();
                    return Ok(Self {
                        guard: Arc::new(guard),
                        spec,
                    });
                }
                Ok(Event::OtherBuild(theirs)) => guard.other_build(theirs),
                _ => guard.silent(),
            };
            spec.guard = next_program(&program, error)?;
        }
    }

    /// Whether the guard is still there (a slot whose guard died must be
    /// replaced).
    #[must_use]
    pub fn is_alive(&self) -> bool {
        !lock(&self.guard.sink).gone
    }

    /// The next run, with `stdin` as its input (`None`: this process's
    /// stdin). Follow, start and wait for it as for [`Supervised::spawn`];
    /// one run at a time.
    ///
    /// # Errors
    /// [`SuperviseError::GuardSilent`] when the guard is gone (replace the
    /// slot), [`SuperviseError::Io`] when a run is still in progress.
    pub fn next(&mut self, stdin: Option<Vec<u8>>) -> Result<Supervised<L>, SuperviseError> {
        let (tx, rx) = mpsc::channel();
        {
            let mut sink = lock(&self.guard.sink);
            if sink.gone {
                return Err(SuperviseError::GuardSilent {
                    program: self.guard.program.clone(),
                });
            }
            if sink.tx.is_some() {
                return Err(SuperviseError::Io {
                    what: "the guard is still running the previous command",
                    error: std::io::ErrorKind::ResourceBusy.into(),
                });
            }
            sink.tx = Some(tx.clone());
        }
        Ok(Supervised::of_guard(
            self.guard.clone(),
            false,
            &self.spec,
            stdin,
            (tx, rx),
        ))
    }
}

/// Send one message to the guard, with `fds`, never blocking: a message
/// that does not fit (the guard is stopped and does not read) is an error
/// — for a trust window, dropped, and the guard, when it runs again, stops
/// the command at the last window it heard of: early, never late.
pub(super) fn send(control: &Mutex<Option<OwnedFd>>, message: &Control) -> std::io::Result<()> {
    let (message, fds) = message.encode();
    let control = lock(control);
    let socket = control
        .as_ref()
        .ok_or_else(|| std::io::Error::other("the guard was already released"))?;
    if message.len() > host::CONTROL_MESSAGE_MAX {
        // The guard would read it cut short (and start nothing).
        return Err(std::io::Error::other(format!(
            "a message to the guard of {} bytes is longer than the {} its control socket carries (a command's environment that large is refused)",
            message.len(),
            host::CONTROL_MESSAGE_MAX
        )));
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !ancillary.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("too many descriptors for one message"));
    }
    let sent = sendmsg(
        socket,
        &[IoSlice::new(message.as_bytes())],
        &mut ancillary,
        SendFlags::DONTWAIT | host::SEND_NO_SIGNAL,
    )?;
    if sent == message.len() {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "the guard's control socket took part of a message",
        ))
    }
}

/// Turn the guard's report lines into events for the command that runs
/// now; when the pipe closes, the guard is gone.
pub(super) fn read_reports<L: Refusal>(report: OwnedFd, sink: Arc<Mutex<Sink<L>>>) {
    thread::spawn(move || {
        for line in BufReader::new(std::fs::File::from(report)).lines() {
            let Ok(line) = line else { break };
            let event = match Report::decode(&line) {
                Ok(Report::Group(group)) => Event::Group(group),
                Ok(Report::Ready) => Event::Ready,
                Ok(Report::OtherBuild(build)) => Event::OtherBuild(build),
                Ok(Report::Started(pid)) => Event::Started(pid),
                Ok(Report::SpawnError { code, message }) => Event::SpawnError(code, message),
                Ok(Report::Deadline) => Event::GuardDeadline,
                Ok(Report::Exited(exit)) => Event::Exited(exit),
                Err(e) => {
                    tracing::debug!("ignored: {e}");
                    continue;
                }
            };
            if let Some(tx) = &lock(&sink).tx {
                let _ = tx.send(event);
            }
        }
        let mut sink = lock(&sink);
        sink.gone = true;
        if let Some(tx) = &sink.tx {
            let _ = tx.send(Event::GuardGone);
        }
    });
}
