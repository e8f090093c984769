//! `/parks/...`: one function per endpoint. Who may call it is in its signature (a kit
//! [`Caller`] or [`Allowed`] parameter: verified before the body runs); the body parses the
//! input, applies an ownership rule where there is one, calls the store and shapes the answer
//! (spec §3.2).

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use http::{HeaderMap, StatusCode};
use pms_service::body::JsonBody;
use pms_service::http::{json, json_value, Answer};
use pms_service::{Allowed, ApiError, Caller, ParkManagers, Roles, Staff};
use pms_vocab::fields::{self, id_param, FieldError};
use pms_vocab::{lenient, Role};
use serde::Deserialize;

use pms_service::openapi::ErrorBody;
use pms_tariff::json::{ApiPeriod, ApiTable};
use utoipa::ToSchema;

use super::{response_text, TAG};
use super::{NoSuchPark, ParkManagersOnly};
use crate::model::{
    ChangeVersion, Coordinates, DeviceSwitched, DeviceType, HistoryItem, NearbyPark, Occupancy,
    OccupancyFeed, OvernightConfig, ParkDevices, ResponseText, Spot, State as DeviceState,
    Thresholds,
};
use crate::App;

/// Longest spot number.
pub const MAX_SPOT_CHARS: usize = 16;

fn park_param(text: &str) -> Result<i64, ApiError> {
    Ok(id_param("parkNumber", text)?)
}

/// `text` when it is a spot number: 1 to [`MAX_SPOT_CHARS`] letters and digits.
pub(super) fn spot_number(text: &str) -> Result<&str, FieldError> {
    if (1..=MAX_SPOT_CHARS).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        Ok(text)
    } else {
        Err(FieldError::new(
            "spotNumber",
            format!("must be 1 to {MAX_SPOT_CHARS} letters and digits"),
        ))
    }
}

/// A valid `{customerID}` that is the caller's own, or any for staff.
fn own_or_staff(who: &Caller, customer: &str) -> Result<i64, ApiError> {
    let customer = id_param("customerID", customer)?;
    who.require_self_or(customer, Staff::ALLOWED)?;
    Ok(customer)
}

/// A coordinate or distance from a path segment, within `range`.
fn number_param(
    field: &'static str,
    text: &str,
    range: std::ops::RangeInclusive<f64>,
) -> Result<f64, ApiError> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && range.contains(&v) => Ok(v),
        _ => Err(FieldError::new(
            field,
            format!(
                "{text:?} is not a number in {}..={}",
                range.start(),
                range.end()
            ),
        )
        .into()),
    }
}

/// `GET /parks/getAllOccupancies`.
#[utoipa::path(
    get, path = "/parks/getAllOccupancies", tag = TAG, operation_id = "getAllOccupancies",
    summary = "Every park's capacity and free spots",
    security(("bearer" = [])),
    responses((status = 200, description = "One entry per park.", body = Vec<Occupancy>, links(
        ("getSpotsByParkNumber" = (operation_id = "getSpotsByParkNumber",
            parameters(("parkNumber" = "$response.body#/0/parkNumber")))),
        ("getParkyThresholds" = (operation_id = "getParkyThresholds",
            parameters(("parkNumber" = "$response.body#/0/parkNumber")))),
        ("getOvernightConfig" = (operation_id = "getOvernightConfig",
            parameters(("parkNumber" = "$response.body#/0/parkNumber")))),
        ("getAllPriceTableEntries" = (operation_id = "getAllPriceTableEntries",
            parameters(("parkNumber" = "$response.body#/0/parkNumber")))),
        ("getOccupancyFeed" = (operation_id = "getOccupancyFeed",
            parameters(("parkNumber" = "$response.body#/0/parkNumber")))),
        ("getParkDevices" = (operation_id = "getParkDevices",
            parameters(("parkNumber" = "$response.body#/0/parkNumber")))),
    )))
)]
pub async fn occupancies(State(s): State<App>, _: Caller) -> Answer {
    Ok(json(StatusCode::OK, &s.store.occupancies().await?))
}

