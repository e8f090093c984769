//! `/barriers/...` and `/display/...`: the device endpoints. Each device proves it is itself
//! with its key (`X-Device-Key`, see [`crate::devices`]); a barrier acts only for its own park
//! and in its own direction. Business outcomes are `200` with `success` and the driver's message
//! (spec §3.3); bad credentials are 401, another device's park or direction 403, bad input 400.

use axum::extract::{FromRequest, Request, State};
use http::{HeaderMap, StatusCode};
use pms_service::body::read;
use pms_service::http::{json, json_object, Answer};
use pms_service::ApiError;
use pms_vocab::fields::FieldError;
use pms_vocab::lenient;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use pms_service::openapi::{ErrorBody, Instant, Plate};
use utoipa::ToSchema;

use super::TAG;
use crate::devices::DEVICE_KEY_HEADER;
use crate::metrics::PriceSource;
use crate::model::{BarrierAnswer, DeviceType, Direction, DisplayAnswer, State as DeviceState};
use crate::prices::Price;
use crate::rules::{self, Refusal};
use crate::store::visits::{Barrier, Passage};
use crate::store::StoreError;
use crate::App;

/// Longest display text.
pub const MAX_MESSAGE_CHARS: usize = 200;
/// Longest wait of a display's long poll.
pub const MAX_WAIT_MS: i64 = 30_000;

/// 401 unless the request carries device `id`'s key: the one issued to it, or else its
/// derived key ([`crate::devices`]).
async fn device(s: &App, headers: &HeaderMap, kind: DeviceType, id: i64) -> Result<(), ApiError> {
    let Some(key) = headers.get(DEVICE_KEY_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing_device_key",
            "a device key is required (X-Device-Key)",
        ));
    };
    let issued = s.store.issued_key(kind, id).await?;
    if s.devices.verify(kind, id, key, issued.as_deref()) {
        s.store.note_contact(kind, id);
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_device_key",
            "the device key does not match this device",
        ))
    }
}

/// The part of a device's request that says which device it is.
pub trait Naming: DeserializeOwned {
    /// Barrier or display.
    const KIND: DeviceType;
    /// Its id.
    fn id(&self) -> i64;
}

/// A device's request body `T`, read once the device it names (`T::Device`, its id alone, read
/// first) proved it is itself: a wrong or missing key is 401 whatever else the body holds (but
/// an id that is no id), and only then is a field that does not fit 400. Put it last among a
/// handler's extractors.
#[derive(Debug)]
pub struct DeviceBody<T>(pub T);

/// A device request's body type: what names its device within it, and the part of it flattened
/// into it (`#[serde(flatten)]`, where serde keeps no path to name a bad field by: read alone, a
/// bad field of it is named).
pub trait FromDevice: DeserializeOwned {
    /// The field that names the device.
    type Device: Naming;
    /// The flattened part.
    type Flattened: DeserializeOwned;
}

impl<T: FromDevice> FromRequest<App> for DeviceBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &App) -> Result<Self, ApiError> {
        s.shell.ready.check()?;
        let (parts, body) = req.into_parts();
        let body =
            serde_json::Value::Object(json_object(&s.shell.limits, &parts.headers, body).await?);
        let id = read::<T::Device>(&body)?.id();
        device(s, &parts.headers, T::Device::KIND, id).await?;
        let _: T::Flattened = read(&body)?;
        Ok(Self(read(&body)?))
    }
}

/// The barrier a request names: its id (its key must be in `X-Device-Key`) and, checked
/// against it when given, its park.
#[derive(Debug, Deserialize, ToSchema)]
pub struct BarrierRef {
    /// The barrier (its key must be in `X-Device-Key`).
    #[serde(rename = "barrierID", deserialize_with = "lenient::integer")]
    pub barrier_id: i64,
    /// Its park's id; when given, it must be the barrier's.
    #[serde(
        rename = "parkID",
        default,
        deserialize_with = "lenient::optional_integer"
    )]
    #[schema(required = false)]
    pub park_id: Option<i64>,
    /// Its park's number; when given, it must be the barrier's.
    #[serde(
        rename = "parkNumber",
        default,
        deserialize_with = "lenient::optional_integer"
    )]
    #[schema(required = false)]
    pub park_number: Option<i64>,
}

