//! One function per endpoint. Who may call it is in its signature (a kit [`Caller`] or
//! [`Allowed`] parameter: verified before the body runs); the body parses the input, applies an
//! ownership rule where there is one, calls the store and shapes the answer. Rules (spec §5.3
//! plus what the original forgot):
//!
//! | endpoint | who |
//! |---|---|
//! | `createUser`, `login` | anyone |
//! | `getAllUsers` | SUPERVISOR, CUSTOMER_MANAGER |
//! | vehicles and payment method | the CUSTOMER themself |
//! | `POST parkies` | CUSTOMER_MANAGER (the token's user becomes the event's manager) |
//! | `GET parkies/{id}` | the user themself, SUPERVISOR, CUSTOMER_MANAGER |
//! | `closeAccount` | the CUSTOMER themself, with their password |
//! | `top10Parky` | any authenticated user |

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use http::request::Parts;
use http::{HeaderMap, StatusCode};

use pms_service::body::JsonBody;
use pms_service::http::{json, json_bytes, json_object, Answer};
use pms_service::openapi::ErrorBody;
use pms_service::{idempotency, Allowed, ApiError, Caller, CustomerManagers};
use serde_json::Value;

use crate::model::{
    Closure, ClosureRequest, PaymentMethodBody, Role, Session, StatusSet, TopParky, UserDto,
    UserStatus, Vehicle, Wallet,
};
use crate::password::{PasswordError, BUSY_RETRY_AFTER_S};
use crate::store::users::{Granted, LoginRecord, Page, GRANTED};
use crate::throttle;
use crate::validate::{self, Credentials, Grant, NewUser, PaymentChange, StatusChange};
use crate::App;

/// The OpenAPI tag of every users endpoint.
pub const TAG: &str = "users";

/// Most users one `getAllUsers` page may ask for.
pub const MAX_PAGE: i64 = 1000;

/// `POST /users/createUser`: self-service registration; always a CUSTOMER.
#[utoipa::path(
    post, path = "/users/createUser", tag = TAG, operation_id = "createUser",
    summary = "Register as a customer",
    request_body = NewUser,
    responses(
        (status = 201, description = "Registered; the user as stored.", body = UserDto,
            links(
                ("getWallet" = (operation_id = "getWallet",
                    parameters(("userId" = "$response.body#/id")))),
                ("login" = (operation_id = "login", description = "The new customer logs in.",
                    request_body = json!({"email": "$request.body#/email",
                        "password": "$request.body#/password"}))),
                ("grantParkies" = (operation_id = "grantParkies",
                    description = "A customer manager welcomes the new customer with coins.",
                    request_body = json!({"userIds": ["$response.body#/id"], "amount": 10,
                        "reason": "welcome"}))),
                ("closeAccount" = (operation_id = "closeAccount",
                    description = "The new customer closes the account again.",
                    parameters(("userId" = "$response.body#/id")),
                    request_body = json!({"password": "$request.body#/password"}))),
            )),
        (status = 409, description = "The e-mail, tax number or plate is registered already \
            (`already_registered`, naming it in `field`).", body = ErrorBody<'static>),
        (status = 503, description = "Too many sign-ups and logins at once (`busy`): the \
            service sheds them rather than queue them; `Retry-After` says when to try again.",
            body = ErrorBody<'static>,
            headers(("retry-after" = u64, description = "Seconds to wait."))),
    )
)]
pub async fn create_user(State(s): State<App>, JsonBody(body): JsonBody<Value>) -> Answer {
    s.shell.ready.check()?;
    let new = validate::new_user(body)?;
    let hash = s
        .passwords
        .hash(new.password.clone())
        .await
        .map_err(password_error)?;
    let user = s.store.create_user(&new, &hash, Role::Customer).await?;
    s.outbox.committed();
    tracing::info!(user = user.id, "user registered");
    Ok(json(StatusCode::CREATED, &user))
}

