//! `pms openapi`: prints a service's OpenAPI 3.1 document, or the whole public API as the
//! gateway serves it at `/openapi.json`, for validators, code generators and fuzzers.

use clap::ValueEnum;

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
    doc
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