/// The id alone of the barrier a request names: read before its key is checked, so that only
/// an id that is no id is a 400 ahead of the 401.
#[derive(Debug, Deserialize)]
pub struct BarrierId {
    /// The barrier.
    #[serde(rename = "barrierID", deserialize_with = "lenient::integer")]
    pub barrier_id: i64,
}

impl Naming for BarrierId {
    const KIND: DeviceType = DeviceType::Barrier;
    fn id(&self) -> i64 {
        self.barrier_id
    }
}

/// The barrier `named` names, checked against its park and direction (its key is checked
/// already). `Ok(None)` for an unknown barrier (a business answer, not an error).
async fn barrier(
    s: &App,
    named: &BarrierRef,
    direction: Option<Direction>,
) -> Result<Option<Barrier>, ApiError> {
    let id = named.barrier_id;
    let barrier = match s.store.barrier(id).await {
        Ok(b) => b,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    for (field, given, expected) in [
        ("parkID", named.park_id, barrier.park_id),
        ("parkNumber", named.park_number, barrier.park_number),
    ] {
        if let Some(given) = given.filter(|given| *given != expected) {
            return Err(ApiError::forbidden(format!(
                "barrier {id} belongs to park {expected}, not {given}"
            ))
            .with_field(field));
        }
    }
    if let Some(d) = direction {
        if barrier.direction != d {
            return Err(ApiError::forbidden(format!(
                "barrier {id} is an {} barrier",
                barrier.direction.as_str().to_ascii_lowercase()
            )));
        }
    }
    Ok(Some(barrier))
}

/// What a barrier sends when its camera reads a plate.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"barrierID": 1, "parkID": 1, "plateNumber": "AA-20-CC",
    "date": "2023-11-26T09:00:00Z"}))]
pub struct PassageBody {
    /// The barrier, and its park.
    #[serde(flatten)]
    pub barrier: BarrierRef,
    /// The plate read.
    #[serde(rename = "plateNumber", deserialize_with = "lenient::string")]
    #[schema(value_type = Plate)]
    pub plate_number: String,
    /// When the car passed, by the barrier's clock. Believed when it is at most the clock
    /// tolerance ahead of the server's clock and at most the buffered-passage delay behind it, and
    /// fits the plate's history (an entrance after its last exit, an exit not before its
    /// entrance); otherwise the passage is recorded at the server's time and the car still
    /// passes. The same plate, barrier and `date` again is a retry: it answers as the first did.
    #[serde(deserialize_with = "lenient::instant")]
    #[schema(value_type = Instant)]
    pub date: jiff::Timestamp,
}

impl FromDevice for PassageBody {
    type Device = BarrierId;
    type Flattened = BarrierRef;
}

/// `POST /barriers/entrance`.
#[utoipa::path(
    post, path = "/barriers/entrance", tag = TAG, operation_id = "barrierEntrance",
    summary = "A car at an entrance barrier: let it in or say why not",
    request_body = PassageBody,
    security(("deviceKey" = [])),
    responses(
        (status = 200, description = "The barrier's answer: `success` opens it, `message` is \
            for the driver (a refusal is `success: false` with the reason).", body = BarrierAnswer,
            links(("barrierExit" = (operation_id = "barrierExit",
                description = "The car leaves the park it entered (at one of its exit barriers).",
                request_body = json!({"plateNumber": "$request.body#/plateNumber",
                    "parkID": "$response.body#/parkID", "date": "$request.body#/date"}))))),
        (status = 401, description = "No device key (`missing_device_key`), or not this \
            device's (`invalid_device_key`).", body = ErrorBody<'static>),
        (status = 403, description = "The barrier is another park's, or an exit barrier \
            (`forbidden`).", body = ErrorBody<'static>),
    )
)]
pub async fn entrance(State(s): State<App>, DeviceBody(body): DeviceBody<PassageBody>) -> Answer {
    passage(s, body, Direction::Entrance).await
}