/// `GET /parks/real-time/occupancy/{lat}/{lon}/{km}`.
#[utoipa::path(
    get, path = "/parks/real-time/occupancy/{userLatitude}/{userLongitude}/{maxDistanceKm}",
    tag = TAG, operation_id = "getNearbyParks",
    summary = "Parks within a distance, nearest first, with free spots per type",
    params(
        ("userLatitude" = f64, Path, minimum = -90, maximum = 90, description = "Degrees."),
        ("userLongitude" = f64, Path, minimum = -180, maximum = 180, description = "Degrees."),
        ("maxDistanceKm" = f64, Path, minimum = 0, maximum = 20100,
            description = "Great-circle distance, km."),
    ),
    security(("bearer" = [])),
    responses((status = 200, description = "Nearest first (`[]` if none).", body = Vec<NearbyPark>,
        links(("getPercentages" = (operation_id = "getPercentages",
            parameters(("parkId" = "$response.body#/0/parkId")))))))
)]
pub async fn nearby(
    State(s): State<App>,
    _: Caller,
    Path((lat, lon, km)): Path<(String, String, String)>,
) -> Answer {
    let lat = number_param("userLatitude", &lat, -90.0..=90.0)?;
    let lon = number_param("userLongitude", &lon, -180.0..=180.0)?;
    let km = number_param("maxDistanceKm", &km, 0.0..=20_100.0)?;
    Ok(json(StatusCode::OK, &s.store.nearby(lat, lon, km).await?))
}

/// `GET /parks/parkingHistory/{customerID}`: completed visits, for the customer or staff.
#[utoipa::path(
    get, path = "/parks/parkingHistory/{customerID}", tag = TAG, operation_id = "getParkingHistory",
    summary = "A customer's completed visits",
    params(("customerID" = i64, Path, minimum = 1,
        description = "The customer's user id: the caller's own, or any for staff.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Completed visits, newest first.", body = Vec<HistoryItem>),
        (status = 403, description = "Another customer's data; staff may read any \
            (`forbidden`).", body = ErrorBody<'static>),
    )
)]
pub async fn history(State(s): State<App>, who: Caller, Path(customer): Path<String>) -> Answer {
    let customer = own_or_staff(&who, &customer)?;
    Ok(json(StatusCode::OK, &s.store.history(customer).await?))
}

/// `GET /parks/getQuantityOfHistoryByCustomerID/{customerID}`.
#[utoipa::path(
    get, path = "/parks/getQuantityOfHistoryByCustomerID/{customerID}", tag = TAG,
    operation_id = "getHistoryCount",
    summary = "How many visits a customer has made",
    params(("customerID" = i64, Path, minimum = 1,
        description = "The customer's user id: the caller's own, or any for staff.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The number of visits.", body = i64,
            content_type = "application/json"),
        (status = 403, description = "Another customer's data; staff may read any \
            (`forbidden`).", body = ErrorBody<'static>),
    )
)]
pub async fn history_count(
    State(s): State<App>,
    who: Caller,
    Path(customer): Path<String>,
) -> Answer {
    let customer = own_or_staff(&who, &customer)?;
    Ok(json(
        StatusCode::OK,
        &s.store.history_count(customer).await?,
    ))
}

/// `PUT /parks/enableDisableSpot`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"parkNumber": 1, "spotNumber": "A1", "operational": false,
    "managerName": "Maria"}))]
pub struct SpotSwitch {
    /// The park.
    #[serde(deserialize_with = "lenient::integer")]
    pub park_number: i64,
    /// The spot (`A1`, …).
    #[schema(pattern = r"^\s*[A-Za-z0-9]{1,16}\s*$")]
    #[serde(deserialize_with = "lenient::string")]
    pub spot_number: String,
    /// In service (`true`) or out (`false`).
    #[serde(deserialize_with = "lenient::boolean")]
    pub operational: bool,
    /// Who made the change, for the audit (default, or when blank: the caller's user id).
    #[schema(
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$",
        required = false
    )]
    #[serde(default)]
    pub manager_name: Option<String>,
}

