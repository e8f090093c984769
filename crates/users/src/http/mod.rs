//! The users service's HTTP face: the route table (the published paths) on the service kit's
//! request-id layer and JSON error format. Handlers are in [`handlers`]; who may call what is
//! decided there with the kit's [`mod@pms_service::caller`].

pub mod error;
pub mod handlers;

use axum::routing::{get, post, put};
use axum::Router;

pub use pms_service::http::{RequestId, X_REQUEST_ID};

use crate::App;

/// The route table.
pub fn router(state: App) -> Router {
    use handlers as h;
    let routes = Router::new()
        .route("/users/createUser", post(h::create_user))
        .route("/users/login", post(h::login))
        .route("/users/getAllUsers", get(h::all_users))
        .route("/users/vehicle/{user_id}", put(h::add_vehicle))
        .route("/users/vehicles/{user_id}", get(h::vehicles))
        .route(
            "/users/paymentMethod/{user_id}",
            put(h::set_payment_method).get(h::payment_method),
        )
        .route("/users/parkies", post(h::grant))
        .route("/users/parkies/{user_id}", get(h::wallet))
        .route("/userReport/top10Parky", get(h::top10))
        .route("/healthz", get(pms_service::http::healthz))
        .route("/readyz", get(h::readyz))
        .route("/metrics", get(h::metrics))
        .with_state(state);
    pms_service::http::finish(routes)
}