/// `POST /barriers/exit`.
#[utoipa::path(
    post, path = "/barriers/exit", tag = TAG, operation_id = "barrierExit",
    summary = "A car at an exit barrier: let it out, with its price",
    description = "The exit prices the stay itself with the park's table in force and says the \
        price at once. A stay paid with PARKY coins waits up to the exit wait for its invoice \
        (the discount is the wallet's) and otherwise says the invoice will follow.",
    request_body = PassageBody,
    security(("deviceKey" = [])),
    responses(
        (status = 200, description = "The barrier's answer: `success` opens it, `message` is \
            for the driver (a refusal is `success: false` with the reason).", body = BarrierAnswer),
        (status = 401, description = "No device key (`missing_device_key`), or not this \
            device's (`invalid_device_key`).", body = ErrorBody<'static>),
        (status = 403, description = "The barrier is another park's, or an entrance barrier \
            (`forbidden`).", body = ErrorBody<'static>),
    )
)]
pub async fn exit(State(s): State<App>, DeviceBody(body): DeviceBody<PassageBody>) -> Answer {
    passage(s, body, Direction::Exit).await
}

async fn passage(s: App, body: PassageBody, direction: Direction) -> Answer {
    let barrier = barrier(&s, &body.barrier, Some(direction)).await?;
    let plate =
        pms_vocab::plate(&body.plate_number).map_err(|m| FieldError::new("plateNumber", m))?;
    let dir = if direction == Direction::Entrance {
        "entrance"
    } else {
        "exit"
    };
    let Some(barrier) = barrier else {
        s.metrics.passage(dir, Refusal::UnknownBarrier.reason());
        return Ok(answer(
            body.barrier.barrier_id,
            body.barrier.park_id.unwrap_or(0),
            Err(Refusal::UnknownBarrier),
        ));
    };
    let time = s.clock.take(body.date, jiff::Timestamp::now());
    s.metrics.clock_offset(barrier.id, time.offset());
    let passage = s.store.pass(&barrier, &plate, time).await?;
    s.committed_in(barrier.park_id);
    let message = match passage {
        Passage::Refused(r) => {
            s.metrics.passage(dir, r.reason());
            return Ok(answer(barrier.id, barrier.park_id, Err(r)));
        }
        Passage::Open {
            name,
            visit_id,
            price,
            repeated,
            replaced,
            coins,
            ..
        } => {
            s.metrics.passage(dir, "opened");
            if let Some(why) = replaced {
                s.metrics.time_replaced(dir, why);
                tracing::info!(
                    barrier = barrier.id,
                    said = %time.said,
                    why = why.reason(),
                    "a passage's time was not taken as the barrier said it"
                );
            }
            match direction {
                Direction::Entrance => rules::welcome(&name),
                Direction::Exit => {
                    // A quoted exit's displays have its price already; the others get it from
                    // the invoice's consumer.
                    let price = match price {
                        Some((p, d)) => {
                            if !repeated {
                                s.metrics.exit_price(PriceSource::Quoted);
                            }
                            Some((rules::shown_money(&p), rules::shown_money(&d)))
                        }
                        None => wait_for_price(&s, visit_id).await,
                    };
                    let price = price.as_ref().map(|(p, d)| (p.as_str(), d.as_str()));
                    rules::goodbye(&name, price, coins)
                }
            }
        }
    };
    Ok(answer(barrier.id, barrier.park_id, Ok(message)))
}

/// The visit's price and discount, waiting up to the configured exit wait for its invoice. The
/// price is handed over without a database read ([`crate::prices`]); the visit is read once at
/// the end of the wait, for an invoice that arrived by a way that told nobody here (a broker
/// feed that was down at the time).
async fn wait_for_price(s: &App, visit_id: i64) -> Option<Price> {
    let mut waiting = s.prices.wait(visit_id);
    let handed = tokio::time::timeout(s.exit_wait, waiting.price()).await;
    drop(waiting);
    let (price, source) = match handed {
        Ok(Some(price)) => (Some(price), PriceSource::Handed),
        _ => match s.store.visit_price(visit_id).await {
            Ok(Some((p, d))) => (
                Some((rules::shown_money(&p), rules::shown_money(&d))),
                PriceSource::Read,
            ),
            Ok(None) => (None, PriceSource::Missing),
            Err(e) => {
                tracing::debug!(error = %e, "reading a visit's price");
                (None, PriceSource::Missing)
            }
        },
    };
    s.metrics.exit_price(source);
    price
}

