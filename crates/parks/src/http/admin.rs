//! The operator's own parks: creating and changing a park (`POST /parks`, `GET`/`PATCH
//! /parks/{parkNumber}`), adding its spots, barriers and displays, issuing a device its own key,
//! and reading the audit trail. Who may call each is in its signature; every change is recorded
//! in the audit trail by the store, in its transaction.

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use pms_service::body::JsonBody;
use pms_service::http::{json, Answer};
use pms_service::openapi::ErrorBody;
use pms_service::{Allowed, ApiError, Caller, ParkManagers, Supervisors};
use pms_vocab::fields::{id_param, FieldError};
use pms_vocab::{lenient, EnergySource, VehicleType};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use super::parks::{non_negative, spot_number, MAX_SPOT_CHARS};
use super::{NoSuchPark, ParkManagersOnly, TAG};
use crate::hours::OpeningHours;
use crate::model::{BarrierDevices, DeviceType, Direction};
use crate::rules;
use crate::store::admin::{NewPark, ParkChange, SpotBatch};
use crate::store::devices::KeyIssued;
use crate::store::parks::Park;
use crate::App;

/// Most spots added at once.
pub const MAX_SPOTS_AT_ONCE: i64 = 500;
/// Highest park number.
pub const MAX_PARK_NUMBER: i64 = 1_000_000_000;
/// Longest barrier or display number.
pub const MAX_DEVICE_NUMBER_CHARS: usize = 16;

fn park_param(text: &str) -> Result<i64, ApiError> {
    Ok(id_param("parkNumber", text)?)
}

/// `value` trimmed, when it is `min..=max` printable characters.
fn text(field: &'static str, value: &str, min: usize, max: usize) -> Result<String, FieldError> {
    let value = value.trim();
    let chars = value.chars().count();
    if (min..=max).contains(&chars) && !value.chars().any(char::is_control) {
        Ok(value.to_owned())
    } else {
        Err(FieldError::new(
            field,
            format!("must be {min} to {max} printable characters"),
        ))
    }
}

/// A device's number (`B7.1`, `D-2`): 1 to 16 letters, digits, dots and dashes.
fn device_number(field: &'static str, value: &str) -> Result<String, FieldError> {
    if (1..=MAX_DEVICE_NUMBER_CHARS).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        Ok(value.to_owned())
    } else {
        Err(FieldError::new(
            field,
            format!("must be 1 to {MAX_DEVICE_NUMBER_CHARS} letters, digits, dots or dashes"),
        ))
    }
}

fn coordinate(field: &'static str, value: f64, limit: f64) -> Result<f64, FieldError> {
    if value.is_finite() && (-limit..=limit).contains(&value) {
        Ok(value)
    } else {
        Err(FieldError::new(
            field,
            format!("must be a number from -{limit} to {limit}"),
        ))
    }
}

fn time_zone(value: &str) -> Result<String, FieldError> {
    rules::time_zone(value.trim())
        .map(|_| value.trim().to_owned())
        .map_err(|e| FieldError::new("timeZone", e))
}

fn hours(value: OpeningHours) -> Result<OpeningHours, FieldError> {
    value
        .validate()
        .map(|()| value)
        .map_err(|e| FieldError::new("openingHours", e.to_string()))
}

/// A field that may be absent (no change), `null` (cleared) or a value.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `201 Created` with `value` and its `Location`.
fn created(location: &str, value: &impl Serialize) -> Response {
    let mut response = json(StatusCode::CREATED, value);
    if let Ok(at) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, at);
    }
    response
}