/// `POST /users/login`: `{token, name}`. An unknown e-mail and a wrong password get the same
/// answer after the same amount of hashing work. Repeated failures for one address hold it
/// (`throttle`): an attempt while it is held gets 429 with `Retry-After`, known address or not.
#[utoipa::path(
    post, path = "/users/login", tag = TAG, operation_id = "login",
    summary = "Log in for a bearer token",
    request_body = Credentials,
    responses(
        (status = 200, description = "A token for the other endpoints.", body = Session, links(
            ("getVehicles" = (operation_id = "getVehicles",
                parameters(("userId" = "$response.body#/id")))),
            ("addVehicle" = (operation_id = "addVehicle",
                parameters(("userId" = "$response.body#/id")))),
            ("getPaymentMethod" = (operation_id = "getPaymentMethod",
                parameters(("userId" = "$response.body#/id")))),
            ("setPaymentMethod" = (operation_id = "setPaymentMethod",
                parameters(("userId" = "$response.body#/id")))),
            ("getWallet" = (operation_id = "getWallet",
                parameters(("userId" = "$response.body#/id")))),
            ("closeAccount" = (operation_id = "closeAccount",
                description = "The customer closes their account, confirming with the password.",
                parameters(("userId" = "$response.body#/id")),
                request_body = json!({"password": "$request.body#/password"}))),
        )),
        (status = 401, description = "Wrong e-mail or password (`invalid_credentials`).",
            body = ErrorBody<'static>),
        (status = 403, description = "The account is disabled or blocked (`forbidden`).",
            body = ErrorBody<'static>),
        (status = 429, description = "Too many failed logins for this address, or over the \
            gateway's rate limit; `Retry-After` says when to try again.", body = ErrorBody<'static>,
            headers(("retry-after" = u64, description = "Seconds to wait."))),
        (status = 503, description = "Too many sign-ups and logins at once (`busy`): the \
            service sheds them rather than queue them; `Retry-After` says when to try again.",
            body = ErrorBody<'static>,
            headers(("retry-after" = u64, description = "Seconds to wait."))),
    )
)]
pub async fn login(State(s): State<App>, JsonBody(creds): JsonBody<Credentials>) -> Answer {
    s.shell.ready.check()?;
    let creds = validate::credentials(creds);
    let Some(record) = password_checked(&s, &creds.email, creds.password).await? else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_credentials",
            "wrong e-mail or password",
        ));
    };
    if record.status != UserStatus::Enabled {
        let status = record.status.as_str().to_ascii_lowercase();
        return Err(ApiError::forbidden(match record.status_reason {
            Some(why) => format!("this account is {status}: {why}"),
            None => format!("this account is {status}"),
        }));
    }
    let token = s
        .signer
        .issue(&record.id.to_string(), record.role.as_str())
        .map_err(internal)?;
    Ok(json(
        StatusCode::OK,
        &Session {
            token,
            name: record.first_name,
            id: record.id,
            role: record.role,
        },
    ))
}

/// The account with `email` when `password` is its own, as a login checks it: an address held
/// after failed attempts is 429 without the password being looked at; a mismatch (or no such
/// account, after the same hashing work) counts towards the address's hold and is `None`; a
/// match clears the address's failures.
///
/// # Errors
/// 429 while the address is held; 503 `busy` when as many passwords are being checked as the
/// service takes; database failures.
async fn password_checked(
    s: &App,
    email: &str,
    password: String,
) -> Result<Option<LoginRecord>, ApiError> {
    let attempt = s.store.login_record(email).await?;
    let now = now_ms();
    if let Some(left) = throttle::seconds_left(now, attempt.held_until_ms) {
        return Err(held(left));
    }
    let ok = s
        .passwords
        .verify(
            password,
            attempt.account.as_ref().map(|r| r.password_hash.clone()),
        )
        .await
        .map_err(password_error)?;
    match attempt.account {
        Some(record) if ok => {
            if attempt.failures > 0 {
                s.store.login_succeeded(email).await?;
            }
            Ok(Some(record))
        }
        _ => {
            let (failures, until) = s.store.login_failed(email, now).await?;
            if let Some(left) = throttle::seconds_left(now, until) {
                tracing::warn!(
                    failures,
                    hold_s = left,
                    "failed logins in a row: the address is held"
                );
            }
            Ok(None)
        }
    }
}

