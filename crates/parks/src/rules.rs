//! The parks service's rules as pure functions: what the barrier says in each case (the
//! original's wording where it had one), which spots fit which vehicle, the distance to a park,
//! how long a visit lasted, and the calendar keys of the reports in the park's time zone. No I/O.

use jiff::tz::TimeZone;
use jiff::Timestamp;
use pms_vocab::{EnergySource, VehicleType};

/// Why a barrier stays closed. The message is what the driver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The plate belongs to no registered customer (entrance).
    UnknownPlateAtEntrance,
    /// The plate belongs to no registered customer (exit).
    UnknownPlateAtExit,
    /// The barrier or park is not known.
    UnknownBarrier,
    /// The customer is blocked.
    Blocked,
    /// The customer closed their account (entrance; a car inside can always leave).
    AccountClosed,
    /// The barrier is switched off.
    BarrierDisabled,
    /// No free spot fits the vehicle, or the park is at its maximum occupancy.
    Full,
    /// The vehicle is inside already (a second entrance).
    AlreadyInside,
    /// The vehicle has no open visit in this park (an exit without an entrance).
    NotInside,
    /// The park takes no new cars now: outside its opening hours, or closed by its manager
    /// (entrances only; exits are always allowed).
    Closed,
    /// The entrance would overlap another stay of the plate written meanwhile (the database's
    /// exclusion of overlapping stays refused it twice; [`crate::clock`]).
    OverlapsEarlierStay,
}

impl Refusal {
    /// The driver's message.
    pub fn message(self) -> &'static str {
        match self {
            Self::UnknownPlateAtEntrance => "Please use the Park20 app to register and use the parking. Or use the QR code to download the app.",
            Self::UnknownPlateAtExit => "Your vehicle is not registered in the system. Please contact the park manager.",
            Self::UnknownBarrier => "Please contact the park manager.",
            Self::AccountClosed => "This vehicle's account is closed. Please use the Park20 app to register again.",
            Self::Blocked => "You have reached the maximum number of unpaid parking sessions. Please pay your parking sessions or contact the park manager.",
            Self::BarrierDisabled => "The barrier is not active. Please contact the park manager.",
            Self::Full => "The park is full. Please contact the park manager.",
            Self::AlreadyInside => "This vehicle is already inside a park. Please contact the park manager.",
            Self::NotInside => "This vehicle has no open visit in this park. Please contact the park manager.",
            Self::OverlapsEarlierStay => "This vehicle has another visit at this time. Please contact the park manager.",
            Self::Closed => "The park is closed to new entrances now. Please come back during its opening hours.",
        }
    }

    /// A short stable name, for metrics and logs.
    pub fn reason(self) -> &'static str {
        match self {
            Self::UnknownPlateAtEntrance | Self::UnknownPlateAtExit => "unknown_plate",
            Self::UnknownBarrier => "unknown_barrier",
            Self::Blocked => "blocked",
            Self::AccountClosed => "account_closed",
            Self::BarrierDisabled => "barrier_disabled",
            Self::Full => "full",
            Self::AlreadyInside => "already_inside",
            Self::NotInside => "not_inside",
            Self::OverlapsEarlierStay => "overlaps_earlier_stay",
            Self::Closed => "closed",
        }
    }
}

/// The greeting at an entrance.
pub fn welcome(name: &str) -> String {
    format!("Welcome to the park {name}!")
}

/// The goodbye at an exit: with the price when it is known in time (without the original's
/// doubled `€!`), else the promise of an invoice; then the PARKY coins the visit earned, when it
/// earned any.
pub fn goodbye(name: &str, price: Option<(&str, &str)>, coins: i64) -> String {
    let start = goodbye_start(name);
    let mut text = match price {
        Some((total, discount)) => {
            format!("{start} Your total will be {total}€! With a discount of {discount}€.")
        }
        None => format!("{start} Your invoice will follow."),
    };
    if coins > 0 {
        text.push_str(&format!(" You earned {coins} PARKY coins."));
    }
    text
}

/// How every goodbye to `name` begins (what names the driver in it).
pub fn goodbye_start(name: &str) -> String {
    format!("Have a nice day {name}!")
}

/// What a park pays in PARKY coins for a visit: its thresholds, per whole hour and per
/// remaining whole minute parked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoinRates {
    /// Coins per whole hour.
    pub per_hour: i64,
    /// Coins per minute past the whole hours.
    pub per_minute: i64,
}

impl CoinRates {
    /// The coins a stay from `entered` to `left` earns: whole hours times `per_hour` plus the
    /// remaining whole minutes times `per_minute` (1 h 30 min at 15 and 1: 45). Never negative.
    pub fn earned(self, entered: Timestamp, left: Timestamp) -> i64 {
        let (hours, minutes) = hours_minutes(entered, left);
        hours
            .saturating_mul(self.per_hour)
            .saturating_add(minutes.saturating_mul(self.per_minute))
            .max(0)
    }
}

/// Money as the original showed it (`1.2`, `0.0`): at least one decimal, no trailing zeros.
/// Text that is not a number is shown as it is.
pub fn shown_money(text: &str) -> String {
    match text.parse::<rust_decimal::Decimal>() {
        Ok(d) => {
            let d = d.normalize();
            if d.scale() == 0 {
                format!("{d}.0")
            } else {
                d.to_string()
            }
        }
        Err(_) => text.to_owned(),
    }
}