/// `POST /parks`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "name": "Aveiro Station", "address": "Largo da Estação, Aveiro",
    "latitude": 40.6436, "longitude": -8.6410, "timeZone": "Europe/Lisbon",
    "overnightFee": 5, "overnightEnabled": true,
    "openingHours": {"weekly": {"monday": [{"from": "07:00", "to": "22:00"}]}}
}))]
pub struct CreatePark {
    /// Its number (the next free one when absent).
    #[serde(default, deserialize_with = "lenient::optional_integer")]
    #[schema(required = false, minimum = 1, maximum = 1_000_000_000)]
    pub park_number: Option<i64>,
    /// Its name (1 to 100 characters, trimmed; not blank).
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub name: String,
    /// Its street address (up to 200 characters, trimmed).
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub address: String,
    /// Latitude.
    #[schema(minimum = -90, maximum = 90)]
    pub latitude: f64,
    /// Longitude.
    #[schema(minimum = -180, maximum = 180)]
    pub longitude: f64,
    /// The IANA time zone of its clock (`Europe/Lisbon`).
    pub time_zone: String,
    /// PARKY coins earned per hour parked (default 0).
    #[serde(default, deserialize_with = "lenient::optional_integer")]
    #[schema(required = false, minimum = 0, maximum = 1_000_000)]
    pub parkies_per_hour: Option<i64>,
    /// PARKY coins earned per minute (default 0).
    #[serde(default, deserialize_with = "lenient::optional_integer")]
    #[schema(required = false, minimum = 0, maximum = 1_000_000)]
    pub parkies_per_minute: Option<i64>,
    /// Overnight fee, whole euros (default 0).
    #[serde(default, deserialize_with = "lenient::optional_integer")]
    #[schema(required = false, minimum = 0, maximum = 10_000)]
    pub overnight_fee: Option<i64>,
    /// Whether the overnight fee is charged (default not).
    #[serde(default)]
    pub overnight_enabled: bool,
    /// When its entrances take cars (absent: always).
    #[serde(default)]
    pub opening_hours: Option<OpeningHours>,
    /// Its first price table, in either form `defineTimePeriods` takes (absent: the published
    /// table).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub price_table: Option<serde_json::Value>,
}

impl CreatePark {
    fn checked(self) -> Result<NewPark, ApiError> {
        let number = match self.park_number {
            Some(n) if !(1..=MAX_PARK_NUMBER).contains(&n) => {
                return Err(FieldError::new("parkNumber", "must be 1 to 1000000000").into())
            }
            n => n,
        };
        let table = match &self.price_table {
            None => pms_tariff::seed::table(),
            Some(doc) => pms_tariff::json::parse_api(doc).map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_price_table",
                    e.to_string(),
                )
                .with_field("priceTable")
            })?,
        };
        let overnight_fee = self.overnight_fee.unwrap_or(0);
        if !(0..=10_000).contains(&overnight_fee) {
            return Err(FieldError::new("overnightFee", "must be 0 to 10000 (whole euros)").into());
        }
        let settings = Park {
            id: 0,
            number: 0,
            name: text("name", &self.name, 1, 100)?,
            address: text("address", &self.address, 0, 200)?,
            max_occupancy: 0,
            latitude: coordinate("latitude", self.latitude, 90.0)?,
            longitude: coordinate("longitude", self.longitude, 180.0)?,
            time_zone: time_zone(&self.time_zone)?,
            parkies_per_hour: non_negative(self.parkies_per_hour.unwrap_or(0), "parkiesPerHour")?,
            parkies_per_minute: non_negative(
                self.parkies_per_minute.unwrap_or(0),
                "parkiesPerMinute",
            )?,
            overnight_fee,
            overnight_enabled: self.overnight_enabled,
            entrances_open: true,
            opening_hours: self.opening_hours.map(hours).transpose()?,
        };
        Ok(NewPark {
            number,
            settings,
            table,
        })
    }
}