/// `PUT /parks/enableDisableSpot` `{parkNumber, spotNumber, operational, managerName}`.
#[utoipa::path(
    put, path = "/parks/enableDisableSpot", tag = TAG, operation_id = "enableDisableSpot",
    summary = "Take a spot out of service or put it back (park managers)",
    request_body = SpotSwitch,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Done; the answer says what changed.", body = ResponseText),
        ParkManagersOnly,
        (status = 404, description = "No such park or spot (`park_not_found`, \
            `spot_not_found`).", body = ErrorBody<'static>),
    )
)]
pub async fn set_spot(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    JsonBody(body): JsonBody<SpotSwitch>,
) -> Answer {
    let park = body.park_number;
    let spot = spot_number(body.spot_number.trim())?;
    let operational = body.operational;
    let name = match body.manager_name.as_deref() {
        Some(n) if n.chars().count() > 100 || n.chars().any(char::is_control) => {
            return Err(
                FieldError::new("managerName", "must be at most 100 printable characters").into(),
            );
        }
        Some(n) if !n.trim().is_empty() => n.trim().to_owned(),
        _ => format!("user {}", who.id),
    };
    let message = s
        .store
        .set_spot(park, spot, operational, &name, who.id)
        .await?;
    s.committed();
    Ok(response_text(message))
}

/// `GET /parks/getAllParks`: park numbers as strings.
#[utoipa::path(
    get, path = "/parks/getAllParks", tag = TAG, operation_id = "getAllParks",
    summary = "Every park's number",
    security(("bearer" = [])),
    responses((status = 200, description = "Park numbers, as strings (as published).",
        body = Vec<String>, example = json!(["1", "2", "3", "4", "5"])))
)]
pub async fn all_parks(State(s): State<App>, _: Caller) -> Answer {
    let parks = s.store.parks().await?;
    let numbers: Vec<String> = parks.iter().map(|p| p.number.to_string()).collect();
    Ok(json(StatusCode::OK, &numbers))
}

/// `GET /parks/getSpotsByParkNumber/{parkNumber}`.
#[utoipa::path(
    get, path = "/parks/getSpotsByParkNumber/{parkNumber}", tag = TAG,
    operation_id = "getSpotsByParkNumber",
    summary = "A park's spots",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "By spot number.", body = Vec<Spot>),
        NoSuchPark,
    )
)]
pub async fn spots(State(s): State<App>, _: Caller, Path(park): Path<String>) -> Answer {
    let park = park_param(&park)?;
    Ok(json(StatusCode::OK, &s.store.spots(park).await?))
}

/// `PUT /parks/changeParkyThresholds/{parkNumber}` `{parkiesPerHour, parkiesPerMinute}`.
#[utoipa::path(
    put, path = "/parks/changeParkyThresholds/{parkNumber}", tag = TAG,
    operation_id = "changeParkyThresholds",
    summary = "Change a park's PARKY thresholds (park managers)",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body = Thresholds,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Changed.", body = ResponseText),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn set_thresholds(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    JsonBody(body): JsonBody<Thresholds>,
) -> Answer {
    let park = park_param(&park)?;
    let per_hour = non_negative(body.parkies_per_hour, "parkiesPerHour")?;
    let per_minute = non_negative(body.parkies_per_minute, "parkiesPerMinute")?;
    s.store
        .set_thresholds(park, per_hour, per_minute, who.id)
        .await?;
    Ok(response_text(format!("Park {park} thresholds changed")))
}

/// `v` when it is 0 to 1000000 (PARKY thresholds).
pub(super) fn non_negative(v: i64, field: &'static str) -> Result<i64, FieldError> {
    if (0..=1_000_000).contains(&v) {
        Ok(v)
    } else {
        Err(FieldError::new(field, "must be 0 to 1000000"))
    }
}

