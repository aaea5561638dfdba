//! The trust window: how a hold is kept ([`KeeperOptions`]: TTL,
//! heartbeat, margin) and until when a renewal sent at `sent` may be
//! trusted — `sent + ttl - margin` (the module docs of `keeper` say why).

use std::time::Duration;

use leasehold_backend::limits;

use crate::Result;

/// How to keep a grant. Each duration lies within its limit
/// ([`limits::TTL`], [`limits::HEARTBEAT`], [`limits::MARGIN`]), which
/// [`KeeperOptions::problem`] checks.
#[derive(Debug, Clone)]
pub struct KeeperOptions {
    /// The TTL each renewal asks for (normally the grant's own).
    pub ttl: Duration,
    /// How often to renew; default `ttl / 3`.
    pub heartbeat: Option<Duration>,
    /// How long before the store could expire the grant the holder stops
    /// trusting it: time to stop using it, plus slack.
    pub margin: Duration,
}

impl KeeperOptions {
    /// Options for `ttl` with the default heartbeat and a margin of a tenth
    /// of the TTL.
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            heartbeat: None,
            margin: ttl / 10,
        }
    }

    pub(super) fn heartbeat(&self) -> Duration {
        self.heartbeat.unwrap_or(self.ttl / 3)
    }

    fn check_limits(&self) -> Result<(), limits::OutOfRange> {
        limits::TTL.check(self.ttl)?;
        if let Some(heartbeat) = self.heartbeat {
            limits::HEARTBEAT.check(heartbeat)?;
        }
        limits::MARGIN.check(self.margin)?;
        Ok(())
    }

    /// Options for `ttl`, with `heartbeat` and `margin` when given (else
    /// the defaults of [`KeeperOptions::new`]) — refused, naming the
    /// values as `spelling` writes them, when they cannot keep a grant
    /// ([`KeeperOptions::problem`]).
    ///
    /// # Errors
    /// The refusal's sentence, for the caller's `InvalidInput`.
    pub fn checked(
        ttl: Duration,
        heartbeat: Option<Duration>,
        margin: Option<Duration>,
        spelling: &dyn crate::spelling::Spelling,
    ) -> Result<Self, String> {
        use crate::spelling::Setting;
        let mut keep = Self::new(ttl);
        keep.heartbeat = heartbeat;
        if let Some(margin) = margin {
            keep.margin = margin;
        }
        match keep.problem() {
            None => Ok(keep),
            Some(problem) => Err(format!(
                "cannot keep a grant with {}, {} and a margin of {}: {problem}",
                spelling.with_value(Setting::Ttl, &crate::format_duration(keep.ttl)),
                spelling.with_value(Setting::Heartbeat, &crate::format_duration(keep.heartbeat())),
                crate::format_duration(keep.margin)
            )),
        }
    }

    /// Why these options cannot keep a grant safely, if they cannot: a
    /// duration out of its limit, or a first renewal that could not go out
    /// before the window closes. A keeper started anyway never panics (its
    /// arithmetic saturates), but it would not keep the grant.
    #[must_use]
    pub fn problem(&self) -> Option<String> {
        if let Err(e) = self.check_limits() {
            return Some(e.to_string());
        }
        if self.heartbeat().is_zero() {
            return Some("the heartbeat must be longer than zero".into());
        }
        (self.heartbeat().saturating_add(self.margin) >= self.ttl).then(|| {
            format!(
                "heartbeat {} + margin {} is not shorter than the TTL {}: the grant would stop being trusted before the first renewal",
                crate::format_duration(self.heartbeat()),
                crate::format_duration(self.margin),
                crate::format_duration(self.ttl)
            )
        })
    }
}

/// `sent + ttl - margin`, saturating: until when a grant renewed by a
/// request sent at `sent` may be trusted (see the module docs).
pub(super) fn trusted_until(sent: Duration, options: &KeeperOptions) -> Duration {
    let until = sent.saturating_add(options.ttl).saturating_sub(options.margin);
    // Planted bug (scripts/mutants): commands stopped 2 s late.
    if leasehold_backend::mutant::strikes(leasehold_backend::mutant::Mutant::LateTrustWindow, || true) {
        return until.saturating_add(Duration::from_secs(2));
    }
    until
}