/// `POST /parks`: a park manager creates a park, with no spots or devices yet.
#[utoipa::path(
    post, path = "/parks", tag = TAG, operation_id = "createPark",
    summary = "Create a park (park managers)",
    description = "Its spots, barriers and displays are added next. Its first price table is the \
        one given, or the published one; the payments service bills from it at once.",
    request_body = CreatePark,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created; `Location` names it.", body = Park, links(
            ("getPark" = (operation_id = "getPark",
                parameters(("parkNumber" = "$response.body#/parkNumber")))),
            ("createSpots" = (operation_id = "createSpots",
                parameters(("parkNumber" = "$response.body#/parkNumber")))),
            ("createBarrier" = (operation_id = "createBarrier",
                parameters(("parkNumber" = "$response.body#/parkNumber")))),
            ("updatePark" = (operation_id = "updatePark",
                parameters(("parkNumber" = "$response.body#/parkNumber")))),
        )),
        (status = 400, description = "A field breaks a rule (`invalid_field`, \
            `invalid_price_table`), or the body is not JSON.", body = ErrorBody<'static>),
        ParkManagersOnly,
        (status = 409, description = "The number is another park's (`park_number_taken`).",
            body = ErrorBody<'static>),
    )
)]
pub async fn create_park(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    JsonBody(body): JsonBody<CreatePark>,
) -> Answer {
    let new = body.checked()?;
    let park = s.store.create_park(&new, who.id).await?;
    s.committed();
    tracing::info!(park = park.number, manager = who.id, "park created");
    Ok(created(&format!("/parks/{}", park.number), &park))
}

/// `GET /parks/{parkNumber}`: a park's settings.
#[utoipa::path(
    get, path = "/parks/{parkNumber}", tag = TAG, operation_id = "getPark",
    summary = "A park's settings",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Its name, place, clock, capacity, hours and fees.",
            body = Park),
        NoSuchPark,
    )
)]
pub async fn park(State(s): State<App>, _: Caller, Path(park): Path<String>) -> Answer {
    Ok(json(
        StatusCode::OK,
        &s.store.park(park_param(&park)?).await?,
    ))
}

/// `PATCH /parks/{parkNumber}`'s body: each field given replaces the park's.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"entrancesOpen": false}))]
pub struct UpdatePark {
    /// New name (trimmed; not blank).
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub name: Option<String>,
    /// New address (trimmed).
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub address: Option<String>,
    /// New latitude.
    #[schema(minimum = -90, maximum = 90)]
    pub latitude: Option<f64>,
    /// New longitude.
    #[schema(minimum = -180, maximum = 180)]
    pub longitude: Option<f64>,
    /// New IANA time zone.
    pub time_zone: Option<String>,
    /// `false` closes the park to new cars (exits still let cars out); `true` reopens it.
    pub entrances_open: Option<bool>,
    /// New opening hours; `null` makes it always open.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<OpeningHours>, nullable)]
    pub opening_hours: Option<Option<OpeningHours>>,
}

impl UpdatePark {
    fn checked(self) -> Result<ParkChange, FieldError> {
        Ok(ParkChange {
            name: self.name.map(|n| text("name", &n, 1, 100)).transpose()?,
            address: self
                .address
                .map(|a| text("address", &a, 0, 200))
                .transpose()?,
            latitude: self
                .latitude
                .map(|v| coordinate("latitude", v, 90.0))
                .transpose()?,
            longitude: self
                .longitude
                .map(|v| coordinate("longitude", v, 180.0))
                .transpose()?,
            time_zone: self.time_zone.map(|z| time_zone(&z)).transpose()?,
            entrances_open: self.entrances_open,
            opening_hours: self
                .opening_hours
                .map(|h| h.map(hours).transpose())
                .transpose()?,
        })
    }
}

