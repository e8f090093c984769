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
//! | `GET /payments/events/parked`, `POST …/{source}/{eventId}/retry` | SUPERVISOR: the events payments set aside, and trying one again |

use axum::extract::{Path, RawQuery, State};
use axum::Router;
use http::StatusCode;
use pms_service::body::JsonBody;
use pms_service::http::{json, Answer};
use pms_service::openapi::{ErrorBody, Instant, Plate};
use pms_service::{Allowed, ApiError, Caller, ParkManagers, Roles, Staff};
use pms_tariff::fee::{self, FeeError, Stay};
use pms_vocab::fields::FieldError;
use pms_vocab::lenient;
use serde::Deserialize;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::model::PaymentsDto;
use crate::store::invoices::{quote_dto, Filter};
use crate::store::StoreError;
use crate::App;

/// Default page size of a listing.
pub const DEFAULT_PAGE: i64 = 100;
/// Largest page.
pub const MAX_PAGE: i64 = 1000;

/// The OpenAPI tag of every payments endpoint.
pub const TAG: &str = "payments";

/// The document's fixed parts; the operations come from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "PMS payments",
        description = "Invoices of closed visits, priced with each park's table, and price quotes."
    ),
    tags((name = "payments", description = "Invoices and quotes."))
)]
struct PaymentsApi;

/// The public endpoints' routes (and `/openapi.json`), and their document.
fn parts() -> (Router<App>, utoipa::openapi::OpenApi) {
    pms_service::openapi::split(
        OpenApiRouter::with_openapi(PaymentsApi::openapi())
            .routes(routes!(create_payment))
            .routes(routes!(all))
            .routes(routes!(by_nif))
            .routes(routes!(invoice))
            .routes(routes!(mine))
            .routes(routes!(quote))
            .merge(
                pms_events::parked::SetAside {
                    service: "payments",
                    consumer: crate::store::replica::CONSUMER,
                    sources: &["parks", "users"],
                }
                .routes(),
            ),
    )
}

/// The service's OpenAPI 3.1 document: every public endpoint, with the kit's shared errors.
pub fn openapi() -> utoipa::openapi::OpenApi {
    parts().1
}

/// The route table: the public endpoints, `/openapi.json`, and health and metrics.
pub fn router(state: App) -> Router {
    pms_service::chassis::router(parts().0, state)
}

/// `limit`/`offset` from the query string, each at most once.
fn page(query: Option<&str>) -> Result<(i64, i64), ApiError> {
    use pms_vocab::fields::query_int;
    let [limit, offset] = pms_vocab::fields::query(query, ["limit", "offset"])?;
    Ok((
        query_int("limit", limit.as_deref(), 1..=MAX_PAGE)?.unwrap_or(DEFAULT_PAGE),
        query_int("offset", offset.as_deref(), 0..=i64::MAX)?.unwrap_or(0),
    ))
}

/// `GET /payments/getAllPayments`: every invoice, newest first, paged.
#[utoipa::path(
    get, path = "/payments/getAllPayments", tag = TAG, operation_id = "getAllPayments",
    summary = "Every invoice, newest first (staff)",
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000,
            description = "Most invoices to list (default 100)."),
        ("offset" = Option<i64>, Query, minimum = 0, description = "Invoices to skip first."),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Invoices, newest first.", body = Vec<PaymentsDto>,
            links(("getInvoice" = (operation_id = "getInvoice",
                parameters(("id" = "$response.body#/0/invoice")))),
                ("getPaymentsByNif" = (operation_id = "getPaymentsByNif",
                parameters(("nif" = "$response.body#/0/nif")))))),
        (status = 403, description = "Only CUSTOMER_MANAGER, PARK_MANAGER and SUPERVISOR \
            list every invoice (`forbidden`).", body = ErrorBody<'static>),
    )
)]
async fn all(State(s): State<App>, _: Allowed<Staff>, RawQuery(q): RawQuery) -> Answer {
    let (limit, offset) = page(q.as_deref())?;
    Ok(json(
        StatusCode::OK,
        &s.store.invoices(Filter::All, limit, offset).await?,
    ))
}

