//! The two endpoints every consuming service serves over the events it set aside, written once:
//! `GET /{service}/events/parked` ([`super::listed`]) and
//! `POST /{service}/events/parked/{source}/{eventId}/retry` ([`super::retried`]), SUPERVISOR
//! only, with their OpenAPI operations named for the service (`getParksParkedEvents`,
//! `retryParksParkedEvent`, …).
//!
//! The operations are built here rather than with `#[utoipa::path]`, whose paths and names
//! must be literals: one annotated pair per service was the same fifty lines three times.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use pms_service::chassis::Service;
use pms_service::http::Answer;
use pms_service::openapi::{error_response, BEARER};
use pms_service::{Allowed, Supervisors};
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::{
    HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem,
};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ArrayBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, Required};
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;

use super::{Parked, RetryStarted};

/// Which service serves the endpoints, and over which of its consumers.
#[derive(Debug, Clone, Copy)]
pub struct SetAside {
    /// The service: the first segment of the paths and the OpenAPI tag (`parks`).
    pub service: &'static str,
    /// Its consumer's name in `parked_events` and `event_positions`.
    pub consumer: &'static str,
    /// The services whose events it consumes, for the `source` parameter's description.
    pub sources: &'static [&'static str],
}

impl SetAside {
    /// The routes and their OpenAPI operations, to merge into the service's router.
    pub fn routes<S: Service>(self) -> OpenApiRouter<S> {
        let consumer = self.consumer;
        let list = get(
            move |State(s): State<S>, _: Allowed<Supervisors>| async move {
                super::listed(s.db(), consumer).await
            },
        );
        let retry = post(
            move |State(s): State<S>,
                  who: Allowed<Supervisors>,
                  Path((source, event_id)): Path<(String, String)>| async move {
                retried(&s, consumer, &source, &event_id, who.id).await
            },
        );
        OpenApiRouter::with_openapi(self.document())
            .route(&self.list_path(), list)
            .route(&self.retry_path(), retry)
    }

    fn list_path(&self) -> String {
        format!("/{}/events/parked", self.service)
    }

    fn retry_path(&self) -> String {
        format!(
            "/{}/events/parked/{{source}}/{{eventId}}/retry",
            self.service
        )
    }

    /// `Parks` for `parks`: the service's name inside operation ids.
    fn title(&self) -> String {
        let mut chars = self.service.chars();
        chars
            .next()
            .map(|c| c.to_uppercase().chain(chars).collect())
            .unwrap_or_default()
    }

    /// The two operations, and the schemas they answer with.
    fn document(&self) -> OpenApi {
        let title = self.title();
        let retry_id = format!("retry{title}ParkedEvent");
        let forbidden = error_response("Only SUPERVISOR (`forbidden`).");
        let listed = ResponseBuilder::new()
            .description("Oldest first, at most 500: what, from which service, why and since when.")
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(
                        ArrayBuilder::new().items(Ref::from_schema_name(Parked::name())),
                    ))
                    .build(),
            )
            .link(
                retry_id.clone(),
                LinkBuilder::new()
                    .operation_id(retry_id.clone())
                    .parameter("source", "$response.body#/0/source")
                    .parameter("eventId", "$response.body#/0/eventId")
                    .build(),
            )
            .build();
        let list = OperationBuilder::new()
            .tag(self.service)
            .operation_id(Some(format!("get{title}ParkedEvents")))
            .summary(Some(format!(
                "The events {} set aside (supervisors)",
                self.service
            )))
            .security(SecurityRequirement::new(BEARER, Vec::<String>::new()))
            .response("200", listed)
            .response("403", forbidden.clone());
        let sources = self
            .sources
            .iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let started = ResponseBuilder::new()
            .description(
                "Forgotten, and the consumer set back to just before it: it is applied again \
                 with the events after it (set aside again if it still cannot be).",
            )
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(RetryStarted::name())))
                    .build(),
            )
            .build();
        let retry = OperationBuilder::new()
            .tag(self.service)
            .operation_id(Some(retry_id))
            .summary(Some("Try a set-aside event again (supervisors)"))
            .parameter(path_parameter(
                "source",
                format!("The producing service ({sources})."),
                ObjectBuilder::new().schema_type(Type::String),
            ))
            .parameter(path_parameter(
                "eventId",
                "The event's id in its producer's outbox.".into(),
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(1)),
            ))
            .security(SecurityRequirement::new(BEARER, Vec::<String>::new()))
            .response("200", started)
            .response("403", forbidden)
            .response(
                "404",
                error_response("No such event is set aside (`event_not_found`)."),
            );
        let mut doc = OpenApi::default();
        doc.paths
            .paths
            .insert(self.list_path(), PathItem::new(HttpMethod::Get, list));
        doc.paths
            .paths
            .insert(self.retry_path(), PathItem::new(HttpMethod::Post, retry));
        let components = doc.components.get_or_insert_with(Default::default);
        components
            .schemas
            .insert(Parked::name().into_owned(), Parked::schema());
        components
            .schemas
            .insert(RetryStarted::name().into_owned(), RetryStarted::schema());
        doc
    }
}

/// A required path parameter.
fn path_parameter(
    name: &str,
    description: String,
    schema: impl Into<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>,
) -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// The retry endpoint's work once the caller is known: the path's event id read, then
/// [`super::retried`].
async fn retried<S: Service>(
    s: &S,
    consumer: &str,
    source: &str,
    event_id: &str,
    by: i64,
) -> Answer {
    let event_id = pms_vocab::fields::id_param("eventId", event_id)?;
    super::retried(s.db(), consumer, source, event_id, by).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operations_are_named_for_the_service_and_link_the_retry() {
        let doc = SetAside {
            service: "payments",
            consumer: "payments",
            sources: &["parks", "users"],
        }
        .document();
        let json = serde_json::to_value(&doc).expect("document");
        let list = &json["paths"]["/payments/events/parked"]["get"];
        assert_eq!(list["operationId"], "getPaymentsParkedEvents");
        assert_eq!(list["tags"][0], "payments");
        assert_eq!(
            list["responses"]["200"]["links"]["retryPaymentsParkedEvent"]["operationId"],
            "retryPaymentsParkedEvent"
        );
        let retry = &json["paths"]["/payments/events/parked/{source}/{eventId}/retry"]["post"];
        assert_eq!(retry["operationId"], "retryPaymentsParkedEvent");
        assert_eq!(
            retry["parameters"][0]["description"],
            "The producing service (`parks`, `users`)."
        );
        assert_eq!(retry["parameters"][1]["schema"]["minimum"], 1);
        for code in ["200", "403", "404"] {
            assert!(retry["responses"][code].is_object(), "{code}");
        }
        let schemas = &json["components"]["schemas"];
        assert!(schemas["Parked"].is_object() && schemas["RetryStarted"].is_object());
    }
}