/// `PATCH /parks/{parkNumber}`: a park manager changes a park's settings, closes it to new cars
/// or reopens it.
#[utoipa::path(
    patch, path = "/parks/{parkNumber}", tag = TAG, operation_id = "updatePark",
    summary = "Change a park's settings, close it to new cars or reopen it (park managers)",
    description = "Outside its opening hours, or closed, a park's entrances refuse cars with a \
        message for the display; its exits always let cars out. Barriers served by other \
        replicas of the service see the change within 10 s.",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body = UpdatePark,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The park as it is now.", body = Park),
        (status = 400, description = "A field breaks a rule (`invalid_field`).",
            body = ErrorBody<'static>),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn update_park(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    JsonBody(body): JsonBody<UpdatePark>,
) -> Answer {
    let number = park_param(&park)?;
    let change = body.checked()?;
    let (before, after) = s.store.update_park(number, &change, who.id).await?;
    if before != after {
        s.committed_in(after.id);
        tracing::info!(park = number, manager = who.id, "park changed");
    }
    Ok(json(StatusCode::OK, &after))
}

/// `POST /parks/{parkNumber}/spots`'s body: `count` spots numbered `prefix` + `first`, `first`
/// + 1, … on one floor, for one vehicle type and energy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"floorLevel": "C", "spotVehicleType": "AUTOMOBILE",
    "spotType": "ELECTRIC", "count": 4}))]
pub struct CreateSpots {
    /// The floor (1 to 8 letters, digits or dashes: `A`, `-1`).
    #[schema(pattern = "^[A-Za-z0-9-]{1,8}$")]
    pub floor_level: String,
    /// For which vehicles.
    pub spot_vehicle_type: VehicleType,
    /// For which energy.
    pub spot_type: EnergySource,
    /// How many (1 to 500).
    #[serde(deserialize_with = "lenient::integer")]
    #[schema(minimum = 1, maximum = 500)]
    pub count: i64,
    /// What their numbers start with (default: the floor's letters and digits, `-1` → `1`).
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9]{0,8}$")]
    pub prefix: Option<String>,
    /// The first one's number (default 1).
    #[serde(default, deserialize_with = "lenient::optional_integer")]
    #[schema(required = false, minimum = 0, maximum = 999_999)]
    pub first: Option<i64>,
}

impl CreateSpots {
    fn checked(self) -> Result<SpotBatch, FieldError> {
        let floor = self.floor_level.as_str();
        if !(1..=8).contains(&floor.len())
            || !floor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(FieldError::new(
                "floorLevel",
                "must be 1 to 8 letters, digits or dashes",
            ));
        }
        if !(1..=MAX_SPOTS_AT_ONCE).contains(&self.count) {
            return Err(FieldError::new("count", "must be 1 to 500"));
        }
        let prefix = match self.prefix {
            Some(prefix) => prefix,
            None => floor.chars().filter(char::is_ascii_alphanumeric).collect(),
        };
        if prefix.len() > 8 || !prefix.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(FieldError::new(
                "prefix",
                "must be up to 8 letters and digits",
            ));
        }
        let first = self.first.unwrap_or(1);
        if !(0..=999_999).contains(&first) {
            return Err(FieldError::new("first", "must be 0 to 999999"));
        }
        let numbers: Vec<String> = (first..first + self.count)
            .map(|n| format!("{prefix}{n}"))
            .collect();
        if numbers.iter().any(|n| n.len() > MAX_SPOT_CHARS) {
            return Err(FieldError::new(
                "prefix",
                format!("spot numbers must be at most {MAX_SPOT_CHARS} characters"),
            ));
        }
        Ok(SpotBatch {
            floor_level: floor.to_owned(),
            vehicle_type: self.spot_vehicle_type,
            energy: self.spot_type,
            numbers,
        })
    }
}

/// What `createSpots` answers.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpotsCreated {
    /// The park.
    pub park_number: i64,
    /// The spots added, free and in service.
    pub created: Vec<String>,
    /// The park's capacity now.
    pub capacity: i64,
}