/// The answer to a login for an address being held.
fn held(seconds: u64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_attempts",
        format!("too many failed logins for this address; try again in {seconds} s"),
    )
    .with_retry_after(seconds)
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `GET /users/getAllUsers[?limit=N&offset=M]`: every user (or one page), in id order,
/// serialized as the rows stream in.
#[utoipa::path(
    get, path = "/users/getAllUsers", tag = TAG, operation_id = "getAllUsers",
    summary = "List users (staff)",
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000,
            description = "Most users to list; all when absent."),
        ("offset" = Option<i64>, Query, minimum = 0, description = "Users to skip first."),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Users in id order.", body = Vec<UserDto>,
            links(("getWallet" = (operation_id = "getWallet",
                parameters(("userId" = "$response.body#/0/id")))),
                ("setUserStatus" = (operation_id = "setUserStatus",
                    description = "Enable a listed account (a customer's; staff's are 409).",
                    parameters(("userId" = "$response.body#/0/id")),
                    request_body = json!({"status": "ENABLED", "reason": "Checked"}))))),
        (status = 403, description = "Only SUPERVISOR and CUSTOMER_MANAGER may list users \
            (`forbidden`).", body = ErrorBody<'static>),
    )
)]
pub async fn all_users(
    State(s): State<App>,
    _: Allowed<CustomerManagers>,
    RawQuery(q): RawQuery,
) -> Answer {
    let page = page(q.as_deref())?;
    let mut out = Vec::with_capacity(4096);
    out.push(b'[');
    let mut failed = None;
    s.store
        .for_each_user(page, |u| {
            if out.len() > 1 {
                out.push(b',');
            }
            if let Err(e) = serde_json::to_writer(&mut out, &u) {
                failed.get_or_insert(e);
            }
        })
        .await?;
    if let Some(e) = failed {
        return Err(internal(e));
    }
    out.push(b']');
    Ok(json_bytes(StatusCode::OK, out))
}

/// `PUT /users/vehicle/{userId}`: adds a vehicle; answers 202 with the vehicle as stored.
#[utoipa::path(
    put, path = "/users/vehicle/{userId}", tag = TAG, operation_id = "addVehicle",
    summary = "Add a vehicle to the caller's account",
    request_body = Vehicle,
    params(("userId" = i64, Path, minimum = 1, description = "The caller's own user id.")),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Added; the vehicle as stored.", body = Vehicle,
            links(("getVehicles" = (operation_id = "getVehicles",
                parameters(("userId" = "$request.path.userId")))))),
        NotOwnData,
        NoSuchUser,
        (status = 409, description = "The plate is registered already (`already_registered`), \
            or the account has three vehicles already (`too_many_vehicles`).",
            body = ErrorBody<'static>),
    )
)]
pub async fn add_vehicle(
    State(s): State<App>,
    OwnCustomerData(user_id): OwnCustomerData,
    JsonBody(vehicle): JsonBody<Vehicle>,
) -> Answer {
    let vehicle = validate::vehicle(vehicle)?;
    s.store.add_vehicle(user_id, &vehicle).await?;
    s.outbox.committed();
    Ok(json(StatusCode::ACCEPTED, &vehicle))
}

/// `GET /users/vehicles/{userId}`: the caller's vehicles.
#[utoipa::path(
    get, path = "/users/vehicles/{userId}", tag = TAG, operation_id = "getVehicles",
    summary = "The caller's vehicles",
    params(("userId" = i64, Path, minimum = 1, description = "The caller's own user id.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "In the order they were added.", body = Vec<Vehicle>),
        NotOwnData,
        NoSuchUser,
    )
)]
pub async fn vehicles(State(s): State<App>, OwnCustomerData(user_id): OwnCustomerData) -> Answer {
    let list = s
        .store
        .vehicles(user_id)
        .await?
        .ok_or_else(|| not_found(user_id))?;
    Ok(json(StatusCode::OK, &list))
}

/// `PUT /users/paymentMethod/{userId}`: changes the caller's payment method (202).
#[utoipa::path(
    put, path = "/users/paymentMethod/{userId}", tag = TAG, operation_id = "setPaymentMethod",
    summary = "Change the caller's payment method",
    request_body = PaymentChange,
    params(("userId" = i64, Path, minimum = 1, description = "The caller's own user id.")),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Changed.", body = PaymentMethodBody,
            links(("getPaymentMethod" = (operation_id = "getPaymentMethod",
                parameters(("userId" = "$request.path.userId")))))),
        NotOwnData,
        NoSuchUser,
    )
)]
pub async fn set_payment_method(
    State(s): State<App>,
    OwnCustomerData(user_id): OwnCustomerData,
    JsonBody(change): JsonBody<PaymentChange>,
) -> Answer {
    let method = validate::payment_change(change)?.payment_method;
    s.store.set_payment_method(user_id, method).await?;
    s.outbox.committed();
    Ok(json(
        StatusCode::ACCEPTED,
        &PaymentMethodBody {
            payment_method: method,
        },
    ))
}

