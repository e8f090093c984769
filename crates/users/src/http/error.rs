//! How the users store's failures reach the client: [`StoreError`] mapped to the kit's
//! [`ApiError`] (the one JSON error format, rendered by the kit's request-id layer).

pub use pms_service::ApiError;

use http::StatusCode;

use crate::store::StoreError;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let (status, code, field) = match &e {
            StoreError::Unavailable(_) => return ApiError::unavailable(e),
            StoreError::Conflict { field } => {
                (StatusCode::CONFLICT, "already_registered", Some(*field))
            }
            StoreError::AccountClosed(_) => (StatusCode::GONE, "account_closed", None),
            StoreError::UserNotFound(_) | StoreError::UsersNotFound(_) => {
                (StatusCode::NOT_FOUND, "user_not_found", None)
            }
            // A conflict with the account's state (its three vehicles), not a bad request: the
            // same body succeeds for an account with fewer.
            StoreError::TooManyVehicles => {
                (StatusCode::CONFLICT, "too_many_vehicles", Some("vehicles"))
            }
            StoreError::InsufficientBalance(_) => {
                (StatusCode::CONFLICT, "insufficient_balance", Some("amount"))
            }
            StoreError::NotACustomer(_) => (StatusCode::CONFLICT, "not_a_customer", None),
            StoreError::UnknownInvitation(_) => (
                StatusCode::BAD_REQUEST,
                "invalid_field",
                Some("invitationCode"),
            ),
            StoreError::IdempotencyKeyReused => return pms_service::idempotency::reused(),
            StoreError::BadUrl(_) | StoreError::Internal(_) => return ApiError::internal(e),
        };
        let error = ApiError::new(status, code, e.to_string());
        match field {
            Some(f) => error.with_field(f),
            None => error,
        }
    }
}
