//! `/parks/...`: one function per endpoint — verify the caller, parse the input, apply the
//! role/ownership rule, call the store, shape the answer (spec §3.2).

use axum::body::Body;
use axum::extract::{Path, Query, State};
use http::{HeaderMap, StatusCode};
use pms_service::fields::{self, id_param, required_bool, required_int, required_str, FieldError};
use pms_service::http::{json, json_object, json_value, Answer};
use pms_service::vocab::Role;
use pms_service::{caller, ApiError, Caller};

use super::{response_text, store_error, MANAGERS, STAFF};
use crate::App;

/// Ready, and a verified caller.
async fn signed_in(s: &App, headers: &HeaderMap) -> Result<Caller, ApiError> {
    s.ready.check()?;
    caller(&s.verifier, headers).await
}

/// Ready, and a park manager or supervisor.
async fn manager(s: &App, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let who = signed_in(s, headers).await?;
    who.require(MANAGERS)?;
    Ok(who)
}

fn park_param(text: &str) -> Result<i64, ApiError> {
    Ok(id_param("parkNumber", text)?)
}

/// Ready, a verified caller, a valid `{customerID}`, and the caller is that customer or staff.
async fn own_or_staff(s: &App, headers: &HeaderMap, customer: &str) -> Result<i64, ApiError> {
    let who = signed_in(s, headers).await?;
    let customer = id_param("customerID", customer)?;
    who.require_self_or(customer, STAFF)?;
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
pub async fn occupancies(State(s): State<App>, headers: HeaderMap) -> Answer {
    signed_in(&s, &headers).await?;
    Ok(json(
        StatusCode::OK,
        &s.store.occupancies().await.map_err(store_error)?,
    ))
}

/// `GET /parks/real-time/occupancy/{lat}/{lon}/{km}`.
pub async fn nearby(
    State(s): State<App>,
    Path((lat, lon, km)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Answer {
    signed_in(&s, &headers).await?;
    let lat = number_param("userLatitude", &lat, -90.0..=90.0)?;
    let lon = number_param("userLongitude", &lon, -180.0..=180.0)?;
    let km = number_param("maxDistanceKm", &km, 0.0..=20_100.0)?;
    Ok(json(
        StatusCode::OK,
        &s.store.nearby(lat, lon, km).await.map_err(store_error)?,
    ))
}

/// `GET /parks/parkingHistory/{customerID}`: completed visits, for the customer or staff.
pub async fn history(
    State(s): State<App>,
    Path(customer): Path<String>,
    headers: HeaderMap,
) -> Answer {
    let customer = own_or_staff(&s, &headers, &customer).await?;
    Ok(json(
        StatusCode::OK,
        &s.store.history(customer).await.map_err(store_error)?,
    ))
}

/// `GET /parks/getQuantityOfHistoryByCustomerID/{customerID}`.
pub async fn history_count(
    State(s): State<App>,
    Path(customer): Path<String>,
    headers: HeaderMap,
) -> Answer {
    let customer = own_or_staff(&s, &headers, &customer).await?;
    Ok(json(
        StatusCode::OK,
        &s.store.history_count(customer).await.map_err(store_error)?,
    ))
}

/// `PUT /parks/enableDisableSpot` `{parkNumber, spotNumber, operational, managerName}`.
pub async fn set_spot(State(s): State<App>, headers: HeaderMap, body: Body) -> Answer {
    let who = manager(&s, &headers).await?;
    let body = json_object(&s.limits, &headers, body).await?;
    let park = required_int(&body, "parkNumber")?;
    let spot = required_str(&body, "spotNumber")?.trim();
    if spot.is_empty() || spot.len() > 16 {
        return Err(FieldError::new("spotNumber", "must be 1 to 16 characters").into());
    }
    let operational = required_bool(&body, "operational")?;
    let name = match body.get("managerName") {
        Some(serde_json::Value::String(n)) if !n.trim().is_empty() => {
            let n = n.trim();
            if n.chars().count() > 100 || n.chars().any(char::is_control) {
                return Err(FieldError::new(
                    "managerName",
                    "must be 1 to 100 printable characters",
                )
                .into());
            }
            n.to_owned()
        }
        _ => format!("user {}", who.id),
    };
    let message = s
        .store
        .set_spot(park, spot, operational, &name, who.id)
        .await
        .map_err(store_error)?;
    s.committed();
    Ok(response_text(message))
}

/// `GET /parks/getAllParks`: park numbers as strings.
pub async fn all_parks(State(s): State<App>, headers: HeaderMap) -> Answer {
    signed_in(&s, &headers).await?;
    let parks = s.store.parks().await.map_err(store_error)?;
    let numbers: Vec<String> = parks.iter().map(|p| p.number.to_string()).collect();
    Ok(json(StatusCode::OK, &numbers))
}

/// `GET /parks/getSpotsByParkNumber/{parkNumber}`.
pub async fn spots(State(s): State<App>, Path(park): Path<String>, headers: HeaderMap) -> Answer {
    signed_in(&s, &headers).await?;
    let park = park_param(&park)?;
    Ok(json(
        StatusCode::OK,
        &s.store.spots(park).await.map_err(store_error)?,
    ))
}

/// `PUT /parks/changeParkyThresholds/{parkNumber}` `{parkiesPerHour, parkiesPerMinute}`.
pub async fn set_thresholds(
    State(s): State<App>,
    Path(park): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    manager(&s, &headers).await?;
    let park = park_param(&park)?;
    let body = json_object(&s.limits, &headers, body).await?;
    let per_hour = non_negative(&body, "parkiesPerHour")?;
    let per_minute = non_negative(&body, "parkiesPerMinute")?;
    s.store
        .set_thresholds(park, per_hour, per_minute)
        .await
        .map_err(store_error)?;
    Ok(response_text(format!("Park {park} thresholds changed")))
}

fn non_negative(body: &fields::Body, field: &'static str) -> Result<i64, ApiError> {
    let v = required_int(body, field)?;
    if (0..=1_000_000).contains(&v) {
        Ok(v)
    } else {
        Err(FieldError::new(field, "must be 0 to 1000000").into())
    }
}

/// `GET /parks/getParkyThresholds/{parkNumber}`.
pub async fn thresholds(
    State(s): State<App>,
    Path(park): Path<String>,
    headers: HeaderMap,
) -> Answer {
    signed_in(&s, &headers).await?;
    let park = s
        .store
        .park(park_param(&park)?)
        .await
        .map_err(store_error)?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({"parkiesPerHour": park.parkies_per_hour, "parkiesPerMinute": park.parkies_per_minute}),
    ))
}

/// `GET /parks/getOvernightConfig/{parkNumber}`.
pub async fn overnight(
    State(s): State<App>,
    Path(park): Path<String>,
    headers: HeaderMap,
) -> Answer {
    signed_in(&s, &headers).await?;
    let park = s
        .store
        .park(park_param(&park)?)
        .await
        .map_err(store_error)?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({"overnightFee": park.overnight_fee, "enabled": park.overnight_enabled}),
    ))
}