/// `POST /parks/{parkNumber}/spots`: a park manager adds spots, free and in service; the park's
/// capacity grows by as many.
#[utoipa::path(
    post, path = "/parks/{parkNumber}/spots", tag = TAG, operation_id = "createSpots",
    summary = "Add spots to a park (park managers)",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body = CreateSpots,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Added.", body = SpotsCreated, links(
            ("getSpotsByParkNumber" = (operation_id = "getSpotsByParkNumber",
                parameters(("parkNumber" = "$response.body#/parkNumber")))),
            ("retireSpot" = (operation_id = "retireSpot",
                parameters(("parkNumber" = "$response.body#/parkNumber"),
                    ("spotNumber" = "$response.body#/created/0")))),
        )),
        (status = 400, description = "A field breaks a rule (`invalid_field`).",
            body = ErrorBody<'static>),
        ParkManagersOnly,
        NoSuchPark,
        (status = 409, description = "A number is one of the park's spots already \
            (`spot_number_taken`); none was added.", body = ErrorBody<'static>),
    )
)]
pub async fn create_spots(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    JsonBody(body): JsonBody<CreateSpots>,
) -> Answer {
    let number = park_param(&park)?;
    let batch = body.checked()?;
    let capacity = s.store.create_spots(number, &batch, who.id).await?;
    s.committed();
    Ok(created(
        &format!("/parks/getSpotsByParkNumber/{number}"),
        &SpotsCreated {
            park_number: number,
            created: batch.numbers,
            capacity,
        },
    ))
}

/// What `retireSpot` answers.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpotRetired {
    /// The park.
    pub park_number: i64,
    /// The spot retired.
    pub retired: String,
    /// The park's capacity now.
    pub capacity: i64,
}

/// `DELETE /parks/{parkNumber}/spots/{spotNumber}`: a park manager retires a spot for good
/// (a spot out of service for a while is `enableDisableSpot`'s).
#[utoipa::path(
    delete, path = "/parks/{parkNumber}/spots/{spotNumber}", tag = TAG,
    operation_id = "retireSpot",
    summary = "Retire a spot (park managers)",
    description = "The spot leaves the park's capacity and spot list for good; the visits that \
        used it keep naming it, and its number is not given again. A spot with a car in it \
        cannot be retired until the car leaves.",
    params(
        ("parkNumber" = i64, Path, minimum = 1, description = "The park's number."),
        ("spotNumber" = String, Path, pattern = "^[A-Za-z0-9]{1,16}$",
            description = "The spot's number."),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Retired.", body = SpotRetired),
        ParkManagersOnly,
        (status = 404, description = "No such park, or no such spot in it (or retired already) \
            (`park_not_found`, `spot_not_found`).", body = ErrorBody<'static>),
        (status = 409, description = "A car is in it (`spot_occupied`); nothing changed.",
            body = ErrorBody<'static>),
    )
)]
pub async fn retire_spot(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path((park, spot)): Path<(String, String)>,
) -> Answer {
    let number = park_param(&park)?;
    spot_number(&spot)?;
    let capacity = s.store.retire_spot(number, &spot, who.id).await?;
    s.committed();
    tracing::info!(park = number, spot, manager = who.id, "spot retired");
    Ok(json(
        StatusCode::OK,
        &SpotRetired {
            park_number: number,
            retired: spot,
            capacity,
        },
    ))
}

/// `POST /parks/{parkNumber}/barriers`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"barrierNumber": "B7.1", "direction": "ENTRANCE"}))]
pub struct CreateBarrier {
    /// Its number in the park (1 to 16 letters, digits, dots or dashes).
    #[schema(pattern = "^[A-Za-z0-9.-]{1,16}$")]
    pub barrier_number: String,
    /// Entrance or exit.
    pub direction: Direction,
}

