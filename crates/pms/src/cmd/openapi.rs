//! `pms openapi`: prints a service's OpenAPI 3.1 document, or the whole public API as the
//! gateway serves it at `/openapi.json`, for validators, code generators and fuzzers.
//!
//! Each service's document links only its own operations; the links between services (the
//! steps of a parking visit, from registering to the invoice) are added here, to the merged
//! document.

use clap::ValueEnum;
use pms_service::openapi::operations_mut;
use serde_json::{json, Value};
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::{OpenApi, RefOr};

/// Which document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Service {
    /// Every service's public endpoints, merged.
    All,
    /// The users service.
    Users,
    /// The parks service.
    Parks,
    /// The payments service.
    Payments,
}

/// `pms openapi` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Whose document.
    #[arg(long, value_enum, default_value = "all")]
    service: Service,
}

/// The document of `service`.
pub fn document(service: Service) -> utoipa::openapi::OpenApi {
    match service {
        Service::All => all(),
        Service::Users => pms_users::openapi(),
        Service::Parks => pms_parks::openapi(),
        Service::Payments => pms_payments::openapi(),
    }
}

/// Every service's public endpoints in one document, the gateway's starting point (it keeps
/// the operations its routes take).
pub fn all() -> utoipa::openapi::OpenApi {
    let mut doc = utoipa::openapi::OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("PMS")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "The Park Management System's public API, as its gateway serves it.",
                ))
                .build(),
        )
        .build();
    doc.merge(pms_users::openapi());
    doc.merge(pms_parks::openapi());
    doc.merge(pms_payments::openapi());
    for link in CROSS_SERVICE {
        link.add_to(&mut doc);
    }
    doc
}

/// A response link from one service's operation to another's.
struct CrossLink {
    /// The operation whose answer it follows.
    from: &'static str,
    /// The answer's status.
    status: &'static str,
    /// The operation it leads to (also the link's name).
    to: &'static str,
    /// What the step means.
    description: &'static str,
    /// Path or query parameters of `to`, as runtime expressions.
    parameters: &'static [(&'static str, &'static str)],
    /// Fields of `to`'s body, as runtime expressions.
    body: &'static [(&'static str, &'static str)],
}

/// The customer's side of a visit across users, parks and payments.
const CROSS_SERVICE: &[CrossLink] = &[
    CrossLink {
        from: "createUser",
        status: "201",
        to: "barrierEntrance",
        description: "The new customer's first vehicle arrives at an entrance barrier.",
        parameters: &[],
        body: &[("plateNumber", "$request.body#/licensePlateNumber")],
    },
    CrossLink {
        from: "addVehicle",
        status: "202",
        to: "barrierEntrance",
        description: "The vehicle arrives at an entrance barrier.",
        parameters: &[],
        body: &[("plateNumber", "$request.body#/licensePlateNumber")],
    },
    CrossLink {
        from: "getVehicles",
        status: "200",
        to: "barrierEntrance",
        description: "The customer's first vehicle arrives at an entrance barrier.",
        parameters: &[],
        body: &[("plateNumber", "$response.body#/0/licensePlateNumber")],
    },
    CrossLink {
        from: "login",
        status: "200",
        to: "getParkingHistory",
        description: "The customer's visits.",
        parameters: &[("customerID", "$response.body#/id")],
        body: &[],
    },
    CrossLink {
        from: "login",
        status: "200",
        to: "getHistoryCount",
        description: "How many visits the customer has made.",
        parameters: &[("customerID", "$response.body#/id")],
        body: &[],
    },
    CrossLink {
        from: "login",
        status: "200",
        to: "getUserParkyFlag",
        description: "Whether the customer's next visit is paid with coins.",
        parameters: &[("customerID", "$response.body#/id")],
        body: &[],
    },
    CrossLink {
        from: "login",
        status: "200",
        to: "changeUserParkyFlag",
        description: "The customer chooses to pay the next visit with coins, or not.",
        parameters: &[],
        body: &[("customerID", "$response.body#/id")],
    },
    CrossLink {
        from: "login",
        status: "200",
        to: "getMyPayments",
        description: "The customer's invoices.",
        parameters: &[],
        body: &[],
    },
    CrossLink {
        from: "barrierExit",
        status: "200",
        to: "getMyPayments",
        description: "Once issued, the visit's invoice is among its customer's payments (read \
            with the customer's token).",
        parameters: &[],
        body: &[],
    },
];

