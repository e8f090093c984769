//! What time a passage is taken to have happened. A barrier's clock is evidence, not truth: the
//! time it says is believed when it is at most [`ClockRules::ahead`] ahead of the server's clock
//! and at most [`ClockRules::delay`] behind it (a barrier that was offline sends its buffered
//! reads late), and when it fits the plate's history: an entrance after the plate's last exit,
//! an exit not before its visit's entrance. A time outside those bounds is replaced by the
//! server's clock when the request arrived, moved forward where the history needs it. The car
//! is let through either way: no device time keeps a car inside.
//!
//! The time said is kept beside the time taken: a barrier's retry (same plate, barrier and time
//! said) is recognised by it, and the difference to the server's clock is the barrier's clock
//! offset the operator sees. Pure: no I/O.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// Default of [`ClockRules::ahead`]: how far ahead of the server a barrier's clock may run.
pub const DEFAULT_AHEAD: Duration = Duration::from_secs(120);
/// Default of [`ClockRules::delay`]: how late a buffered passage may arrive (a long weekend
/// offline).
pub const DEFAULT_DELAY: Duration = Duration::from_secs(72 * 3600);

/// The bounds a barrier's time is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockRules {
    /// Largest believed time ahead of the server's clock.
    pub ahead: Duration,
    /// Largest believed time behind the server's clock.
    pub delay: Duration,
}

impl Default for ClockRules {
    fn default() -> Self {
        Self {
            ahead: DEFAULT_AHEAD,
            delay: DEFAULT_DELAY,
        }
    }
}

/// Why a barrier's time was not taken as said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// More than [`ClockRules::ahead`] ahead of the server's clock.
    Ahead,
    /// More than [`ClockRules::delay`] behind the server's clock.
    Late,
    /// An entrance at or before the plate's last exit (inside or before a closed stay).
    BeforeLastExit,
    /// An exit before its visit's entrance.
    BeforeEntrance,
}

impl Replaced {
    /// A short stable name, for metrics and logs.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Ahead => "ahead",
            Self::Late => "late",
            Self::BeforeLastExit => "before_last_exit",
            Self::BeforeEntrance => "before_entrance",
        }
    }
}

/// A passage's time: what the barrier said, what is taken, and the server's clock when the
/// request arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassageTime {
    /// The barrier's time, as sent.
    pub said: Timestamp,
    /// The time the passage is recorded at.
    pub at: Timestamp,
    /// The server's clock when the request arrived.
    pub now: Timestamp,
    /// Why `at` is not `said`, when it is not.
    pub replaced: Option<Replaced>,
}

impl PassageTime {
    /// A time taken as said, the server's clock read now (for callers that checked it already).
    pub fn as_said(said: Timestamp) -> Self {
        Self {
            said,
            at: said,
            now: Timestamp::now(),
            replaced: None,
        }
    }

    /// The same passage taken at `lower` or later: unchanged when it already is, else at the
    /// server's clock or `lower`, whichever is later, for reason `why`.
    pub fn not_before(self, lower: Timestamp, why: Replaced) -> Self {
        if self.at >= lower {
            return self;
        }
        Self {
            at: self.now.max(lower),
            replaced: Some(why),
            ..self
        }
    }

    /// How far the barrier's clock was ahead of the server's (negative: behind) when the request
    /// arrived.
    pub fn offset(&self) -> SignedDuration {
        self.said.duration_since(self.now)
    }
}

impl ClockRules {
    /// The passage's time for a barrier's `said` time arriving at `now`, bounded by the server's
    /// clock (the plate's history is checked by the store, [`PassageTime::not_before`]).
    pub fn take(&self, said: Timestamp, now: Timestamp) -> PassageTime {
        let offset = said.duration_since(now);
        let signed = |d: Duration| SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
        let replaced = if offset > signed(self.ahead) {
            Some(Replaced::Ahead)
        } else if offset < -signed(self.delay) {
            Some(Replaced::Late)
        } else {
            None
        };
        PassageTime {
            said,
            at: if replaced.is_some() { now } else { said },
            now,
            replaced,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    #[test]
    fn times_within_the_bounds_are_taken_as_said() {
        let rules = ClockRules::default();
        let now = t("2026-12-05T10:00:00Z");
        for said in [
            "2026-12-05T10:02:00Z",
            "2026-12-05T10:00:00Z",
            "2026-12-02T10:00:00Z",
        ] {
            let taken = rules.take(t(said), now);
            assert_eq!((taken.at, taken.replaced), (t(said), None), "{said}");
        }
    }

    #[test]
    fn times_outside_the_bounds_are_the_servers() {
        let rules = ClockRules::default();
        let now = t("2026-12-05T10:00:00Z");
        let ahead = rules.take(t("2999-12-31T00:00:00Z"), now);
        assert_eq!((ahead.at, ahead.replaced), (now, Some(Replaced::Ahead)));
        assert!(ahead.offset() > SignedDuration::from_hours(24 * 365 * 900));
        let just = rules.take(t("2026-12-05T10:02:00.001Z"), now);
        assert_eq!(just.replaced, Some(Replaced::Ahead));
        let late = rules.take(t("1970-01-01T00:00:00Z"), now);
        assert_eq!((late.at, late.replaced), (now, Some(Replaced::Late)));
        assert_eq!(
            late.said,
            t("1970-01-01T00:00:00Z"),
            "the time said is kept"
        );
    }

    #[test]
    fn history_moves_a_time_forward_never_back() {
        let now = t("2026-12-05T10:00:00Z");
        let taken = ClockRules::default().take(t("2026-12-05T09:00:00Z"), now);
        // An exit before its entrance at 09:30: the server's clock.
        let exit = taken.not_before(t("2026-12-05T09:30:00Z"), Replaced::BeforeEntrance);
        assert_eq!(
            (exit.at, exit.replaced),
            (now, Some(Replaced::BeforeEntrance))
        );
        // A bound later than the server's clock (an entrance a little ahead): the bound.
        let later = t("2026-12-05T10:01:00Z");
        assert_eq!(taken.not_before(later, Replaced::BeforeLastExit).at, later);
        // Already after the bound: unchanged.
        assert_eq!(
            taken.not_before(t("2026-12-05T08:00:00Z"), Replaced::BeforeEntrance),
            taken
        );
    }
}
