//! How a front end spells the settings a message names. The library words
//! each refusal and remedy once (a timing that cannot work, a lease or
//! lock held by others); the words differ between front ends only in how
//! a setting is written — the CLI's `--ttl 10s` and `--wait [DUR]`,
//! Python's `ttl=10s` and `wait=DURATION`, JavaScript's `{ ttl: "10s" }` — so the front end passes its
//! [`Spelling`] and the library renders the sentence.

/// A setting a message names or tells the caller to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Setting {
    /// The grant's TTL.
    Ttl,
    /// How often the grant is renewed.
    Heartbeat,
    /// SIGTERM to SIGKILL.
    Grace,
    /// A wait for a lease or lock held by others.
    Wait,
    /// A fenced write's word that the file now belongs to the writer's
    /// lease (a record of another lease is replaced).
    FenceNewLease,
}

/// How a front end writes a [`Setting`]. Implemented by each front end
/// (the CLI's flags, Python's keyword arguments).
pub trait Spelling {
    /// The setting as a remedy names it: `--ttl`, `ttl=`; for
    /// [`Setting::Wait`], how to ask for a wait: `--wait [DUR]`,
    /// `wait=DURATION`.
    fn name(&self, setting: Setting) -> &'static str;

    /// The setting with its value: `--ttl 10s` (the default: the name, a
    /// space, the value), `ttl=10s`.
    fn with_value(&self, setting: Setting, value: &str) -> String {
        format!("{} {value}", self.name(setting))
    }
}

/// The command line's spelling: its flags (`--ttl 10s`, `--wait [DUR]`).
#[derive(Debug, Clone, Copy)]
pub struct Flags;

impl Spelling for Flags {
    fn name(&self, setting: Setting) -> &'static str {
        match setting {
            Setting::Ttl => "--ttl",
            Setting::Heartbeat => "--heartbeat",
            Setting::Grace => "--grace",
            Setting::Wait => "--wait [DUR]",
            Setting::FenceNewLease => "`--fence-new-lease`",
        }
    }
}

/// Python's spelling: the keyword arguments (`ttl=10s`, `wait=DURATION`).
#[derive(Debug, Clone, Copy)]
pub struct Keywords;

impl Spelling for Keywords {
    fn name(&self, setting: Setting) -> &'static str {
        match setting {
            Setting::Ttl => "ttl=",
            Setting::Heartbeat => "heartbeat=",
            Setting::Grace => "grace=",
            Setting::Wait => "wait=DURATION",
            Setting::FenceNewLease => "fence_new_lease=True",
        }
    }

    fn with_value(&self, setting: Setting, value: &str) -> String {
        format!("{}{value}", self.name(setting))
    }
}

/// JavaScript's spelling: the options object (`{ ttl: "10s" }`,
/// `{ wait: DURATION }`).
#[derive(Debug, Clone, Copy)]
pub struct Options;

impl Spelling for Options {
    fn name(&self, setting: Setting) -> &'static str {
        match setting {
            Setting::Ttl => "{ ttl }",
            Setting::Heartbeat => "{ heartbeat }",
            Setting::Grace => "{ grace }",
            Setting::Wait => "{ wait: DURATION }",
            Setting::FenceNewLease => "{ fenceNewLease: true }",
        }
    }

    fn with_value(&self, setting: Setting, value: &str) -> String {
        let key = match setting {
            Setting::Ttl => "ttl",
            Setting::Heartbeat => "heartbeat",
            Setting::Grace => "grace",
            Setting::Wait => "wait",
            Setting::FenceNewLease => "fenceNewLease",
        };
        format!("{{ {key}: \"{value}\" }}")
    }
}

/// The remedy for a refusal by holders who may leave: try again, or wait
/// for them ("Try again later, or wait with --wait \[DUR\]").
#[must_use]
pub fn try_again(spelling: &dyn Spelling) -> String {
    format!("Try again later, or wait with {}", spelling.name(Setting::Wait))
}
