//! The payments service's HTTP face: the published paths and what a customer and an operator
//! need besides, on the service kit's request-id layer and JSON error format.
//!
//! | endpoint | who |
//! |---|---|
//! | `GET /payments/getAllPayments[?limit&offset]` | CUSTOMER_MANAGER, PARK_MANAGER, SUPERVISOR |
//! | `GET /payments/designation/{nif}` | the customer with that NIF, and the same staff |
//! | `GET /payments/invoice/{id}` | the invoice's customer, and the same staff |
//! | `GET /payments/mine[?limit&offset]` | the signed-in user's own invoices |
//! | `GET /payments/quote/{plate}` | what the open visit of one's own vehicle would cost now (staff: any) |
//! | `POST /payments/createPayment` | PARK_MANAGER, SUPERVISOR: prices a stay, stores nothing |

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::routing::{get, post};
use axum::Router;
use http::{HeaderMap, StatusCode};
use pms_service::fields::{required_instant, required_int, required_str, FieldError};
use pms_service::http::{json, json_object, Answer};
use pms_service::vocab::Role;
use pms_service::{caller, ApiError, Caller};
use pms_tariff::fee::{self, FeeError, Stay};

use crate::store::invoices::{quote_dto, Filter};
use crate::store::StoreError;
use crate::App;

/// Staff who read every invoice.
pub const STAFF: &[Role] = &[Role::CustomerManager, Role::ParkManager, Role::Supervisor];
/// Staff who price stays.
pub const MANAGERS: &[Role] = &[Role::ParkManager, Role::Supervisor];
/// Default page size of a listing.
pub const DEFAULT_PAGE: i64 = 100;
/// Largest page.
pub const MAX_PAGE: i64 = 1000;