/// `GET /parks/getParkyThresholds/{parkNumber}`.
#[utoipa::path(
    get, path = "/parks/getParkyThresholds/{parkNumber}", tag = TAG,
    operation_id = "getParkyThresholds",
    summary = "A park's PARKY thresholds",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Coins earned per hour and per minute.", body = Thresholds),
        NoSuchPark,
    )
)]
pub async fn thresholds(State(s): State<App>, _: Caller, Path(park): Path<String>) -> Answer {
    let park = s.store.park(park_param(&park)?).await?;
    Ok(json(
        StatusCode::OK,
        &Thresholds {
            parkies_per_hour: park.parkies_per_hour,
            parkies_per_minute: park.parkies_per_minute,
        },
    ))
}

/// `GET /parks/getOvernightConfig/{parkNumber}`.
#[utoipa::path(
    get, path = "/parks/getOvernightConfig/{parkNumber}", tag = TAG,
    operation_id = "getOvernightConfig",
    summary = "A park's overnight fee",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The fee and whether it is charged.", body = OvernightConfig),
        NoSuchPark,
    )
)]
pub async fn overnight(State(s): State<App>, _: Caller, Path(park): Path<String>) -> Answer {
    let park = s.store.park(park_param(&park)?).await?;
    Ok(json(
        StatusCode::OK,
        &OvernightConfig {
            overnight_fee: park.overnight_fee,
            enabled: park.overnight_enabled,
        },
    ))
}

/// `PUT /parks/enableDisableOvernightFee`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OvernightSwitch {
    /// The park.
    #[serde(deserialize_with = "lenient::integer")]
    pub park_number: i64,
    /// Charge it (`true`) or not.
    #[serde(deserialize_with = "lenient::boolean")]
    pub status: bool,
}

/// `PUT /parks/enableDisableOvernightFee` `{parkNumber, status}`.
#[utoipa::path(
    put, path = "/parks/enableDisableOvernightFee", tag = TAG,
    operation_id = "enableDisableOvernightFee",
    summary = "Switch a park's overnight fee on or off (park managers)",
    request_body = OvernightSwitch,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Switched.", body = ResponseText),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn set_overnight_enabled(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    JsonBody(body): JsonBody<OvernightSwitch>,
) -> Answer {
    let (park, on) = (body.park_number, body.status);
    s.store.set_overnight(park, Some(on), None, who.id).await?;
    s.committed();
    Ok(response_text(format!("Park {park} overnight fee {on}")))
}

/// `PUT /parks/changeOvernightFeePrice`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OvernightPrice {
    /// The park.
    #[serde(deserialize_with = "lenient::integer")]
    pub park_number: i64,
    /// Whole euros per midnight spanned.
    #[schema(minimum = 0, maximum = 10000)]
    #[serde(deserialize_with = "lenient::integer")]
    pub price: i64,
}

/// `PUT /parks/changeOvernightFeePrice` `{parkNumber, price}` (whole euros).
#[utoipa::path(
    put, path = "/parks/changeOvernightFeePrice", tag = TAG,
    operation_id = "changeOvernightFeePrice",
    summary = "Change a park's overnight fee (park managers)",
    request_body = OvernightPrice,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Changed.", body = ResponseText),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn set_overnight_fee(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    JsonBody(body): JsonBody<OvernightPrice>,
) -> Answer {
    let (park, price) = (body.park_number, body.price);
    if !(0..=10_000).contains(&price) {
        return Err(FieldError::new("price", "must be 0 to 10000 (whole euros)").into());
    }
    s.store
        .set_overnight(park, None, Some(price), who.id)
        .await?;
    s.committed();
    Ok(response_text(format!(
        "Park {park} overnight fee changed to {price}"
    )))
}

/// `PUT /parks/changeUserParkyFlag`'s body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CoinFlag {
    /// The caller's own user id.
    #[serde(rename = "customerID", deserialize_with = "lenient::integer")]
    pub customer_id: i64,
    /// Pay the next visit with coins.
    #[serde(rename = "parkyFlag", deserialize_with = "lenient::boolean")]
    pub parky_flag: bool,
}

