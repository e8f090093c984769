//! The users service's HTTP face: the route table (the published paths) on the service kit's
//! request-id layer and JSON error format, and the OpenAPI document made from the same
//! annotations as the routes, so the two cannot drift. Handlers are in [`handlers`]; who may
//! call what is decided there with the kit's [`mod@pms_service::caller`].

pub mod error;
pub mod handlers;

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use pms_service::http::{RequestId, X_REQUEST_ID};

use crate::App;

/// The document's fixed parts; the operations come from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "PMS users",
        description = "Registration, login, vehicles, payment methods and PARKY wallets."
    ),
    tags((name = "users", description = "Customers, staff and their PARKY coins."))
)]
struct UsersApi;

/// The public endpoints, each with its OpenAPI operation.
fn api() -> OpenApiRouter<App> {
    use handlers as h;
    OpenApiRouter::with_openapi(UsersApi::openapi())
        .routes(routes!(h::create_user))
        .routes(routes!(h::login))
        .routes(routes!(h::all_users))
        .routes(routes!(h::add_vehicle))
        .routes(routes!(h::vehicles))
        .routes(routes!(h::set_payment_method, h::payment_method))
        .routes(routes!(h::grant))
        .routes(routes!(h::set_status))
        .routes(routes!(h::close_account))
        .routes(routes!(h::audit_log))
        .routes(routes!(h::wallet))
        .routes(routes!(h::top10))
        .merge(
            pms_events::parked::SetAside {
                service: "users",
                consumer: crate::store::coins::CONSUMER,
                sources: &["payments", "parks"],
            }
            .routes(),
        )
}

/// The public endpoints' routes (and `/openapi.json`), and their document.
fn parts() -> (Router<App>, utoipa::openapi::OpenApi) {
    pms_service::openapi::split(api())
}

/// The service's OpenAPI 3.1 document: every public endpoint, with the kit's shared errors.
pub fn openapi() -> utoipa::openapi::OpenApi {
    parts().1
}

/// The route table: the public endpoints, `/openapi.json`, and health and metrics.
pub fn router(state: App) -> Router {
    pms_service::chassis::router(parts().0, state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::openapi::path::Operation;

    fn operations() -> Vec<(String, Operation)> {
        let mut doc = openapi();
        let mut all = Vec::new();
        for (path, item) in &mut doc.paths.paths {
            for op in pms_service::openapi::operations_mut(item) {
                all.push((path.clone(), op.clone()));
            }
        }
        all
    }

    #[test]
    fn every_operation_is_named_and_answers_its_errors() {
        let ops = operations();
        assert_eq!(ops.len(), 15, "the users endpoints");
        for (path, op) in ops {
            let statuses: Vec<&str> = op.responses.responses.keys().map(String::as_str).collect();
            assert!(op.operation_id.is_some() && op.summary.is_some(), "{path}");
            assert!(
                statuses.iter().any(|s| s.starts_with('2')),
                "{path}: {statuses:?}"
            );
            assert!(statuses.contains(&"503"), "{path}: {statuses:?}");
            if op.security.is_some() {
                assert!(statuses.contains(&"401"), "{path}: {statuses:?}");
            }
            if op.request_body.is_some() {
                for s in ["400", "408", "413", "415"] {
                    assert!(statuses.contains(&s), "{path}: {statuses:?}");
                }
            }
        }
    }

    #[test]
    fn the_document_is_openapi_3_1_with_the_bearer_scheme() {
        let doc = serde_json::to_value(openapi()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let scheme = &doc["components"]["securitySchemes"]["bearer"];
        assert_eq!(scheme["scheme"], "bearer");
        assert_eq!(scheme["bearerFormat"], "JWT");
        assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    }
}