/// `GET /users/paymentMethod/{userId}`: the caller's payment method.
#[utoipa::path(
    get, path = "/users/paymentMethod/{userId}", tag = TAG, operation_id = "getPaymentMethod",
    summary = "The caller's payment method",
    params(("userId" = i64, Path, minimum = 1, description = "The caller's own user id.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The method.", body = PaymentMethodBody),
        NotOwnData,
        NoSuchUser,
    )
)]
pub async fn payment_method(
    State(s): State<App>,
    OwnCustomerData(user_id): OwnCustomerData,
) -> Answer {
    let method = s
        .store
        .payment_method(user_id)
        .await?
        .ok_or_else(|| not_found(user_id))?;
    Ok(json(
        StatusCode::OK,
        &PaymentMethodBody {
            payment_method: method,
        },
    ))
}

/// `POST /users/parkies`: grants or deducts coins to several users at once, all or nothing.
#[utoipa::path(
    post, path = "/users/parkies", tag = TAG, operation_id = "grantParkies",
    summary = "Grant or deduct PARKY coins (customer managers)",
    request_body = Grant,
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
        pattern = r"^[!-~]([ -~]*[!-~])?$",
        description = "Makes the grant once: the same key with the same body again gets the \
            first answer and grants nothing more; the same key with another body is 422. \
            Visible ASCII; kept for a day, per manager.")),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Granted to every user named.", body = bool,
            content_type = "application/json",
            links(("getWallet" = (operation_id = "getWallet",
                parameters(("userId" = "$request.body#/userIds/0")))))),
        (status = 403, description = "Only a CUSTOMER_MANAGER grants coins (`forbidden`).",
            body = ErrorBody<'static>),
        (status = 404, description = "A user named does not exist (`user_not_found`); nobody \
            got anything.", body = ErrorBody<'static>),
        (status = 409, description = "A deduction would take a balance below zero \
            (`insufficient_balance`); nobody lost anything.", body = ErrorBody<'static>),
        (status = 422, description = "The Idempotency-Key was used before with another body \
            (`idempotency_key_reused`); nothing granted.", body = ErrorBody<'static>),
    )
)]
pub async fn grant(State(s): State<App>, who: Caller, headers: HeaderMap, body: Body) -> Answer {
    who.require(&[Role::CustomerManager])?;
    let body = json_object(&s.shell.limits, &headers, body).await?;
    // The body as sent is the idempotency key's fingerprint; the grant is read from it.
    let grant = validate::grant(pms_service::body::read(&Value::Object(body.clone()))?)?;
    let once = idempotency::from_request(&headers, &body)?;
    match s.store.grant(&grant, who.id, once.as_ref()).await? {
        Granted::Now => {
            tracing::info!(
                manager = who.id,
                users = grant.user_ids.len(),
                amount = grant.amount,
                "parkies granted"
            );
            Ok(json(GRANTED.0, &true))
        }
        Granted::Before { status, body } => {
            tracing::info!(manager = who.id, "a grant sent again: answered as before");
            Ok(json_bytes(
                StatusCode::from_u16(status).map_err(ApiError::internal)?,
                body.into_bytes(),
            ))
        }
    }
}

/// Who changes a customer's standing: customer managers alone (supervisors read), checked before
/// a body is read.
pub struct CustomerManagersAlone;

impl pms_service::Roles for CustomerManagersAlone {
    const ALLOWED: &'static [Role] = &[Role::CustomerManager];
}

/// `PUT /users/{userId}/status` `{status, reason}`: a customer manager blocks a customer's
/// account, with why, or enables it again.
#[utoipa::path(
    put, path = "/users/{userId}/status", tag = TAG, operation_id = "setUserStatus",
    summary = "Block a customer, with why, or enable them again (customer managers)",
    description = "A blocked customer cannot sign in (the refusal says why) and their cars are \
        refused at park entrances; a car already inside can always leave.",
    params(("userId" = i64, Path, minimum = 1, description = "The customer.")),
    request_body = StatusChange,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The status now, and whether this changed it.",
            body = StatusSet),
        (status = 403, description = "Only a CUSTOMER_MANAGER sets a status (`forbidden`).",
            body = ErrorBody<'static>),
        NoSuchUser,
        (status = 409, description = "Not a customer's account (`not_a_customer`).",
            body = ErrorBody<'static>),
    )
)]
pub async fn set_status(
    State(s): State<App>,
    who: Allowed<CustomerManagersAlone>,
    Path(user_id): Path<String>,
    JsonBody(change): JsonBody<StatusChange>,
) -> Answer {
    let user_id = validate::user_id_param(&user_id)?;
    let change = validate::status_change(change)?;
    let changed = s
        .store
        .set_status(user_id, change.status, &change.reason, who.id)
        .await?;
    if changed {
        s.outbox.committed();
        tracing::info!(user = user_id, manager = who.id, status = %change.status, "status set");
    }
    Ok(json(
        StatusCode::OK,
        &StatusSet {
            user_id,
            status: change.status,
            reason: change.reason,
            changed,
        },
    ))
}

