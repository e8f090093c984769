//! The parks service's vocabulary: its own enumerations (barrier direction, device state, report
//! period) and the JSON shapes of the published API (spec §3.2, §3.3), field for field,
//! including the original's spellings (`parkid`, `customerID`). No I/O and no rules here.

use pms_vocab::names;
use pms_vocab::{EnergySource, VehicleType};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
    /// Which kind of device.
    DeviceType {
        /// A barrier with a plate reader.
        Barrier => "BARRIER",
        /// A display by a barrier.
        Display => "DISPLAY",
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
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SpotChange {
    /// The manager's name as they gave it.
    pub by: String,
    /// When, RFC 3339 UTC.
    #[schema(format = DateTime)]
    pub at: String,
    /// Whether the change put the spot in service.
    pub operational: bool,
}

/// A completed visit as `parkingHistory` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryItem {
    /// Visit id.
    pub parking_history_id: i64,
    /// Entry, RFC 3339 UTC.
    #[schema(format = DateTime)]
    pub start_time: String,
    /// Exit, RFC 3339 UTC.
    #[schema(format = DateTime)]
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
    /// Final price in euros once invoiced (`null` until then).
    #[schema(value_type = Option<f64>)]
    pub price: Option<serde_json::Value>,
    /// Invoice id once invoiced.
    pub invoice_id: Option<i64>,
    /// Plate.
    #[schema(value_type = pms_service::openapi::Plate)]
    pub plate_number: String,
    /// The park's clock (IANA zone), to show the times as the park's (PMS).
    #[schema(example = "Europe/Lisbon")]
    pub time_zone: String,
}

/// What a barrier gets back (spec §3.3.1).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// `GET /parks/devices/{parkNumber}`: a park's barriers, each with its displays and what they
/// show now (an operator's view).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
    /// How far the barrier's time was ahead of the server's clock (negative: behind) in the
    /// passage that last moved it by over a second, in ms; absent before its first passage. A
    /// buffered passage sent late shows here as behind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
    /// When that passage arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_seen_at: Option<String>,
    /// When it last proved itself with its key (RFC 3339), as far as the service has written it
    /// (the replica answering adds what it saw since); absent before its first request.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub last_contact_at: Option<String>,
    /// Its displays, by number.
    pub displays: Vec<DisplayDevice>,
}

/// A display as the operator's view shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// When it last proved itself with its key (RFC 3339); absent before its first request.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub last_contact_at: Option<String>,
}

/// What a write answers: `{"response": text}`, as the original's B services did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(example = json!({"response": "Park 1 thresholds changed"}))]
pub struct ResponseText {
    /// What was done.
    pub response: String,
}

/// A park's PARKY thresholds: coins earned per hour and per minute parked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Thresholds {
    /// Coins per hour.
    #[schema(minimum = 0, maximum = 1_000_000)]
    #[serde(deserialize_with = "pms_vocab::lenient::integer")]
    pub parkies_per_hour: i64,
    /// Coins per minute.
    #[schema(minimum = 0, maximum = 1_000_000)]
    #[serde(deserialize_with = "pms_vocab::lenient::integer")]
    pub parkies_per_minute: i64,
}

/// A park's overnight fee.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OvernightConfig {
    /// Whole euros per midnight spanned.
    pub overnight_fee: i64,
    /// Whether it is charged.
    pub enabled: bool,
}

/// `GET /parks/occupancy/{parkNumber}`: one park's open occupancy feed, in the spirit of APDS's
/// occupancy and ParkAPI.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OccupancyFeed {
    /// Park id.
    pub park_id: i64,
    /// Park number.
    pub park_number: i64,
    /// Spots in all.
    pub capacity: i64,
    /// Free operational spots now.
    pub available: i64,
    /// `full` when nothing is free, else `open`.
    #[schema(value_type = String, pattern = "^(open|full)$")]
    pub status: &'static str,
    /// Free spots per vehicle and energy type.
    pub by_type: Vec<SpotTypeOccupancy>,
    /// Where the park is.
    pub coordinates: Coordinates,
    /// When this was read, RFC 3339 UTC.
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// A point on the map (WGS 84).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Coordinates {
    /// Latitude, degrees.
    pub latitude: f64,
    /// Longitude, degrees.
    pub longitude: f64,
}

/// The change counter of parks and displays (a long poll's answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ChangeVersion {
    /// Moves whenever an entrance, exit, spot change or display message may have changed what
    /// a park looks like; send it back as `after` (or `waitForChangeAfter`) to wait for the next.
    pub version: u64,
}

/// `POST /display/get`'s answer: what the display shows, whether it is in service, and the
/// change counter to wait on.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DisplayAnswer {
    /// What it shows.
    #[serde(flatten)]
    pub view: DisplayView,
    /// The change counter (see [`ChangeVersion`]).
    pub version: u64,
    /// In service or switched off.
    pub state: State,
}

/// A device switched on or off.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSwitched {
    /// Barrier or display.
    pub device: DeviceType,
    /// Its id.
    #[serde(rename = "deviceID")]
    pub device_id: i64,
    /// Its state now.
    pub state: State,
    /// Whether this request changed it (`false`: it was so already).
    pub changed: bool,
}