fn answer(
    barrier_id: i64,
    park_id: i64,
    outcome: Result<String, Refusal>,
) -> axum::response::Response {
    let (success, message) = match outcome {
        Ok(m) => (true, m),
        Err(r) => (false, r.message().to_owned()),
    };
    json(
        StatusCode::OK,
        &BarrierAnswer {
            barrier_id,
            park_id,
            success,
            message,
        },
    )
}

/// What a barrier puts on its displays.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"barrierID": 1, "parkID": 1, "message": "Welcome"}))]
pub struct DisplayMessage {
    /// The barrier, and its park.
    #[serde(flatten)]
    pub barrier: BarrierRef,
    /// The text, printable, 1 to 200 characters.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    #[serde(deserialize_with = "lenient::string")]
    pub message: String,
}

impl FromDevice for DisplayMessage {
    type Device = BarrierId;
    type Flattened = BarrierRef;
}

/// `POST /display/update` `{barrierID, parkID, parkNumber, message}`: a barrier puts a message
/// on its own displays.
#[utoipa::path(
    post, path = "/display/update", tag = TAG, operation_id = "updateDisplay",
    summary = "A barrier puts a message on its displays",
    request_body = DisplayMessage,
    security(("deviceKey" = [])),
    responses(
        (status = 200, description = "`success` when a display took it; otherwise `false` \
            with why: an unknown barrier, a switched-off barrier (which changes nothing), or no \
            display in service.", body = BarrierAnswer),
        (status = 401, description = "No device key (`missing_device_key`), or not this \
            device's (`invalid_device_key`).", body = ErrorBody<'static>),
        (status = 403, description = "The barrier is another park's (`forbidden`).",
            body = ErrorBody<'static>),
    )
)]
pub async fn update_display(
    State(s): State<App>,
    DeviceBody(body): DeviceBody<DisplayMessage>,
) -> Answer {
    let id = body.barrier.barrier_id;
    let barrier = barrier(&s, &body.barrier, None).await?;
    let message = body.message.trim().to_owned();
    if message.is_empty()
        || message.chars().count() > MAX_MESSAGE_CHARS
        || message.chars().any(char::is_control)
    {
        return Err(FieldError::new(
            "message",
            format!("must be 1 to {MAX_MESSAGE_CHARS} printable characters"),
        )
        .into());
    }
    let park_id = barrier.as_ref().map_or(0, |b| b.park_id);
    let (success, text) = match barrier {
        None => (false, "Barrier not found!".to_owned()),
        // A switched-off barrier does nothing with its key, as at its passages.
        Some(b) if b.state != DeviceState::Active => {
            (false, Refusal::BarrierDisabled.message().to_owned())
        }
        Some(b) => match s.store.show(b.id, &message).await? {
            0 => (false, "No displays found!".to_owned()),
            _ => (true, message),
        },
    };
    if success {
        s.committed_in(park_id);
    }
    Ok(json(
        StatusCode::OK,
        &BarrierAnswer {
            barrier_id: id,
            park_id,
            success,
            message: text,
        },
    ))
}