/// `POST /users/{userId}/closure` `{password}`: a customer closes their own account. The
/// password is checked as a login's is (a wrong one counts towards the address's hold), then
/// the account's personal data is erased here and `customer.closed` sent to the services that
/// keep copies ([`crate::store::closure`]); the answer says what was erased and what was kept.
#[utoipa::path(
    post, path = "/users/{userId}/closure", tag = TAG, operation_id = "closeAccount",
    summary = "Close the caller's own account, erasing their personal data",
    description = "Erases the customer's name, e-mail address, tax number, password, vehicles \
        and wallet here, and in the parks and payments services' copies as they read the \
        closure; invoices are kept as tax law requires. A car still in a park can leave. The \
        number is never given to another account; signing up again makes a new account.",
    params(("userId" = i64, Path, minimum = 1, description = "The caller's own user id.")),
    request_body = ClosureRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Closed; what was erased and what was kept, and why.",
            body = Closure),
        (status = 403, description = "Not the caller's own account, or the caller is not a \
            CUSTOMER (`forbidden`); or the password is wrong (`wrong_password`).",
            body = ErrorBody<'static>),
        NoSuchUser,
        (status = 410, description = "The account is closed already (`account_closed`).",
            body = ErrorBody<'static>),
        (status = 429, description = "Too many wrong passwords for this account's address; \
            `Retry-After` says when to try again.", body = ErrorBody<'static>,
            headers(("retry-after" = u64, description = "Seconds to wait."))),
    )
)]
pub async fn close_account(
    State(s): State<App>,
    OwnCustomerData(user_id): OwnCustomerData,
    JsonBody(request): JsonBody<ClosureRequest>,
) -> Answer {
    let email = s.store.email_of(user_id).await?;
    if password_checked(&s, &email, request.password)
        .await?
        .is_none()
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "wrong_password",
            "the password is not this account's: the account stays open",
        )
        .with_field("password"));
    }
    let closed = s.store.close_account(user_id).await?;
    s.outbox.committed();
    tracing::info!(user = user_id, "account closed by its customer");
    let closed_at = jiff::Timestamp::from_microsecond(closed.closed_at_us)
        .map_err(internal)?
        .to_string();
    Ok(json(
        StatusCode::OK,
        &Closure::told(user_id, closed_at, closed.coins_forfeited),
    ))
}

/// `GET /users/parkies/{userId}`: a wallet, for its owner or staff who manage customers.
#[utoipa::path(
    get, path = "/users/parkies/{userId}", tag = TAG, operation_id = "getWallet",
    summary = "A PARKY wallet: balance and history",
    params(("userId" = i64, Path, minimum = 1, description = "Whose wallet.")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Balance and every grant and deduction.", body = Wallet),
        (status = 403, description = "Neither the owner nor SUPERVISOR or CUSTOMER_MANAGER \
            (`forbidden`).", body = ErrorBody<'static>),
        NoSuchUser,
    )
)]
pub async fn wallet(State(s): State<App>, who: Caller, Path(user_id): Path<String>) -> Answer {
    let user_id = validate::user_id_param(&user_id)?;
    if who.id != user_id {
        who.require(&[Role::Supervisor, Role::CustomerManager])
            .map_err(|_| ApiError::forbidden("a wallet is readable by its owner and by staff"))?;
    }
    let wallet = s
        .store
        .wallet(user_id)
        .await?
        .ok_or_else(|| not_found(user_id))?;
    Ok(json(StatusCode::OK, &wallet))
}

/// `GET /userReport/top10Parky`: the ten customers with the most coins.
#[utoipa::path(
    get, path = "/userReport/top10Parky", tag = TAG, operation_id = "top10Parky",
    summary = "The ten customers with the most coins",
    security(("bearer" = [])),
    responses((status = 200, description = "Most coins first.", body = Vec<TopParky>))
)]
pub async fn top10(State(s): State<App>, _: Caller) -> Answer {
    Ok(json(StatusCode::OK, &s.store.top10().await?))
}