impl CrossLink {
    /// Adds the link to `doc`; a link whose operations are not both in `doc` is left out.
    fn add_to(&self, doc: &mut OpenApi) {
        if operation_mut(doc, self.to).is_none() {
            return;
        }
        let Some(RefOr::T(response)) = operation_mut(doc, self.from)
            .and_then(|op| op.responses.responses.get_mut(self.status))
        else {
            return;
        };
        let mut link = LinkBuilder::new()
            .operation_id(self.to)
            .description(self.description);
        for (name, expression) in self.parameters {
            link = link.parameter(*name, *expression);
        }
        if !self.body.is_empty() {
            let body: serde_json::Map<String, Value> = self
                .body
                .iter()
                .map(|(name, expression)| ((*name).to_owned(), json!(expression)))
                .collect();
            link = link.request_body(Some(Value::Object(body)));
        }
        response
            .links
            .insert(self.to.to_owned(), RefOr::T(link.build()));
    }
}

/// The operation of `doc` with this `operationId`.
fn operation_mut<'a>(doc: &'a mut OpenApi, id: &str) -> Option<&'a mut Operation> {
    doc.paths
        .paths
        .values_mut()
        .flat_map(operations_mut)
        .find(|op| op.operation_id.as_deref() == Some(id))
}

/// The whole API as JSON, for the gateway.
pub fn json() -> serde_json::Value {
    serde_json::to_value(all()).unwrap_or_default()
}

/// Prints the document as indented JSON.
pub fn run(args: Args) -> anyhow::Result<()> {
    let json = document(args.service).to_pretty_json()?;
    println!("{json}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every link of `doc` as (source operation, status, target operation).
    fn links(doc: &Value) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for item in doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|p| p.values())
        {
            for op in item.as_object().into_iter().flat_map(|i| i.values()) {
                let from = op["operationId"].as_str().unwrap_or_default();
                for (status, response) in op["responses"].as_object().into_iter().flatten() {
                    for link in response["links"]
                        .as_object()
                        .into_iter()
                        .flat_map(|l| l.values())
                    {
                        let to = link["operationId"].as_str().unwrap_or_default();
                        out.push((from.to_owned(), status.clone(), to.to_owned()));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_cross_service_link_is_in_the_merged_document() {
        let doc = json();
        let all = links(&doc);
        for link in CROSS_SERVICE {
            assert!(
                all.iter()
                    .any(|(f, s, t)| f == link.from && s == link.status && t == link.to),
                "{} {} -> {} missing: an operation id or status changed",
                link.from,
                link.status,
                link.to
            );
        }
        // Each service alone links only to its own operations.
        for service in [Service::Users, Service::Parks, Service::Payments] {
            let doc = serde_json::to_value(document(service)).expect("document");
            let ids: Vec<String> = links(&doc).into_iter().map(|(_, _, to)| to).collect();
            let own = doc.to_string();
            for id in ids {
                assert!(
                    own.contains(&format!("\"operationId\":\"{id}\"")),
                    "{service:?} links to {id}, which is not its own"
                );
            }
        }
    }

    #[test]
    fn every_link_leads_to_an_operation_of_the_document() {
        let doc = json();
        let ids: Vec<&str> = doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|p| p.values())
            .flat_map(|i| i.as_object().into_iter().flat_map(|i| i.values()))
            .filter_map(|op| op["operationId"].as_str())
            .collect();
        let all = links(&doc);
        assert!(all.len() > CROSS_SERVICE.len());
        for (from, status, to) in all {
            assert!(ids.contains(&to.as_str()), "{from} {status} -> {to}");
        }
    }
}
