//! The parks service's HTTP face: the route table (the published paths), on the service kit's
//! request-id layer and JSON error format. Handlers: [`parks`] (`/parks/...`), [`devices`]
//! (`/barriers/...`, `/display/...`), [`reports`] (`/parkReport/...`).
//!
//! Who may call what:
//!
//! | endpoints | who |
//! |---|---|
//! | occupancies, nearby parks, parks list, spots, thresholds, overnight config, price table read | any signed-in user |
//! | history, history count, coin flag read | the customer themself, or staff |
//! | coin flag change | the customer themself |
//! | spots on/off, thresholds, overnight, price table replace, reports | PARK_MANAGER, SUPERVISOR |
//! | barriers, displays | the device itself (`X-Device-Key`), for its own park and direction |

pub mod devices;
pub mod parks;
pub mod reports;

use axum::routing::{get, post, put};
use axum::Router;
use http::StatusCode;
use pms_service::vocab::Role;
use pms_service::ApiError;

use crate::store::StoreError;
use crate::App;

/// Roles that manage parks.
pub const MANAGERS: &[Role] = &[Role::ParkManager, Role::Supervisor];
/// Roles that may read any customer's parking data.
pub const STAFF: &[Role] = &[Role::ParkManager, Role::Supervisor, Role::CustomerManager];

/// The route table.
pub fn router(state: App) -> Router {
    use self::devices as d;
    use self::parks as p;
    use self::reports as r;
    let routes = Router::new()
        .route("/parks/getAllOccupancies", get(p::occupancies))
        .route(
            "/parks/real-time/occupancy/{lat}/{lon}/{km}",
            get(p::nearby),
        )
        .route("/parks/parkingHistory/{customer}", get(p::history))
        .route(
            "/parks/getQuantityOfHistoryByCustomerID/{customer}",
            get(p::history_count),
        )
        .route("/parks/enableDisableSpot", put(p::set_spot))
        .route("/parks/getAllParks", get(p::all_parks))
        .route("/parks/getSpotsByParkNumber/{park}", get(p::spots))
        .route(
            "/parks/changeParkyThresholds/{park}",
            put(p::set_thresholds),
        )
        .route("/parks/getParkyThresholds/{park}", get(p::thresholds))
        .route("/parks/getOvernightConfig/{park}", get(p::overnight))
        .route(
            "/parks/enableDisableOvernightFee",
            put(p::set_overnight_enabled),
        )
        .route("/parks/changeOvernightFeePrice", put(p::set_overnight_fee))
        .route("/parks/changeUserParkyFlag", put(p::set_coin_flag))
        .route("/parks/getUserParkyFlag/{customer}", get(p::coin_flag))
        .route("/parks/getAllPriceTableEntries/{park}", get(p::price_table))
        .route(
            "/parks/defineTimePeriods/{park}",
            put(p::replace_price_table),
        )
        .route("/parks/occupancy/{park}", get(p::occupancy_feed))
        .route("/parks/devices/{park}", get(p::devices))
        .route("/parks/changes", get(p::changes))
        .route("/barriers/entrance", post(d::entrance))
        .route("/barriers/exit", post(d::exit))
        .route("/display/update", post(d::update_display))
        .route("/display/get", post(d::get_display))
        .route("/parkReport/percentageOf/{park}", get(r::percentages))
        .route(
            "/parkReport/parkingTime/{park}/{period}",
            get(r::parking_time),
        )
        .route("/healthz", get(pms_service::http::healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    pms_service::http::finish(routes)
}

async fn readyz(axum::extract::State(s): axum::extract::State<App>) -> pms_service::http::Answer {
    pms_service::http::readyz(&s.ready, &s.store).await
}

async fn metrics(axum::extract::State(s): axum::extract::State<App>) -> axum::response::Response {
    pms_service::http::metrics_text(s.metrics.events.render(&s.outbox, s.store.db()).await)
}

/// The API's word for a store failure.
pub fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Unavailable(_) | StoreError::Transient(_) => ApiError::unavailable(e),
        StoreError::NotFound { what, ref id } => ApiError::not_found(
            match what {
                "park" => "park_not_found",
                "spot" => "spot_not_found",
                "customer" => "customer_not_found",
                "display" => "display_not_found",
                "barrier" => "barrier_not_found",
                _ => "not_found",
            },
            format!("{what} {id} not found"),
        ),
        StoreError::Refused(r) => ApiError::new(StatusCode::CONFLICT, r.reason(), r.message()),
        StoreError::BadUrl(_) | StoreError::Internal(_) => ApiError::internal(e),
    }
}

/// `{"response": text}`, the B services' answer to a write.
pub fn response_text(text: impl Into<String>) -> axum::response::Response {
    pms_service::http::json(
        StatusCode::OK,
        &serde_json::json!({ "response": text.into() }),
    )
}
