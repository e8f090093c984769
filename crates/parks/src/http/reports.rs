//! `/parkReport/...`: the usage reports, for park managers and supervisors.

use axum::extract::{Path, State};
use http::{HeaderMap, StatusCode};
use pms_service::caller;
use pms_service::fields::{id_param, FieldError};
use pms_service::http::{json, Answer};

use super::{store_error, MANAGERS};
use crate::model::ReportPeriod;
use crate::App;

/// `GET /parkReport/percentageOf/{parkId}`.
pub async fn percentages(
    State(s): State<App>,
    Path(park): Path<String>,
    headers: HeaderMap,
) -> Answer {
    s.ready.check()?;
    caller(&s.verifier, &headers).await?.require(MANAGERS)?;
    let park = id_param("parkId", &park)?;
    Ok(json(
        StatusCode::OK,
        &s.store.percentages(park).await.map_err(store_error)?,
    ))
}

/// `GET /parkReport/parkingTime/{parkId}/{day|month|year}`.
pub async fn parking_time(
    State(s): State<App>,
    Path((park, period)): Path<(String, String)>,
    headers: HeaderMap,
) -> Answer {
    s.ready.check()?;
    caller(&s.verifier, &headers).await?.require(MANAGERS)?;
    let park = id_param("parkId", &park)?;
    let period = ReportPeriod::parse(&period).ok_or_else(|| {
        FieldError::new(
            "timePeriod",
            format!("{period:?} is not one of {}", ReportPeriod::expected()),
        )
    })?;
    Ok(json(
        StatusCode::OK,
        &s.store
            .parking_time(park, period)
            .await
            .map_err(store_error)?,
    ))
}