/// `GET /payments/designation/{nif}`: the invoices of one tax number.
#[utoipa::path(
    get, path = "/payments/designation/{nif}", tag = TAG, operation_id = "getPaymentsByNif",
    summary = "The invoices of one tax number",
    params(
        ("nif" = i64, Path, minimum = 100_000_000, maximum = 999_999_999,
            description = "A nine-digit tax number: the caller's own, or any for staff."),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000,
            description = "Most invoices to list (default 100)."),
        ("offset" = Option<i64>, Query, minimum = 0, description = "Invoices to skip first."),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Its invoices, newest first (`[]` if none).",
            body = Vec<PaymentsDto>),
        (status = 403, description = "Another customer's tax number (`forbidden`).",
            body = ErrorBody<'static>),
    )
)]
async fn by_nif(
    State(s): State<App>,
    who: Caller,
    Path(nif): Path<String>,
    RawQuery(q): RawQuery,
) -> Answer {
    let nif = match nif.parse::<i64>() {
        Ok(n) if (100_000_000..=999_999_999).contains(&n) => n,
        _ => {
            return Err(
                FieldError::new("nif", format!("{nif:?} is not a nine-digit tax number")).into(),
            )
        }
    };
    if !Staff::ALLOWED.contains(&who.role) {
        let own = s.store.customer_nif(who.id).await?;
        if own != Some(nif) {
            return Err(ApiError::forbidden(
                "these invoices belong to another customer",
            ));
        }
    }
    let (limit, offset) = page(q.as_deref())?;
    Ok(json(
        StatusCode::OK,
        &s.store.invoices(Filter::Nif(nif), limit, offset).await?,
    ))
}

/// `GET /payments/invoice/{id}`.
#[utoipa::path(
    get, path = "/payments/invoice/{id}", tag = TAG, operation_id = "getInvoice",
    summary = "One invoice",
    params(("id" = i64, Path, minimum = 1, description = "Invoice id.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The invoice.", body = PaymentsDto,
            links(("getPaymentsByNif" = (operation_id = "getPaymentsByNif",
                parameters(("nif" = "$response.body#/nif")))))),
        (status = 403, description = "Another customer's invoice (`forbidden`).",
            body = ErrorBody<'static>),
        (status = 404, description = "No such invoice (`invoice_not_found`).",
            body = ErrorBody<'static>),
    )
)]
async fn invoice(State(s): State<App>, who: Caller, Path(id): Path<String>) -> Answer {
    let id = pms_vocab::fields::id_param("invoice", &id)?;
    let (dto, customer) = s.store.invoice(id).await?;
    who.require_self_or(customer, Staff::ALLOWED)?;
    Ok(json(StatusCode::OK, &dto))
}

/// `GET /payments/mine`: the caller's invoices.
#[utoipa::path(
    get, path = "/payments/mine", tag = TAG, operation_id = "getMyPayments",
    summary = "The caller's own invoices",
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000,
            description = "Most invoices to list (default 100)."),
        ("offset" = Option<i64>, Query, minimum = 0, description = "Invoices to skip first."),
    ),
    security(("bearer" = [])),
    responses((status = 200, description = "Newest first (`[]` if none).", body = Vec<PaymentsDto>,
        links(("getInvoice" = (operation_id = "getInvoice",
                parameters(("id" = "$response.body#/0/invoice")))))))
)]
async fn mine(State(s): State<App>, who: Caller, RawQuery(q): RawQuery) -> Answer {
    let (limit, offset) = page(q.as_deref())?;
    Ok(json(
        StatusCode::OK,
        &s.store
            .invoices(Filter::Customer(who.id), limit, offset)
            .await?,
    ))
}

/// `GET /payments/quote/{plate}`: what the open visit of a vehicle would cost if it left now.
#[utoipa::path(
    get, path = "/payments/quote/{plate}", tag = TAG, operation_id = "getQuote",
    summary = "What a parked vehicle's stay would cost if it left now",
    params(("plate" = inline(Plate), Path,
        description = "The vehicle's plate: the caller's own, or any for staff.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The price now (`status` `QUOTE`, `invoice` null).",
            body = PaymentsDto),
        (status = 404, description = "No open visit of the caller's with this plate \
            (`no_open_visit`): not parked, or (to a customer) another customer's vehicle, \
            answered alike so that a quote never tells whether someone else's car is parked.",
            body = ErrorBody<'static>),
    )
)]
async fn quote(State(s): State<App>, who: Caller, Path(plate): Path<String>) -> Answer {
    let plate = pms_vocab::plate(&plate).map_err(|m| FieldError::new("licensePlateNumber", m))?;
    // Another customer's car is "not parked" to a customer, whether it is or not: the answer
    // must not tell.
    let open = s.store.open_visit(&plate).await?;
    let Some((_visit, park, customer, vehicle, entered)) =
        open.filter(|open| who.require_self_or(open.2, Staff::ALLOWED).is_ok())
    else {
        let whose = if Staff::ALLOWED.contains(&who.role) {
            ""
        } else {
            ", or not yours"
        };
        return Err(ApiError::not_found(
            "no_open_visit",
            format!("{plate} is not parked{whose}"),
        ));
    };
    let now = jiff::Timestamp::now();
    let table = s.store.table_at(park, now.as_millisecond()).await?;
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
    let nif = s.store.customer_nif(customer).await?.unwrap_or(0);
    Ok(json(
        StatusCode::OK,
        &quote_dto(&bill, &table, vehicle, nif, park, &plate),
    ))
}