/// What `read` gives once its change version (`version`) differs from `after`, or after
/// `wait_ms` (default 25 s, at most [`MAX_WAIT_MS`]); at once when `after` is `None`. The long
/// poll of displays and of the front office's live pages.
///
/// The versions come from the database, so they are the same on every replica; `read` runs
/// again each time the bell that `bell` picks for the value rings ([`crate::bells`]).
///
/// # Errors
/// 400 naming `waitMs` when it is out of range; `read`'s errors.
pub async fn wait_for_change<T, Read>(
    s: &App,
    after: Option<i64>,
    wait_ms: Option<i64>,
    version: impl Fn(&T) -> u64,
    bell: impl FnOnce(&T) -> tokio::sync::watch::Receiver<()>,
    mut read: impl FnMut() -> Read,
) -> Result<T, ApiError>
where
    Read: std::future::Future<Output = Result<T, StoreError>>,
{
    let wait = wait_ms.unwrap_or(25_000);
    if !(0..=MAX_WAIT_MS).contains(&wait) {
        return Err(FieldError::new("waitMs", format!("must be 0 to {MAX_WAIT_MS}")).into());
    }
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_millis(wait.unsigned_abs());
    let mut read = || {
        s.metrics.long_poll_read();
        read()
    };
    // Subscribed before the first read, so a change committed after it is not missed while
    // the value's own bell is chosen.
    let any = s.bells.any();
    let mut value = read().await?;
    let Some(after) = after else {
        return Ok(value);
    };
    let mut rung = bell(&value);
    if any.has_changed().unwrap_or(true) {
        value = read().await?;
    }
    drop(any);
    while i64::try_from(version(&value)).ok() == Some(after) {
        match tokio::time::timeout_at(deadline, rung.changed()).await {
            Ok(Ok(())) => value = read().await?,
            // The wait is over (or the service is going away): the version is as it was.
            Ok(Err(_)) | Err(_) => break,
        }
    }
    Ok(value)
}

/// What a display asks.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"displayID": 1}))]
pub struct DisplayRequest {
    /// The display.
    #[serde(flatten)]
    pub display: DisplayRef,
    /// A previous answer's `version`: answer once something may have changed.
    #[serde(
        rename = "waitForChangeAfter",
        default,
        deserialize_with = "lenient::optional_integer"
    )]
    #[schema(required = false)]
    pub wait_for_change_after: Option<i64>,
    /// Longest wait, ms (default 25000).
    #[serde(
        rename = "waitMs",
        default,
        deserialize_with = "lenient::optional_integer"
    )]
    #[schema(required = false, minimum = 0, maximum = 30000)]
    pub wait_ms: Option<i64>,
}

/// The display a display's request names.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DisplayRef {
    /// The display (its key must be in `X-Device-Key`).
    #[serde(rename = "displayID", deserialize_with = "lenient::integer")]
    pub display_id: i64,
}

impl Naming for DisplayRef {
    const KIND: DeviceType = DeviceType::Display;
    fn id(&self) -> i64 {
        self.display_id
    }
}

impl FromDevice for DisplayRequest {
    type Device = DisplayRef;
    type Flattened = DisplayRef;
}

/// `POST /display/get` `{displayID}`: the display's text and its park's free spots. With
/// `"waitForChangeAfter": version` (from a previous answer's `version`) it answers when
/// something may have changed, or after `waitMs` (default 25 s, at most 30 s): a long poll, so a
/// display shows an entrance or exit as it happens instead of polling every 10 s.
#[utoipa::path(
    post, path = "/display/get", tag = TAG, operation_id = "getDisplay",
    summary = "What a display shows, and its park's free spots (a long poll with a version)",
    request_body = DisplayRequest,
    security(("deviceKey" = [])),
    responses(
        (status = 200, description = "Its text, the free spots and the change counter.",
            body = DisplayAnswer),
        (status = 401, description = "No device key (`missing_device_key`), or not this \
            device's (`invalid_device_key`).", body = ErrorBody<'static>),
        (status = 404, description = "No such display (`display_not_found`).",
            body = ErrorBody<'static>),
    )
)]
pub async fn get_display(
    State(s): State<App>,
    DeviceBody(body): DeviceBody<DisplayRequest>,
) -> Answer {
    let id = body.display.display_id;
    let display = wait_for_change(
        &s,
        body.wait_for_change_after,
        body.wait_ms,
        |d: &crate::store::displays::Display| d.version,
        |d| s.bells.park(d.park_id),
        || s.store.display(id),
    )
    .await?;
    Ok(json(
        StatusCode::OK,
        &DisplayAnswer {
            view: display.view,
            version: display.version,
            state: display.state,
        },
    ))
}