/// `PUT /parks/changeUserParkyFlag` `{customerID, parkyFlag}`: the customer's own flag only.
#[utoipa::path(
    put, path = "/parks/changeUserParkyFlag", tag = TAG, operation_id = "changeUserParkyFlag",
    summary = "Pay the next visit with PARKY coins, or not (the customer themself)",
    request_body = CoinFlag,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Set (`{\"response\": \"Success\"}`).", body = ResponseText),
        (status = 403, description = "Not the caller's own flag, or the caller is not a \
            CUSTOMER (`forbidden`).", body = ErrorBody<'static>),
        (status = 404, description = "The customer is not known to parks yet \
            (`customer_not_found`).", body = ErrorBody<'static>),
    )
)]
pub async fn set_coin_flag(
    State(s): State<App>,
    who: Caller,
    JsonBody(body): JsonBody<CoinFlag>,
) -> Answer {
    let (customer, on) = (body.customer_id, body.parky_flag);
    who.require_self(customer, &[Role::Customer])?;
    s.store.set_coin_flag(customer, on).await?;
    Ok(response_text("Success"))
}

/// `GET /parks/getUserParkyFlag/{customerID}`.
#[utoipa::path(
    get, path = "/parks/getUserParkyFlag/{customerID}", tag = TAG,
    operation_id = "getUserParkyFlag",
    summary = "Whether a customer pays the next visit with PARKY coins",
    params(("customerID" = i64, Path, minimum = 1,
        description = "The customer's user id: the caller's own, or any for staff.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The flag.", body = bool, content_type = "application/json"),
        (status = 403, description = "Another customer's data; staff may read any \
            (`forbidden`).", body = ErrorBody<'static>),
        (status = 404, description = "The customer is not known to parks yet \
            (`customer_not_found`).", body = ErrorBody<'static>),
    )
)]
pub async fn coin_flag(State(s): State<App>, who: Caller, Path(customer): Path<String>) -> Answer {
    let customer = own_or_staff(&who, &customer)?;
    Ok(json(StatusCode::OK, &s.store.coin_flag(customer).await?))
}

/// A price table in either of the API's forms (for the document).
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum PriceTableForm {
    /// The periods, as published.
    Array(Vec<ApiPeriod>),
    /// The periods with the extras.
    Object(ApiTable),
}

/// `GET /parks/getAllPriceTableEntries/{parkNumber}[?form=object]`: the current table (the
/// original read it by internal id while every other endpoint took the number; for the seeded
/// parks they are equal). `form=object` answers what `defineTimePeriods` takes to set the
/// extras too, so an editor can read a table and write it back without losing them, and the
/// park's `timeZone` (read only).
#[utoipa::path(
    get, path = "/parks/getAllPriceTableEntries/{parkNumber}", tag = TAG,
    operation_id = "getAllPriceTableEntries",
    summary = "A park's price table in force",
    params(
        ("parkNumber" = i64, Path, minimum = 1, description = "The park's number."),
        ("form" = Option<String>, Query, pattern = "^(array|object)$",
            description = "`array` (default): the periods, as published; `object`: the \
            periods with the extras and the park's time zone, as `defineTimePeriods` takes it."),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The table, in the form asked for.",
            body = inline(PriceTableForm)),
        NoSuchPark,
    )
)]
pub async fn price_table(
    State(s): State<App>,
    _: Caller,
    Path(park): Path<String>,
    RawQuery(query): RawQuery,
) -> Answer {
    let [form] = fields::query(query.as_deref(), ["form"])?;
    let object = match form.as_deref() {
        None | Some("array") => false,
        Some("object") => true,
        Some(other) => {
            return Err(
                FieldError::new("form", format!("{other:?} is not one of array, object")).into(),
            )
        }
    };
    let park = s.store.park(park_param(&park)?).await?;
    let (_, table) = s.store.price_table(park.id).await?;
    let body = if object {
        let mut body = pms_tariff::json::api_object(&table, park.id);
        // Periods are read on the park's clock; an editor previewing a stay needs it.
        body["timeZone"] = park.time_zone.clone().into();
        body
    } else {
        pms_tariff::json::api_entries(&table, park.id)
    };
    Ok(json(StatusCode::OK, &body))
}