/// The answer of an endpoint about one user when there is no such user, as its OpenAPI
/// operation lists it (`responses(NoSuchUser)`).
#[derive(utoipa::IntoResponses)]
#[response(status = 404, description = "No such user (`user_not_found`).")]
pub struct NoSuchUser(pub ErrorBody<'static>);

/// The answer of an endpoint for a customer's own data ([`OwnCustomerData`]) to anyone else,
/// as its OpenAPI operation lists it.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 403,
    description = "Not the caller's own data, or the caller is not a CUSTOMER (`forbidden`)."
)]
pub struct NotOwnData(pub ErrorBody<'static>);

/// The caller's own user id, for the endpoints of a customer's own data: a valid `{userId}` in
/// the path, and the caller is that CUSTOMER. Checked before a body is read.
#[derive(Debug, Clone, Copy)]
pub struct OwnCustomerData(pub i64);

impl FromRequestParts<App> for OwnCustomerData {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &App) -> Result<Self, ApiError> {
        let who = Caller::from_request_parts(parts, s).await?;
        let Path(text) = Path::<String>::from_request_parts(parts, s)
            .await
            .map_err(|e| pms_vocab::FieldError::new("userId", e.body_text()))?;
        let user_id = validate::user_id_param(&text)?;
        who.require_self(user_id, &[Role::Customer])?;
        Ok(Self(user_id))
    }
}

/// `limit`/`offset` from the query string; without them, everything. Each at most once: which
/// of two would count is a guess the caller should not have to make.
fn page(query: Option<&str>) -> Result<Page, ApiError> {
    use pms_vocab::fields::query_int;
    let [limit, offset] = pms_vocab::fields::query(query, ["limit", "offset"])?;
    Ok(Page {
        limit: query_int("limit", limit.as_deref(), 1..=MAX_PAGE)?,
        offset: query_int("offset", offset.as_deref(), 0..=i64::MAX)?.unwrap_or(0),
    })
}

fn not_found(user_id: i64) -> ApiError {
    crate::store::StoreError::UserNotFound(user_id).into()
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(e)
}

/// 503 `busy` with `Retry-After` when as many passwords are being checked as the service takes
/// at once (it sheds the rest rather than queueing them without bound); 500 otherwise.
fn password_error(e: PasswordError) -> ApiError {
    match e {
        PasswordError::Busy => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "too many sign-ups and logins at once; try again shortly",
        )
        .with_retry_after(BUSY_RETRY_AFTER_S),
        e => internal(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_parse_and_bound() {
        assert_eq!(page(None).unwrap(), Page::ALL);
        assert_eq!(
            page(Some("limit=2&offset=4&x=y")).unwrap(),
            Page {
                limit: Some(2),
                offset: 4
            }
        );
        let bad = [
            "limit=0",
            "limit=1001",
            "offset=-1",
            "limit=x",
            "limit=",
            "limit=1&limit=2",
            "offset=1&x=y&offset=1",
        ];
        for bad in bad {
            let e = page(Some(bad)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(e.field.is_some(), "{bad}");
        }
    }

    #[test]
    fn shed_hashing_is_a_503_with_retry_after() {
        let busy = password_error(PasswordError::Busy);
        assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.code, "busy");
        assert_eq!(busy.retry_after_s, Some(BUSY_RETRY_AFTER_S));
        let broken = password_error(PasswordError::Hash("x".into()));
        assert_eq!(broken.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
}

/// `GET /users/audit`: the users service's audit trail (supervisors).
#[utoipa::path(
    get, path = "/users/audit", tag = TAG, operation_id = "getUsersAuditLog",
    summary = "The users service's audit trail (supervisors)",
    description = "Every staff action on accounts, newest first: customers blocked and enabled, \
        coins granted and deducted; who, when, and the account before and after.",
    params(pms_service::audit::Query),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The entries, as JSON or (`format=csv`) CSV.", content(
            (Vec<pms_service::audit::Record> = "application/json"),
            (String = "text/csv"),
        )),
        (status = 400, description = "A filter does not parse (`invalid_field`).",
            body = ErrorBody<'static>),
        (status = 403, description = "Only SUPERVISOR (`forbidden`).", body = ErrorBody<'static>),
    )
)]
pub async fn audit_log(
    State(s): State<App>,
    _: Allowed<pms_service::Supervisors>,
    RawQuery(query): RawQuery,
) -> Answer {
    pms_service::audit::answer(s.store.db(), query.as_deref()).await
}
