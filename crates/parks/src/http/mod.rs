//! The parks service's HTTP face: the route table (the published paths), on the service kit's
//! request-id layer and JSON error format. Handlers: [`parks`] (`/parks/...`), [`admin`] (the
//! operator's parks, spots, devices, keys and audit trail), [`devices`] (`/barriers/...`,
//! `/display/...`), [`reports`] (`/parkReport/...`).
//!
//! Who may call what:
//!
//! | endpoints | who |
//! |---|---|
//! | occupancies, nearby parks, parks list, spots, thresholds, overnight config, price table read | any signed-in user |
//! | history, history count, coin flag read | the customer themself, or staff |
//! | coin flag change | the customer themself |
//! | park settings read | any signed-in user |
//! | spots on/off, thresholds, overnight, price table replace, reports | PARK_MANAGER, SUPERVISOR |
//! | parks, spots, barriers and displays created, park changed, spots retired, device keys | PARK_MANAGER, SUPERVISOR |
//! | audit trail | SUPERVISOR |
//! | barriers, displays | the device itself (`X-Device-Key`), for its own park and direction |
//!
//! The routes are registered with their OpenAPI operations (`utoipa-axum`), so the document
//! ([`openapi`]) cannot drift from them.

pub mod admin;
pub mod devices;
pub mod parks;
pub mod reports;

use axum::Router;
use http::StatusCode;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::model::ResponseText;
use crate::App;

/// The OpenAPI tag of every parks endpoint.
pub const TAG: &str = "parks";
/// Name of the device-key security scheme (`security(("deviceKey" = []))` on a path).
pub const DEVICE_KEY: &str = "deviceKey";

/// The document's fixed parts; the operations come from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "PMS parks",
        description = "Parks, spots, price tables, visits at the barriers, displays and reports."
    ),
    tags((name = "parks", description = "Parks, their devices and their reports.")),
    modifiers(&DeviceKeyScheme)
)]
struct ParksApi;

/// Adds the device-key scheme: each barrier and display sends its own key.
struct DeviceKeyScheme;

impl Modify for DeviceKeyScheme {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            DEVICE_KEY,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                crate::devices::DEVICE_KEY_HEADER,
                "The device's own key (`pms device key`); a barrier acts only for its own park \
                 and direction.",
            ))),
        );
    }
}

/// The public endpoints' routes (and `/openapi.json`), and their document.
fn parts() -> (Router<App>, utoipa::openapi::OpenApi) {
    use self::admin as a;
    use self::devices as d;
    use self::parks as p;
    use self::reports as r;
    pms_service::openapi::split(
        OpenApiRouter::with_openapi(ParksApi::openapi())
            .routes(routes!(p::occupancies))
            .routes(routes!(p::nearby))
            .routes(routes!(p::history))
            .routes(routes!(p::history_count))
            .routes(routes!(p::set_spot))
            .routes(routes!(p::all_parks))
            .routes(routes!(p::spots))
            .routes(routes!(p::set_thresholds))
            .routes(routes!(p::thresholds))
            .routes(routes!(p::overnight))
            .routes(routes!(p::set_overnight_enabled))
            .routes(routes!(p::set_overnight_fee))
            .routes(routes!(p::set_coin_flag))
            .routes(routes!(p::coin_flag))
            .routes(routes!(p::price_table))
            .routes(routes!(p::replace_price_table))
            .routes(routes!(p::occupancy_feed))
            .routes(routes!(p::devices))
            .routes(routes!(p::set_device_state))
            .routes(routes!(p::changes))
            .routes(routes!(a::create_park))
            .routes(routes!(a::park, a::update_park))
            .routes(routes!(a::create_spots))
            .routes(routes!(a::retire_spot))
            .routes(routes!(a::create_barrier))
            .routes(routes!(a::create_display))
            .routes(routes!(a::rotate_device_key))
            .routes(routes!(a::audit_log))
            .routes(routes!(d::entrance))
            .routes(routes!(d::exit))
            .routes(routes!(d::update_display))
            .routes(routes!(d::get_display))
            .routes(routes!(r::percentages))
            .routes(routes!(r::parking_time))
            .merge(
                pms_events::parked::SetAside {
                    service: "parks",
                    consumer: crate::store::replica::CONSUMER,
                    sources: &["payments", "users"],
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

/// The answer of an endpoint about one park when there is no such park, as its OpenAPI
/// operation lists it (`responses(NoSuchPark)`).
#[derive(utoipa::IntoResponses)]
#[response(status = 404, description = "No such park (`park_not_found`).")]
pub struct NoSuchPark(pub pms_service::openapi::ErrorBody<'static>);

/// The answer of a park manager's endpoint to anyone else, as its OpenAPI operation lists it.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 403,
    description = "Only PARK_MANAGER and SUPERVISOR (`forbidden`)."
)]
pub struct ParkManagersOnly(pub pms_service::openapi::ErrorBody<'static>);

/// `{"response": text}`, the B services' answer to a write.
pub fn response_text(text: impl Into<String>) -> axum::response::Response {
    pms_service::http::json(
        StatusCode::OK,
        &ResponseText {
            response: text.into(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_documented_with_its_credentials() {
        let doc = serde_json::to_value(openapi()).expect("document");
        let mut count = 0;
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("item") {
                count += 1;
                let at = format!("{method} {path}");
                assert!(
                    op["operationId"].is_string() && op["summary"].is_string(),
                    "{at}"
                );
                let responses = op["responses"].as_object().expect("responses");
                assert!(responses.keys().any(|s| s.starts_with('2')), "{at}");
                assert!(responses.contains_key("503"), "{at}");
                let device = path.starts_with("/barriers/") || path.starts_with("/display/");
                let open = path.starts_with("/parks/occupancy/");
                let expected = match (device, open) {
                    (true, _) => serde_json::json!([{ DEVICE_KEY: [] }]),
                    (false, true) => serde_json::Value::Null,
                    (false, false) => serde_json::json!([{ "bearer": [] }]),
                };
                assert_eq!(op["security"], expected, "{at}");
                if !open {
                    assert!(responses.contains_key("401"), "{at}");
                }
            }
        }
        assert_eq!(count, 37, "the parks endpoints");
        assert_eq!(
            doc["components"]["securitySchemes"][DEVICE_KEY]["name"],
            crate::devices::DEVICE_KEY_HEADER
        );
    }
}