/// `PUT /parks/defineTimePeriods/{parkNumber}`: replaces the table after validating it (400
/// naming what is wrong; the old table stays); answers the table as stored.
#[utoipa::path(
    put, path = "/parks/defineTimePeriods/{parkNumber}", tag = TAG,
    operation_id = "defineTimePeriods",
    summary = "Replace a park's price table (park managers)",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body(content = inline(PriceTableForm), description = "The periods, or the object \
        form with the extras. The periods must cover the day without gaps or overlaps."),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The table as stored, in the array form.",
            body = Vec<ApiPeriod>),
        (status = 400, description = "The table breaks a rule (`invalid_price_table`, the \
            message naming where), or the body is not JSON (`invalid_json`); the old table \
            stays.", body = ErrorBody<'static>),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn replace_price_table(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let number = park_param(&park)?;
    let body = json_value(&s.shell.limits, &headers, body).await?;
    let table = pms_tariff::json::parse_api(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_price_table",
            e.to_string(),
        )
        .with_field("periods")
    })?;
    let park = s.store.park(number).await?;
    let version = s.store.replace_price_table(number, table, who.id).await?;
    s.committed();
    tracing::info!(
        park = number,
        version,
        manager = who.id,
        "price table replaced"
    );
    let (_, stored) = s.store.price_table(park.id).await?;
    Ok(json(
        StatusCode::OK,
        &pms_tariff::json::api_entries(&stored, park.id),
    ))
}

/// `GET /parks/occupancy/{parkNumber}`: the open occupancy feed of one park, in the spirit of
/// APDS's occupancy and ParkAPI: capacity, free spots in total and per vehicle and energy type,
/// and when it was read.
#[utoipa::path(
    get, path = "/parks/occupancy/{parkNumber}", tag = TAG, operation_id = "getOccupancyFeed",
    summary = "A park's open occupancy feed (no sign-in)",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    responses(
        (status = 200, description = "Capacity and free spots now.", body = OccupancyFeed),
        NoSuchPark,
    )
)]
pub async fn occupancy_feed(State(s): State<App>, Path(park): Path<String>) -> Answer {
    s.shell.ready.check()?;
    let park = s.store.park(park_param(&park)?).await?;
    let nearby = s.store.nearby(park.latitude, park.longitude, 0.0).await?;
    let types = nearby
        .into_iter()
        .find(|n| n.park_id == park.id)
        .map(|n| n.spot_type_occupancies)
        .unwrap_or_default();
    let free: i64 = types.iter().map(|t| t.available_spots).sum();
    Ok(json(
        StatusCode::OK,
        &OccupancyFeed {
            park_id: park.id,
            park_number: park.number,
            capacity: park.max_occupancy,
            available: free,
            status: if free == 0 { "full" } else { "open" },
            by_type: types,
            coordinates: Coordinates {
                latitude: park.latitude,
                longitude: park.longitude,
            },
            updated_at: jiff::Timestamp::now().to_string(),
        },
    ))
}

/// `GET /parks/devices/{parkNumber}`: the park's barriers, each with its displays and the text
/// each shows now (park managers and supervisors).
#[utoipa::path(
    get, path = "/parks/devices/{parkNumber}", tag = TAG, operation_id = "getParkDevices",
    summary = "A park's barriers and displays and what they show (park managers)",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Barriers by number, each with its displays.",
            body = ParkDevices,
            links(("setDeviceState" = (operation_id = "setDeviceState",
                description = "Put the park's first barrier in service.",
                parameters(("parkNumber" = "$request.path.parkNumber")),
                request_body = json!({"device": "BARRIER",
                    "deviceID": "$response.body#/barriers/0/barrierId", "state": "ACTIVE"}))))),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn devices(
    State(s): State<App>,
    _: Allowed<ParkManagers>,
    Path(park): Path<String>,
) -> Answer {
    let park = park_param(&park)?;
    Ok(json(StatusCode::OK, &s.store.devices(park).await?))
}

