//! How failed logins slow down the next ones, per e-mail address (the published system let any
//! number through; spec §9 item 15). The first [`FREE_FAILURES`] - 1 wrong passwords in a row
//! are answered 401 as any other; from the [`FREE_FAILURES`]-th on, each holds the address for
//! twice as long as the one before (1 s, 2 s, 4 s, … up to [`MAX_HOLD`]), and an attempt while
//! it is held is answered 429 without its password being looked at. Unknown addresses are held
//! alike, so the answer never says whether an account exists. Failures further apart than
//! [`FORGET_AFTER`] start the count over; a successful login clears it. The counts live in the
//! database (`login_failures`), so every replica of the service applies the same holds.

use std::time::Duration;

/// The failure in a row that starts holding the address.
pub const FREE_FAILURES: u32 = 3;
/// Longest hold.
pub const MAX_HOLD: Duration = Duration::from_secs(15 * 60);
/// A failure this long after the previous one counts as the first again.
pub const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);

/// How long the `failures`-th failure in a row holds the address.
pub fn hold_after(failures: u32) -> Duration {
    if failures < FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (failures - FREE_FAILURES).min(20);
    Duration::from_secs(1u64 << doublings).min(MAX_HOLD)
}

/// Whole seconds from `now_ms` until `until_ms` (rounded up; `None` once it has passed), for an
/// answer's `Retry-After`.
pub fn seconds_left(now_ms: i64, until_ms: i64) -> Option<u64> {
    let left = until_ms.checked_sub(now_ms).filter(|&ms| ms > 0)?;
    u64::try_from(left.saturating_add(999) / 1000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_start_at_the_third_failure_and_double_up_to_a_cap() {
        assert_eq!(hold_after(1), Duration::ZERO);
        assert_eq!(hold_after(2), Duration::ZERO);
        assert_eq!(hold_after(3), Duration::from_secs(1));
        assert_eq!(hold_after(4), Duration::from_secs(2));
        assert_eq!(hold_after(8), Duration::from_secs(32));
        assert_eq!(hold_after(13), MAX_HOLD);
        assert_eq!(hold_after(u32::MAX), MAX_HOLD);
    }

    #[test]
    fn seconds_left_round_up_and_end() {
        assert_eq!(seconds_left(1_000, 1_001), Some(1));
        assert_eq!(seconds_left(1_000, 3_000), Some(2));
        assert_eq!(seconds_left(1_000, 3_001), Some(3));
        assert_eq!(seconds_left(1_000, 1_000), None);
        assert_eq!(seconds_left(2_000, 1_000), None);
    }
}
