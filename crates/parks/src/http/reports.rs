//! `/parkReport/...`: the usage reports, for park managers and supervisors.

use axum::extract::{Path, State};
use http::StatusCode;
use pms_service::http::{json, Answer};
use pms_service::{Allowed, ParkManagers};
use pms_vocab::fields::{id_param, FieldError};

use super::TAG;
use super::{NoSuchPark, ParkManagersOnly};
use crate::model::ReportPeriod;
use crate::store::reports::{ParkingTime, Percentages};
use crate::App;

/// `GET /parkReport/percentageOf/{parkId}`.
#[utoipa::path(
    get, path = "/parkReport/percentageOf/{parkId}", tag = TAG, operation_id = "getPercentages",
    summary = "Shares of vehicle and energy types among a park's visits (park managers)",
    params(("parkId" = i64, Path, minimum = 1, description = "The park's id.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Percentages of all vehicles counted.", body = Percentages),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn percentages(
    State(s): State<App>,
    _: Allowed<ParkManagers>,
    Path(park): Path<String>,
) -> Answer {
    let park = id_param("parkId", &park)?;
    Ok(json(StatusCode::OK, &s.store.percentages(park).await?))
}

/// `GET /parkReport/parkingTime/{parkId}/{day|month|year}`.
#[utoipa::path(
    get, path = "/parkReport/parkingTime/{parkId}/{timePeriod}", tag = TAG,
    operation_id = "getParkingTime",
    summary = "Minutes parked per customer, by day, month or year (park managers)",
    params(
        ("parkId" = i64, Path, minimum = 1, description = "The park's id."),
        ("timePeriod" = inline(ReportPeriod), Path, description = "How to aggregate."),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One row per customer and period.", body = Vec<ParkingTime>),
        ParkManagersOnly,
        NoSuchPark,
    )
)]
pub async fn parking_time(
    State(s): State<App>,
    _: Allowed<ParkManagers>,
    Path((park, period)): Path<(String, String)>,
) -> Answer {
    let park = id_param("parkId", &park)?;
    let period = ReportPeriod::parse(&period).ok_or_else(|| {
        FieldError::new(
            "timePeriod",
            format!("{period:?} is not one of {}", ReportPeriod::expected()),
        )
    })?;
    Ok(json(
        StatusCode::OK,
        &s.store.parking_time(park, period).await?,
    ))
}