/// `PUT /parks/devices/{parkNumber}/state`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"device": "BARRIER", "deviceID": 1, "state": "DISABLED"}))]
pub struct DeviceSwitch {
    /// Barrier or display.
    pub device: DeviceType,
    /// Its id, as the park's device view lists it.
    #[serde(rename = "deviceID", deserialize_with = "lenient::integer")]
    pub device_id: i64,
    /// `ACTIVE` puts it in service; `DISABLED` switches it off, and it can do nothing.
    pub state: DeviceState,
}

/// `PUT /parks/devices/{parkNumber}/state` `{device, deviceID, state}`: a park manager switches
/// one of the park's devices on or off.
#[utoipa::path(
    put, path = "/parks/devices/{parkNumber}/state", tag = TAG, operation_id = "setDeviceState",
    summary = "Switch a barrier or display on or off (park managers)",
    description = "A switched-off barrier opens for nobody (its passages are refused with the \
        original's message, exits included) and writes no display; a switched-off display is \
        given no message, and one waiting for a change learns of its own at once.",
    params(("parkNumber" = i64, Path, minimum = 1, description = "The park's number.")),
    request_body = DeviceSwitch,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Its state now, and whether this changed it.",
            body = DeviceSwitched),
        ParkManagersOnly,
        (status = 404, description = "No such park, or no such device in it \
            (`park_not_found`, `barrier_not_found`, `display_not_found`).",
            body = ErrorBody<'static>),
    )
)]
pub async fn set_device_state(
    State(s): State<App>,
    who: Allowed<ParkManagers>,
    Path(park): Path<String>,
    JsonBody(body): JsonBody<DeviceSwitch>,
) -> Answer {
    let park = park_param(&park)?;
    let (park_id, switched) = s
        .store
        .set_device_state(park, body.device, body.device_id, body.state, who.id)
        .await?;
    if switched.changed {
        s.committed_in(park_id);
        tracing::info!(
            park,
            device = %switched.device,
            id = switched.device_id,
            state = %switched.state,
            manager = who.id,
            "device switched"
        );
    }
    Ok(json(StatusCode::OK, &switched))
}

/// `GET /parks/changes[?after=V&waitMs=N]`: `{"version"}`, the counter that moves whenever an
/// entrance, exit, spot change or display message may have changed what a park looks like;
/// with `after` it answers once the counter differs from it, or after `waitMs` (a long poll for
/// pages that follow occupancy live).
#[utoipa::path(
    get, path = "/parks/changes", tag = TAG, operation_id = "getChanges",
    summary = "The change counter, or a long poll for its next move",
    params(
        ("after" = Option<i64>, Query, description = "A previous answer's `version`: answer \
            once the counter differs from it."),
        ("waitMs" = Option<i64>, Query, minimum = 0, maximum = 30000,
            description = "Longest wait with `after`, ms (default 25000)."),
    ),
    security(("bearer" = [])),
    responses((status = 200, description = "The counter now.", body = ChangeVersion))
)]
pub async fn changes(State(s): State<App>, _: Caller, RawQuery(query): RawQuery) -> Answer {
    let [after, wait] = fields::query(query.as_deref(), ["after", "waitMs"])?;
    let after = fields::query_int("after", after.as_deref(), i64::MIN..=i64::MAX)?;
    let wait = fields::query_int("waitMs", wait.as_deref(), 0..=super::devices::MAX_WAIT_MS)?;
    let version = super::devices::wait_for_change(
        &s,
        after,
        wait,
        |v| *v,
        |_| s.bells.any(),
        || s.store.parks_version(),
    )
    .await?;
    Ok(json(StatusCode::OK, &ChangeVersion { version }))
}