/// `PUT /parks/enableDisableOvernightFee` `{parkNumber, status}`.
pub async fn set_overnight_enabled(State(s): State<App>, headers: HeaderMap, body: Body) -> Answer {
    let who = manager(&s, &headers).await?;
    let body = json_object(&s.limits, &headers, body).await?;
    let park = required_int(&body, "parkNumber")?;
    let on = required_bool(&body, "status")?;
    s.store
        .set_overnight(park, Some(on), None, who.id)
        .await
        .map_err(store_error)?;
    s.committed();
    Ok(response_text(format!("Park {park} overnight fee {on}")))
}

/// `PUT /parks/changeOvernightFeePrice` `{parkNumber, price}` (whole euros).
pub async fn set_overnight_fee(State(s): State<App>, headers: HeaderMap, body: Body) -> Answer {
    let who = manager(&s, &headers).await?;
    let body = json_object(&s.limits, &headers, body).await?;
    let park = required_int(&body, "parkNumber")?;
    let price = required_int(&body, "price")?;
    if !(0..=10_000).contains(&price) {
        return Err(FieldError::new("price", "must be 0 to 10000 (whole euros)").into());
    }
    s.store
        .set_overnight(park, None, Some(price), who.id)
        .await
        .map_err(store_error)?;
    s.committed();
    Ok(response_text(format!(
        "Park {park} overnight fee changed to {price}"
    )))
}

/// `PUT /parks/changeUserParkyFlag` `{customerID, parkyFlag}`: the customer's own flag only.
pub async fn set_coin_flag(State(s): State<App>, headers: HeaderMap, body: Body) -> Answer {
    let who = signed_in(&s, &headers).await?;
    let body = json_object(&s.limits, &headers, body).await?;
    let customer = required_int(&body, "customerID")?;
    let on = required_bool(&body, "parkyFlag")?;
    who.require_self(customer, &[Role::Customer])?;
    s.store
        .set_coin_flag(customer, on)
        .await
        .map_err(store_error)?;
    Ok(response_text("Success"))
}

/// `GET /parks/getUserParkyFlag/{customerID}`.
pub async fn coin_flag(
    State(s): State<App>,
    Path(customer): Path<String>,
    headers: HeaderMap,
) -> Answer {
    let customer = own_or_staff(&s, &headers, &customer).await?;
    Ok(json(
        StatusCode::OK,
        &s.store.coin_flag(customer).await.map_err(store_error)?,
    ))
}

/// The price table's query.
#[derive(Debug, serde::Deserialize)]
pub struct TableQuery {
    /// `array` (the published answer, the default) or `object` (with the extras).
    form: Option<String>,
}