/// `POST /parks/{parkNumber}/barriers`: a park manager adds a barrier, in service. Until it is
/// issued a key of its own (`rotateDeviceKey`), its derived key works (`pms device key`).
#[utoipa::path(
    post, path = "/parks/{parkNumber}/barriers", tag = TAG, operation_id = "createBarrier",
    summary = "Add a barrier to a park (park managers)",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body = CreateBarrier,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Added: its id is what it sends as `barrierID`.",
            body = BarrierDevices, links(
            ("rotateDeviceKey" = (operation_id = "rotateDeviceKey",
                description = "Issue the new barrier its own key.",
                parameters(("parkNumber" = "$request.path.parkNumber")),
                request_body = json!({"device": "BARRIER",
                    "deviceID": "$response.body#/barrierId"}))),
            ("createDisplay" = (operation_id = "createDisplay",
                description = "Put a display by the new barrier.",
                parameters(("parkNumber" = "$request.path.parkNumber")),
                request_body = json!({"displayNumber": "D-new",
                    "barrierID": "$response.body#/barrierId"}))),
        )),
        (status = 400, description = "A field breaks a rule (`invalid_field`).",
            body = ErrorBody<'static>),
        ParkManagersOnly,
        NoSuchPark,
        (status = 409, description = "The number is one of the park's barriers already \
            (`barrier_number_taken`).", body = ErrorBody<'static>),
    )
)]
pub async fn create_barrier(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    JsonBody(body): JsonBody<CreateBarrier>,
) -> Answer {
    let number = park_param(&park)?;
    let barrier_number = device_number("barrierNumber", &body.barrier_number)?;
    let barrier = s
        .store
        .create_barrier(number, &barrier_number, body.direction, who.id)
        .await?;
    tracing::info!(
        park = number,
        barrier = barrier.barrier_id,
        manager = who.id,
        "barrier added"
    );
    Ok(created(&format!("/parks/devices/{number}"), &barrier))
}

/// `POST /parks/{parkNumber}/displays`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"displayNumber": "D7.1", "barrierID": 31}))]
pub struct CreateDisplay {
    /// Its number in the park (1 to 16 letters, digits, dots or dashes).
    #[schema(pattern = "^[A-Za-z0-9.-]{1,16}$")]
    pub display_number: String,
    /// The barrier it stands by (one of the park's).
    #[serde(rename = "barrierID", deserialize_with = "lenient::integer")]
    pub barrier_id: i64,
}

/// `POST /parks/{parkNumber}/displays`: a park manager adds a display by one of the park's
/// barriers, in service, showing a welcome.
#[utoipa::path(
    post, path = "/parks/{parkNumber}/displays", tag = TAG, operation_id = "createDisplay",
    summary = "Add a display by a park's barrier (park managers)",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body = CreateDisplay,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Added: the barrier with its displays.",
            body = BarrierDevices),
        (status = 400, description = "A field breaks a rule (`invalid_field`).",
            body = ErrorBody<'static>),
        ParkManagersOnly,
        (status = 404, description = "No such park, or no such barrier in it \
            (`park_not_found`, `barrier_not_found`).", body = ErrorBody<'static>),
        (status = 409, description = "The number is one of the park's displays already \
            (`display_number_taken`).", body = ErrorBody<'static>),
    )
)]
pub async fn create_display(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    JsonBody(body): JsonBody<CreateDisplay>,
) -> Answer {
    let number = park_param(&park)?;
    let display_number = device_number("displayNumber", &body.display_number)?;
    let barrier = s
        .store
        .create_display(number, &display_number, body.barrier_id, who.id)
        .await?;
    s.committed();
    Ok(created(&format!("/parks/devices/{number}"), &barrier))
}

/// `POST /parks/devices/{parkNumber}/key`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"device": "BARRIER", "deviceID": 31}))]
pub struct KeyRequest {
    /// Barrier or display.
    pub device: DeviceType,
    /// Its id, as the park's device view lists it.
    #[serde(rename = "deviceID", deserialize_with = "lenient::integer")]
    pub device_id: i64,
}

