//! The parks service's vocabulary: its own enumerations (barrier direction, device state, report
//! period) and the JSON shapes of the published API (spec §3.2, §3.3), field for field,
//! including the original's spellings (`parkid`, `customerID`). No I/O and no rules here.

use pms_service::names;
use pms_service::vocab::{EnergySource, VehicleType};
use serde::Serialize;

names! {
    /// Which way a barrier lets cars through (the original did not know; it went by the endpoint
    /// a device called).
    Direction {
        /// Lets cars in.
        Entrance => "ENTRANCE",
        /// Lets cars out.
        Exit => "EXIT",
    }
}

names! {
    /// Whether a barrier or display works.
    State {
        /// In service.
        Active => "ACTIVE",
        /// Switched off.
        Disabled => "DISABLED",
    }
}

names! {
    /// How `/parkReport/parkingTime` aggregates.
    ReportPeriod {
        /// Per day.
        Day => "day",
        /// Per month.
        Month => "month",
        /// Per year.
        Year => "year",
    }
}

/// `GET /parks/getAllOccupancies` item (note the original's `parkid`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Occupancy {
    /// Park id (lower-case `parkid`, as published).
    pub parkid: i64,
    /// Park number.
    #[serde(rename = "parkNumber")]
    pub park_number: i64,
    /// The park's maximum occupancy.
    pub occupancy: i64,
    /// Free spots now: operational and not occupied (the original's name for it).
    #[serde(rename = "currentCapacity")]
    pub current_capacity: i64,
}

/// Free spots of one vehicle and energy type.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotTypeOccupancy {
    /// Vehicle type.
    pub spot_vehicle_type: VehicleType,
    /// Energy type.
    pub spot_type: EnergySource,
    /// Free operational spots.
    pub available_spots: i64,
}

/// `GET /parks/real-time/occupancy/...` item.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NearbyPark {
    /// Park id.
    pub park_id: i64,
    /// Great-circle distance from the caller, km.
    pub distance_km: f64,
    /// Eight entries: AUTOMOBILE then MOTORCYCLE, each FUEL, GPL, ELECTRIC, PLUG_IN_HYBRID.
    pub spot_type_occupancies: Vec<SpotTypeOccupancy>,
    /// Latitude.
    pub latitude: f64,
    /// Longitude.
    pub longitude: f64,
}

/// A spot as `getSpotsByParkNumber` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spot {
    /// `A1`, `B3`, …
    pub spot_number: String,
    /// Energy the spot supplies.
    pub spot_type: EnergySource,
    /// Vehicle type it fits.
    pub spot_vehicle_type: VehicleType,
    /// `A` or `B`.
    pub floor_level: String,
    /// A car is on it.
    pub occupied: bool,
    /// It may be used.
    pub operational: bool,
    /// Who last took it out of service or put it back, and when (`null` if nobody has).
    pub last_change: Option<SpotChange>,
}

/// A manager's change of a spot, as the spot list shows the latest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpotChange {
    /// The manager's name as they gave it.
    pub by: String,
    /// When, RFC 3339 UTC.
    pub at: String,
    /// Whether the change put the spot in service.
    pub operational: bool,
}

/// A completed visit as `parkingHistory` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryItem {
    /// Visit id.
    pub parking_history_id: i64,
    /// Entry, RFC 3339 UTC.
    pub start_time: String,
    /// Exit, RFC 3339 UTC.
    pub end_time: String,
    /// Whole hours parked.
    pub hours_between_entrance_exit: i64,
    /// Remaining whole minutes.
    pub minutes_between_entrance_exit: i64,
    /// Park id.
    pub park_id: i64,
    /// Customer (user) id, spelled as published.
    #[serde(rename = "customerID")]
    pub customer_id: i64,
    /// Final price once invoiced (`null` until then).
    pub price: Option<serde_json::Value>,
    /// Invoice id once invoiced.
    pub invoice_id: Option<i64>,
    /// Plate.
    pub plate_number: String,
}

/// What a barrier gets back (spec §3.3.1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BarrierAnswer {
    /// The barrier.
    #[serde(rename = "barrierID")]
    pub barrier_id: i64,
    /// The park.
    #[serde(rename = "parkID")]
    pub park_id: i64,
    /// Whether the barrier opens.
    pub success: bool,
    /// What the driver is told (also shown on the barrier's displays).
    pub message: String,
}

/// What a display shows (spec §3.3.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DisplayView {
    /// The display.
    #[serde(rename = "displayID")]
    pub display_id: i64,
    /// Its text.
    pub message: String,
    /// Free spots of the park, any type.
    pub occupancy: i64,
    /// When the text last changed, RFC 3339 UTC.
    #[serde(rename = "updatedAt")]
    pub updated_at: String,
}

/// `GET /parks/devices/{parkNumber}`: a park's barriers, each with its displays and what they
/// show now (an operator's view).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParkDevices {
    /// The park.
    pub park_number: i64,
    /// Free operational spots now (what the displays show beside their text).
    pub free_spots: i64,
    /// Its barriers, by number.
    pub barriers: Vec<BarrierDevices>,
}

/// A barrier and its displays.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BarrierDevices {
    /// Id (what a device sends as `barrierID`).
    pub barrier_id: i64,
    /// `B1.1`, …
    pub barrier_number: String,
    /// Entrance or exit.
    pub direction: Direction,
    /// In service or switched off.
    pub state: State,
    /// Its displays, by number.
    pub displays: Vec<DisplayDevice>,
}

/// A display as the operator's view shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisplayDevice {
    /// Id (what a display sends as `displayID`).
    pub display_id: i64,
    /// `D1.1`, …
    pub display_number: String,
    /// In service or switched off.
    pub state: State,
    /// The text it shows.
    pub message: String,
    /// When the text last changed, RFC 3339 UTC.
    pub updated_at: String,
}