fn fee_error(e: FeeError) -> ApiError {
    match e {
        FeeError::ExitBeforeEntry | FeeError::OutOfRange => {
            FieldError::new("leftPark", e.to_string()).into()
        }
    }
}

/// `POST /payments/createPayment` body: a stay to price.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"enterPark": "2023-11-26T09:00:00Z", "leftPark": "2023-11-26T11:30:00Z",
    "parkID": 1, "licensePlateNumber": "AA-20-CC"}))]
pub struct StayBody {
    /// When the vehicle came in.
    #[schema(value_type = Instant)]
    #[serde(deserialize_with = "lenient::instant")]
    pub enter_park: jiff::Timestamp,
    /// When it left: the park's table in force then prices the stay; not before `enterPark`.
    #[schema(value_type = Instant)]
    #[serde(deserialize_with = "lenient::instant")]
    pub left_park: jiff::Timestamp,
    /// The park.
    #[serde(rename = "parkID", deserialize_with = "lenient::integer")]
    #[schema(minimum = 1)]
    pub park_id: i64,
    /// A registered vehicle's plate.
    #[schema(value_type = Plate)]
    #[serde(deserialize_with = "lenient::string")]
    pub license_plate_number: String,
}

/// `POST /payments/createPayment` `{enterPark, leftPark, parkID, licensePlateNumber}`: prices a
/// stay with the park's table in force at `leftPark`, for staff; stores nothing (`invoice` is
/// `null`). PARKY coins are spent only on real exits, so no discount here.
#[utoipa::path(
    post, path = "/payments/createPayment", tag = TAG, operation_id = "createPayment",
    summary = "Price a stay (park managers); nothing is stored",
    request_body = StayBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The price (`status` `QUOTE`, `invoice` null).",
            body = PaymentsDto),
        (status = 403, description = "Only PARK_MANAGER and SUPERVISOR price stays \
            (`forbidden`).", body = ErrorBody<'static>),
        (status = 404, description = "The vehicle is not registered (`vehicle_not_found`) or \
            the park has no price table (`park_not_found`).", body = ErrorBody<'static>),
    )
)]
async fn create_payment(
    State(s): State<App>,
    _: Allowed<ParkManagers>,
    JsonBody(body): JsonBody<StayBody>,
) -> Answer {
    let (entry, exit, park) = (body.enter_park, body.left_park, body.park_id);
    let plate = pms_vocab::plate(&body.license_plate_number)
        .map_err(|m| FieldError::new("licensePlateNumber", m))?;
    if exit < entry {
        return Err(FieldError::new("leftPark", "leftPark is before enterPark").into());
    }
    let Some((_customer, nif, vehicle)) = s.store.vehicle(&plate).await? else {
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
        Err(e) => return Err(e.into()),
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
        &quote_dto(&bill, &table, vehicle, nif, park, &plate),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_documented_behind_a_token() {
        let doc = serde_json::to_value(openapi()).expect("document");
        let mut ids = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("item") {
                let at = format!("{method} {path}");
                ids.push(op["operationId"].as_str().expect("operationId").to_owned());
                assert_eq!(
                    op["security"],
                    serde_json::json!([{ "bearer": [] }]),
                    "{at}"
                );
                for status in ["200", "401", "503"] {
                    assert!(op["responses"][status].is_object(), "{at} {status}");
                }
            }
        }
        ids.sort();
        assert_eq!(
            ids,
            [
                "createPayment",
                "getAllPayments",
                "getInvoice",
                "getMyPayments",
                "getPaymentsByNif",
                "getPaymentsParkedEvents",
                "getQuote",
                "retryPaymentsParkedEvent"
            ]
        );
    }
}
