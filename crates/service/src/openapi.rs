//! What every service's OpenAPI document shares, so that a handler's `#[utoipa::path]` names
//! only what is its own (its body, its answer, its domain errors): the JSON error body, the
//! bearer-token scheme, and the error answers the kit gives on any route — a body it cannot
//! read, a token it cannot verify, a database that is away. [`Conventions`] adds them to every
//! operation, so they are written once and cannot be forgotten on one route.

use axum::routing::{get, MethodRouter};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use serde::Serialize;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{
    KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, ContentBuilder, OpenApi, Ref, RefOr};
use utoipa::{Modify, PartialSchema, ToSchema};

/// Name of the bearer-token security scheme (`security(("bearer" = []))` on a path).
pub const BEARER: &str = "bearer";

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"error": {
    "code": "invalid_field",
    "message": "password: must be 11 to 128 characters",
    "request_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "field": "password"
}}))]
pub struct ErrorBody<'a> {
    /// What went wrong.
    pub error: ErrorDetail<'a>,
}

/// What went wrong, in an `ErrorBody`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail<'a> {
    /// Stable machine-readable code (`invalid_field`, `missing_token`, `forbidden`, …).
    pub code: &'a str,
    /// Human-readable explanation.
    pub message: &'a str,
    /// The request's id, as in the `x-request-id` answer header and the logs.
    pub request_id: &'a str,
    /// The input at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'a str>,
}

/// A vehicle's plate as the API takes it (`#[schema(value_type = Plate)]`, or as a parameter's
/// type): one of the four Portuguese shapes, any case, with dashes ([`pms_vocab::plate`]).
#[derive(Debug, Clone, Copy)]
pub struct Plate;

impl PartialSchema for Plate {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pms_vocab::PLATE_PATTERN))
            .description(Some(
                "Portuguese plate: AA-00-00, 00-AA-00, 00-00-AA or AA-00-AA.",
            ))
            .examples([serde_json::json!("AA-20-CC")])
            .into()
    }
}

impl ToSchema for Plate {}

/// The epoch milliseconds [`pms_vocab::fields::instant`] takes, as the document states them.
pub fn instant_range() -> (i64, i64) {
    use pms_vocab::fields::{END_INSTANT_MS, FIRST_INSTANT_MS};
    (FIRST_INSTANT_MS, END_INSTANT_MS - 1)
}

/// An instant as the API takes it ([`pms_vocab::fields::instant`]): RFC 3339 with an offset, or
/// epoch milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Instant;

impl PartialSchema for Instant {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(instant_range().0))
                    .maximum(Some(instant_range().1))
                    .description(Some("Epoch milliseconds.")),
            )
            .description(Some(
                "RFC 3339 with an offset (`2023-11-26T12:34:56.789Z`), or epoch milliseconds; \
                 from 1970-01-01T00:00:00Z up to, not including, 3000-01-01T00:00:00Z.",
            ))
            .into()
    }
}

impl ToSchema for Instant {}

/// A service's public endpoints as plain routes, with `GET /openapi.json` serving their
/// document, and the document itself, with the kit's [`Conventions`] applied.
pub fn split<S: Clone + Send + Sync + 'static>(
    api: utoipa_axum::router::OpenApiRouter<S>,
) -> (axum::Router<S>, OpenApi) {
    let (routes, mut doc) = api.split_for_parts();
    Conventions.modify(&mut doc);
    let routes = routes.route("/openapi.json", document_route(&doc));
    (routes, doc)
}

/// The route that answers `GET /openapi.json` with `doc`.
fn document_route<S: Clone + Send + Sync + 'static>(doc: &OpenApi) -> MethodRouter<S> {
    let json = Bytes::from(doc.to_json().unwrap_or_default());
    get(move || async move { ([(CONTENT_TYPE, "application/json")], json) })
}

/// Adds the kit's shared parts to a service's document: the [`ErrorBody`] schema, the bearer
/// scheme, and on every operation the errors the kit answers — 400/408/413/415 where there is
/// a JSON body, 400 where there are path or query parameters, 401 where a token is required,
/// and 500/503 everywhere. A status the handler documents itself is left as it wrote it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Conventions;

impl Modify for Conventions {
    fn modify(&self, api: &mut OpenApi) {
        let mut components = api
            .components
            .take()
            .unwrap_or_else(|| ComponentsBuilder::new().build());
        components
            .schemas
            .insert(ErrorBody::name().into_owned(), ErrorBody::schema());
        components
            .schemas
            .insert(ErrorDetail::name().into_owned(), ErrorDetail::schema());
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A token from `POST /users/login`, sent as `Authorization: Bearer …`.",
                    ))
                    .build(),
            ),
        );
        api.components = Some(components);
        for item in api.paths.paths.values_mut() {
            for op in operations_mut(item) {
                add_kit_errors(op);
            }
        }
    }
}

/// Every operation of a path item.
pub fn operations_mut(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
        item.head.as_mut(),
        item.options.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// An error answer with an [`ErrorBody`] and `description`.
pub fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// Puts `description` under `status` unless the operation documents that status already.
pub fn add_error(op: &mut Operation, status: u16, description: &str) {
    op.responses
        .responses
        .entry(status.to_string())
        .or_insert_with(|| RefOr::T(error_response(description)));
}

fn add_kit_errors(op: &mut Operation) {
    if op.request_body.is_some() {
        add_error(
            op,
            400,
            "The body is not a JSON object (`invalid_json`), or a field is missing or invalid \
             (`invalid_field`, naming it in `field`).",
        );
        add_error(
            op,
            408,
            "The body did not arrive in time (`request_timeout`).",
        );
        add_error(
            op,
            413,
            "The body is over the service's limit (`body_too_large`).",
        );
        add_error(
            op,
            415,
            "The body is sent with a content type that is not JSON (`unsupported_media_type`).",
        );
    }
    if op.parameters.as_ref().is_some_and(|p| !p.is_empty()) {
        add_error(
            op,
            400,
            "A path or query parameter is invalid (`invalid_field`, naming it in `field`).",
        );
    }
    if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
        add_error(
            op,
            401,
            "No bearer token (`missing_token`), or one that does not verify or has expired \
             (`invalid_token`).",
        );
    }
    add_error(
        op,
        500,
        "An internal error; it has been logged under the request id.",
    );
    add_error(
        op,
        503,
        "The service's database is away, or the service is still starting \
         (`database_unavailable`, `not_ready`); retry shortly.",
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// The documents state the range of instants the API takes, no wider and no narrower.
    #[test]
    fn the_documented_instants_are_the_ones_taken() {
        let (min, max) = super::instant_range();
        for ms in [min, max] {
            assert!(pms_vocab::fields::instant(&json!(ms)).is_some(), "{ms}");
        }
        for ms in [min - 1, max + 1] {
            assert!(pms_vocab::fields::instant(&json!(ms)).is_none(), "{ms}");
        }
    }
}