/// The route table.
pub fn router(state: App) -> Router {
    let routes = Router::new()
        .route("/payments/createPayment", post(create_payment))
        .route("/payments/getAllPayments", get(all))
        .route("/payments/designation/{nif}", get(by_nif))
        .route("/payments/invoice/{id}", get(invoice))
        .route("/payments/mine", get(mine))
        .route("/payments/quote/{plate}", get(quote))
        .route("/healthz", get(pms_service::http::healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    pms_service::http::finish(routes)
}

async fn readyz(State(s): State<App>) -> Answer {
    pms_service::http::readyz(&s.ready, &s.store).await
}

async fn metrics(State(s): State<App>) -> axum::response::Response {
    pms_service::http::metrics_text(s.metrics.render(&s.outbox, s.store.db()).await)
}

async fn signed_in(s: &App, headers: &HeaderMap) -> Result<Caller, ApiError> {
    s.ready.check()?;
    caller(&s.verifier, headers).await
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Unavailable(_) | StoreError::Transient(_) => ApiError::unavailable(e),
        StoreError::NotFound { what, ref id } => ApiError::not_found(
            match what {
                "invoice" => "invoice_not_found",
                _ => "not_found",
            },
            format!("{what} {id} not found"),
        ),
        StoreError::Refused(never) => match never {},
        StoreError::BadUrl(_) | StoreError::Internal(_) => ApiError::internal(e),
    }
}

/// `limit`/`offset` from the query string, each at most once.
fn page(query: Option<&str>) -> Result<(i64, i64), ApiError> {
    let (mut limit, mut offset) = (None, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (field, slot, range) = match key {
            "limit" => ("limit", &mut limit, 1..=MAX_PAGE),
            "offset" => ("offset", &mut offset, 0..=i64::MAX),
            _ => continue,
        };
        if slot.is_some() {
            return Err(FieldError::new(field, "given more than once").into());
        }
        match value.parse::<i64>() {
            Ok(n) if range.contains(&n) => *slot = Some(n),
            _ => {
                return Err(FieldError::new(
                    field,
                    format!("out of range (limit 1..={MAX_PAGE}, offset >= 0)"),
                )
                .into())
            }
        }
    }
    Ok((limit.unwrap_or(DEFAULT_PAGE), offset.unwrap_or(0)))
}

/// `GET /payments/getAllPayments`: every invoice, newest first, paged.
async fn all(State(s): State<App>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    signed_in(&s, &headers).await?.require(STAFF)?;
    let (limit, offset) = page(q.as_deref())?;
    Ok(json(
        StatusCode::OK,
        &s.store
            .invoices(Filter::All, limit, offset)
            .await
            .map_err(store_error)?,
    ))
}

/// `GET /payments/designation/{nif}`: the invoices of one tax number.
async fn by_nif(
    State(s): State<App>,
    Path(nif): Path<String>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Answer {
    let who = signed_in(&s, &headers).await?;
    let nif = match nif.parse::<i64>() {
        Ok(n) if (100_000_000..=999_999_999).contains(&n) => n,
        _ => {
            return Err(
                FieldError::new("nif", format!("{nif:?} is not a nine-digit tax number")).into(),
            )
        }
    };
    if !STAFF.contains(&who.role) {
        let own = s.store.customer_nif(who.id).await.map_err(store_error)?;
        if own != Some(nif) {
            return Err(ApiError::forbidden(
                "these invoices belong to another customer",
            ));
        }
    }
    let (limit, offset) = page(q.as_deref())?;
    Ok(json(
        StatusCode::OK,
        &s.store
            .invoices(Filter::Nif(nif), limit, offset)
            .await
            .map_err(store_error)?,
    ))
}

/// `GET /payments/invoice/{id}`.
async fn invoice(State(s): State<App>, Path(id): Path<String>, headers: HeaderMap) -> Answer {
    let who = signed_in(&s, &headers).await?;
    let id = pms_service::fields::id_param("invoice", &id)?;
    let (dto, customer) = s.store.invoice(id).await.map_err(store_error)?;
    who.require_self_or(customer, STAFF)?;
    Ok(json(StatusCode::OK, &dto))
}

/// `GET /payments/mine`: the caller's invoices.
async fn mine(State(s): State<App>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let who = signed_in(&s, &headers).await?;
    let (limit, offset) = page(q.as_deref())?;
    Ok(json(
        StatusCode::OK,
        &s.store
            .invoices(Filter::Customer(who.id), limit, offset)
            .await
            .map_err(store_error)?,
    ))
}

/// `GET /payments/quote/{plate}`: what the open visit of a vehicle would cost if it left now.
async fn quote(State(s): State<App>, Path(plate): Path<String>, headers: HeaderMap) -> Answer {
    let who = signed_in(&s, &headers).await?;
    let plate =
        pms_service::vocab::plate(&plate).map_err(|m| FieldError::new("licensePlateNumber", m))?;
    let Some((_visit, park, customer, vehicle, entered)) =
        s.store.open_visit(&plate).await.map_err(store_error)?
    else {
        return Err(ApiError::not_found(
            "no_open_visit",
            format!("{plate} is not parked"),
        ));
    };
    who.require_self_or(customer, STAFF)?;
    let now = jiff::Timestamp::now();
    let table = s
        .store
        .table_at(park, now.as_millisecond())
        .await
        .map_err(store_error)?;
    let entry = jiff::Timestamp::from_millisecond(entered).map_err(ApiError::internal)?;
    let bill = fee::price(
        &table.table,
        &table.time_zone,
        &Stay {
            entry,
            exit: now.max(entry),
            vehicle,
        },
    )
    .map_err(fee_error)?;
    let nif = s
        .store
        .customer_nif(customer)
        .await
        .map_err(store_error)?
        .unwrap_or(0);
    Ok(json(
        StatusCode::OK,
        &quote_dto(
            &bill,
            &table.time_zone,
            vehicle,
            nif,
            park,
            &plate,
            table.version,
        ),
    ))
}

fn fee_error(e: FeeError) -> ApiError {
    match e {
        FeeError::ExitBeforeEntry => FieldError::new("leftPark", e.to_string()).into(),
        FeeError::TooLong | FeeError::OutOfRange => {
            FieldError::new("leftPark", e.to_string()).into()
        }
    }
}

/// `POST /payments/createPayment` `{enterPark, leftPark, parkID, licensePlateNumber}`: prices a
/// stay with the park's table in force at `leftPark`, for staff; stores nothing (`invoice` is
/// `null`). PARKY coins are spent only on real exits, so no discount here.
async fn create_payment(State(s): State<App>, headers: HeaderMap, body: Body) -> Answer {
    signed_in(&s, &headers).await?.require(MANAGERS)?;
    let body = json_object(&s.limits, &headers, body).await?;
    let entry = required_instant(&body, "enterPark")?;
    let exit = required_instant(&body, "leftPark")?;
    let park = required_int(&body, "parkID")?;
    let plate = pms_service::vocab::plate(required_str(&body, "licensePlateNumber")?)
        .map_err(|m| FieldError::new("licensePlateNumber", m))?;
    if exit < entry {
        return Err(FieldError::new("leftPark", "leftPark is before enterPark").into());
    }
    let Some((_customer, nif, vehicle)) = s.store.vehicle(&plate).await.map_err(store_error)?
    else {
        return Err(ApiError::not_found(
            "vehicle_not_found",
            format!("vehicle {plate} is not registered"),
        )
        .with_field("licensePlateNumber"));
    };
    let table = match s.store.table_at(park, exit.as_millisecond()).await {
        Ok(t) => t,
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(
                "park_not_found",
                format!("park {park} has no price table"),
            )
            .with_field("parkID"))
        }
        Err(e) => return Err(store_error(e)),
    };
    let bill = fee::price(
        &table.table,
        &table.time_zone,
        &Stay {
            entry,
            exit,
            vehicle,
        },
    )
    .map_err(fee_error)?;
    Ok(json(
        StatusCode::OK,
        &quote_dto(
            &bill,
            &table.time_zone,
            vehicle,
            nif,
            park,
            &plate,
            table.version,
        ),
    ))
}