/// `POST /parks/devices/{parkNumber}/key`: a park manager issues one device a new key of its
/// own. The answer is the only time the key is shown.
#[utoipa::path(
    post, path = "/parks/devices/{parkNumber}/key", tag = TAG, operation_id = "rotateDeviceKey",
    summary = "Issue or rotate one device's key (park managers)",
    description = "The key the device had (its derived key, or one issued before) stops working \
        at once (through other replicas of the service, within 10 s); no other device is \
        touched. The answer is not cached and the key is not stored: only its SHA-256 is.",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body = KeyRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The new key, shown this once.", body = KeyIssued),
        ParkManagersOnly,
        (status = 404, description = "No such park, or no such device in it \
            (`park_not_found`, `barrier_not_found`, `display_not_found`).",
            body = ErrorBody<'static>),
    )
)]
pub async fn rotate_device_key(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    JsonBody(body): JsonBody<KeyRequest>,
) -> Answer {
    let number = park_param(&park)?;
    let issued = s
        .store
        .issue_key(number, body.device, body.device_id, who.id)
        .await?;
    tracing::info!(park = number, device = %body.device, id = body.device_id, manager = who.id,
        "device key issued");
    let mut response = json(StatusCode::OK, &issued);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response.into_response())
}

/// `GET /parks/audit`: the parks service's audit trail (supervisors).
#[utoipa::path(
    get, path = "/parks/audit", tag = TAG, operation_id = "getParksAuditLog",
    summary = "The parks service's audit trail (supervisors)",
    description = "Every staff action on parks, spots, price tables and devices, newest first: \
        who, when, what, and the thing before and after.",
    params(pms_service::audit::Query),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The entries, as JSON or (`format=csv`) CSV.", content(
            (Vec<pms_service::audit::Record> = "application/json"),
            (String = "text/csv"),
        )),
        (status = 400, description = "A filter does not parse (`invalid_field`).",
            body = ErrorBody<'static>),
        (status = 403, description = "Only SUPERVISOR (`forbidden`).", body = ErrorBody<'static>),
    )
)]
pub async fn audit_log(
    State(s): State<App>,
    _: Allowed<Supervisors>,
    RawQuery(query): RawQuery,
) -> Answer {
    pms_service::audit::answer(s.store.db(), query.as_deref()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spots(floor: &str, prefix: Option<&str>, first: Option<i64>, count: i64) -> CreateSpots {
        CreateSpots {
            floor_level: floor.into(),
            spot_vehicle_type: VehicleType::Automobile,
            spot_type: EnergySource::Fuel,
            count,
            prefix: prefix.map(Into::into),
            first,
        }
    }

    #[test]
    fn spot_numbers_follow_the_floor_unless_told() {
        let numbers = |s: CreateSpots| s.checked().map(|b| b.numbers);
        assert_eq!(
            numbers(spots("C", None, None, 2)).expect("ok"),
            ["C1", "C2"]
        );
        assert_eq!(
            numbers(spots("-1", None, Some(9), 2)).expect("ok"),
            ["19", "110"]
        );
        assert_eq!(
            numbers(spots("-1", Some("P"), None, 1)).expect("ok"),
            ["P1"]
        );
        assert_eq!(
            numbers(spots("A", Some(""), Some(0), 1)).expect("ok"),
            ["0"]
        );
        for (bad, field) in [
            (spots(" A", None, None, 1), "floorLevel"),
            (spots("", None, None, 1), "floorLevel"),
            (spots("A", Some("B-"), None, 1), "prefix"),
            (spots("A", None, None, 0), "count"),
            (spots("A", None, None, 501), "count"),
            (spots("A", None, Some(-1), 1), "first"),
        ] {
            assert_eq!(bad.checked().expect_err(field).field, field);
        }
    }

    #[test]
    fn device_numbers_are_taken_as_sent() {
        assert_eq!(
            device_number("barrierNumber", "B7.1-a").as_deref(),
            Ok("B7.1-a")
        );
        for bad in ["", " B1", "B 1", "B1/2", "ABCDEFGHIJKLMNOPQ"] {
            assert!(device_number("barrierNumber", bad).is_err(), "{bad:?}");
        }
    }
}