/// `GET /parks/getAllPriceTableEntries/{parkNumber}[?form=object]`: the current table (the
/// original read it by internal id while every other endpoint took the number; for the seeded
/// parks they are equal). `form=object` answers what `defineTimePeriods` takes to set the
/// extras too, so an editor can read a table and write it back without losing them, and the
/// park's `timeZone` (read only).
pub async fn price_table(
    State(s): State<App>,
    Path(park): Path<String>,
    Query(query): Query<TableQuery>,
    headers: HeaderMap,
) -> Answer {
    signed_in(&s, &headers).await?;
    let object = match query.form.as_deref() {
        None | Some("array") => false,
        Some("object") => true,
        Some(other) => {
            return Err(
                FieldError::new("form", format!("{other:?} is not one of array, object")).into(),
            )
        }
    };
    let park = s
        .store
        .park(park_param(&park)?)
        .await
        .map_err(store_error)?;
    let (_, table) = s.store.price_table(park.id).await.map_err(store_error)?;
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
pub async fn replace_price_table(
    State(s): State<App>,
    Path(park): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let who = manager(&s, &headers).await?;
    let number = park_param(&park)?;
    let body = json_value(&s.limits, &headers, body).await?;
    let table = pms_tariff::json::parse_api(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_price_table",
            e.to_string(),
        )
        .with_field("periods")
    })?;
    let park = s.store.park(number).await.map_err(store_error)?;
    let version = s
        .store
        .replace_price_table(number, table, who.id)
        .await
        .map_err(store_error)?;
    s.committed();
    tracing::info!(
        park = number,
        version,
        manager = who.id,
        "price table replaced"
    );
    let (_, stored) = s.store.price_table(park.id).await.map_err(store_error)?;
    Ok(json(
        StatusCode::OK,
        &pms_tariff::json::api_entries(&stored, park.id),
    ))
}

/// `GET /parks/occupancy/{parkNumber}`: the open occupancy feed of one park, in the spirit of
/// APDS's occupancy and ParkAPI: capacity, free spots in total and per vehicle and energy type,
/// and when it was read.
pub async fn occupancy_feed(State(s): State<App>, Path(park): Path<String>) -> Answer {
    s.ready.check()?;
    let park = s
        .store
        .park(park_param(&park)?)
        .await
        .map_err(store_error)?;
    let nearby = s
        .store
        .nearby(park.latitude, park.longitude, 0.0)
        .await
        .map_err(store_error)?;
    let types = nearby
        .into_iter()
        .find(|n| n.park_id == park.id)
        .map(|n| n.spot_type_occupancies)
        .unwrap_or_default();
    let free: i64 = types.iter().map(|t| t.available_spots).sum();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({
            "parkId": park.id,
            "parkNumber": park.number,
            "capacity": park.max_occupancy,
            "available": free,
            "status": if free == 0 { "full" } else { "open" },
            "byType": types,
            "coordinates": {"latitude": park.latitude, "longitude": park.longitude},
            "updatedAt": jiff::Timestamp::now().to_string(),
        }),
    ))
}

/// `GET /parks/devices/{parkNumber}`: the park's barriers, each with its displays and the text
/// each shows now (park managers and supervisors).
pub async fn devices(State(s): State<App>, Path(park): Path<String>, headers: HeaderMap) -> Answer {
    manager(&s, &headers).await?;
    let park = park_param(&park)?;
    Ok(json(
        StatusCode::OK,
        &s.store.devices(park).await.map_err(store_error)?,
    ))
}

/// The change feed's query.
#[derive(Debug, serde::Deserialize)]
pub struct ChangesQuery {
    /// The `version` of a previous answer.
    after: Option<String>,
    /// Longest wait, ms.
    #[serde(rename = "waitMs")]
    wait_ms: Option<String>,
}

/// `GET /parks/changes[?after=V&waitMs=N]`: `{"version"}`, the counter that moves whenever an
/// entrance, exit, spot change or display message may have changed what a park looks like;
/// with `after` it answers once the counter differs from it, or after `waitMs` (a long poll for
/// pages that follow occupancy live).
pub async fn changes(
    State(s): State<App>,
    Query(query): Query<ChangesQuery>,
    headers: HeaderMap,
) -> Answer {
    signed_in(&s, &headers).await?;
    let number = |name: &'static str, v: Option<&str>| -> Result<Option<i64>, ApiError> {
        v.map(|t| {
            t.parse::<i64>()
                .map_err(|_| FieldError::new(name, "must be a whole number").into())
        })
        .transpose()
    };
    let after = number("after", query.after.as_deref())?;
    let wait = number("waitMs", query.wait_ms.as_deref())?;
    let version = super::devices::wait_for_change(&s, after, wait).await?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({"version": version}),
    ))
}