/// Whether a spot fits a vehicle: the same vehicle type and the same energy (spec §5.6; an
/// electric car does not take a fuel spot).
pub fn fits(
    spot_vehicle: VehicleType,
    spot_energy: EnergySource,
    vehicle: VehicleType,
    energy: EnergySource,
) -> bool {
    spot_vehicle == vehicle && spot_energy == energy
}

/// Great-circle distance in km by the original's formula (spherical law of cosines, through
/// nautical miles; spec §5.9). Identical points are 0.
pub fn distance_km(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    if lat1 == lat2 && lon1 == lon2 {
        return 0.0;
    }
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let dl = (lon1 - lon2).to_radians();
    let cos = (p1.sin() * p2.sin() + p1.cos() * p2.cos() * dl.cos()).clamp(-1.0, 1.0);
    cos.acos().to_degrees() * 60.0 * 1.1515 * 1.609344
}

/// Whole hours and remaining whole minutes between two instants (floor).
pub fn hours_minutes(entered: Timestamp, left: Timestamp) -> (i64, i64) {
    let minutes = left.duration_since(entered).as_mins().max(0);
    (minutes / 60, minutes % 60)
}

/// The report day (`YYYY-MM-DD`) of an instant on the park's clock.
pub fn report_day(t: Timestamp, tz: &TimeZone) -> String {
    t.to_zoned_datetime(tz.clone()).date().to_string()
}

/// Year, 0-based month and day of a report day (`2024-03-05` → 2024, 2, 5): the published
/// report's fields (January = 0).
pub fn report_parts(day: &str) -> Option<(i64, i64, i64)> {
    let mut it = day.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (it.next()??, it.next()??, it.next()??);
    Some((y, m - 1, d))
}

/// A park's time zone by IANA name.
///
/// # Errors
/// When the name is unknown.
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name).map_err(|_| format!("{name:?} is not a known IANA time zone"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_follow_the_original_formula() {
        // Park 1 and park 2 of the seed, about 88 km apart.
        let d = distance_km(
            40.36841685539075,
            -8.659655996430294,
            41.15932631626018,
            -8.659665314733802,
        );
        assert!((d - 88.0).abs() < 1.0, "{d}");
        assert_eq!(distance_km(41.0, -8.0, 41.0, -8.0), 0.0);
        // The FrontOffice's point near park 5 (Porto).
        let near = distance_km(
            41.178496516445534,
            -8.607637458224238,
            41.17643631180696,
            -8.55806931330527,
        );
        assert!(near < 5.0, "{near}");
    }

    #[test]
    fn a_visit_earns_its_hours_and_minutes() {
        let rates = CoinRates {
            per_hour: 15,
            per_minute: 1,
        };
        let at = |t: &str| t.parse::<Timestamp>().expect("t");
        let entered = at("2024-03-05T08:00:00Z");
        assert_eq!(rates.earned(entered, at("2024-03-05T09:30:59Z")), 45);
        assert_eq!(rates.earned(entered, at("2024-03-05T08:00:59Z")), 0);
        assert_eq!(
            rates.earned(entered, at("2024-03-05T07:00:00Z")),
            0,
            "never negative"
        );
        assert_eq!(
            CoinRates::default().earned(entered, at("2024-03-06T08:00:00Z")),
            0
        );
        let huge = CoinRates {
            per_hour: i64::MAX,
            per_minute: i64::MAX,
        };
        assert_eq!(huge.earned(entered, at("2024-03-06T08:01:00Z")), i64::MAX);
        assert!(goodbye("Rui", None, 45)
            .ends_with("Your invoice will follow. You earned 45 PARKY coins."));
        assert!(goodbye("Rui", Some(("1.2", "0.0")), 0).ends_with("of 0.0€."));
    }

    #[test]
    fn spots_fit_by_type_and_energy() {
        use EnergySource::*;
        use VehicleType::*;
        assert!(fits(Automobile, Fuel, Automobile, Fuel));
        assert!(!fits(Automobile, Fuel, Automobile, Electric));
        assert!(!fits(Automobile, Fuel, Motorcycle, Fuel));
    }

    #[test]
    fn durations_and_report_keys() {
        let a: Timestamp = "2024-03-05T23:30:00Z".parse().expect("t");
        let b: Timestamp = "2024-03-06T01:45:59Z".parse().expect("t");
        assert_eq!(hours_minutes(a, b), (2, 15));
        let lisbon = time_zone("Europe/Lisbon").expect("tz");
        assert_eq!(report_day(a, &lisbon), "2024-03-05");
        let summer: Timestamp = "2024-07-05T23:30:00Z".parse().expect("t");
        assert_eq!(report_day(summer, &lisbon), "2024-07-06", "00:30 in Lisbon");
        assert_eq!(report_parts("2024-01-31"), Some((2024, 0, 31)));
        assert_eq!(report_parts("junk"), None);
        assert!(time_zone("Mars/Olympus").is_err());
    }

    #[test]
    fn goodbyes_have_one_euro_sign_each() {
        assert_eq!(
            goodbye("Rui Soares", Some(("1.2", "0.0")), 0),
            "Have a nice day Rui Soares! Your total will be 1.2€! With a discount of 0.0€."
        );
        assert!(goodbye("Rui", None, 0).contains("invoice will follow"));
    }
}
