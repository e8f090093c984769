//! Which events carry a person's data, whose it is, and what those events say once it is erased
//! (an account closed: `docs/events.md`, "Erasure"). One table for the services that rewrite
//! their outbox's copies and for the broker, which carries these fields sealed under the
//! person's key and can so erase its copies too.

use serde_json::{Map, Value};

use crate::customer::CustomerDoc;
use crate::words::Role;

/// The prefix of the plate an erased stay is left with (`erased-12`): one per stay, so no two
/// erased stays are ever taken for the same vehicle's, and no real plate has this shape.
pub const ERASED_PLATE_PREFIX: &str = "erased-";

/// A person's data in one event.
#[derive(Debug, Clone, PartialEq)]
pub struct Personal {
    /// Whose: the customer's user id.
    pub owner: i64,
    /// Each field that holds it, with what it says once erased (a payload lacking one of them
    /// keeps lacking it).
    pub erased: Map<String, Value>,
}

/// The person's data that an event of `event_type` carries in `payload`; `None` for an event that
/// carries none, or names no customer.
pub fn personal(event_type: &str, payload: &Value) -> Option<Personal> {
    let (owner, erased) = match event_type {
        "customer.registered" | "customer.changed" => ("userId", erased_customer()),
        "visit.opened" | "visit.closed" => {
            let visit = payload.get("visitId").and_then(Value::as_i64).unwrap_or(0);
            ("customerId", erased_visit(visit))
        }
        "invoice.issued" => ("customerId", erased_invoice()),
        _ => return None,
    };
    let owner = payload.get(owner)?.as_i64()?;
    Some(Personal { owner, erased })
}

/// The customer whose account an event of `event_type` closes (`customer.closed`): every copy
/// of their data is to be erased from then on.
pub fn closes(event_type: &str, payload: &Value) -> Option<i64> {
    if event_type != "customer.closed" {
        return None;
    }
    payload.get("userId")?.as_i64()
}

/// What a customer's state events say once erased: [`CustomerDoc::erased`], field by field (the
/// id and role stay).
pub fn erased_customer() -> Map<String, Value> {
    let Ok(Value::Object(mut fields)) =
        serde_json::to_value(CustomerDoc::erased(0, Role::Customer))
    else {
        unreachable!("a customer document serializes to an object");
    };
    fields.remove("userId");
    fields.remove("role");
    fields
}

/// What a stay's events (`visit.opened`, `visit.closed`) say once erased: the plate the stay is
/// left with ([`ERASED_PLATE_PREFIX`] and its id), no tax number (0), no name.
pub fn erased_visit(visit_id: impl std::fmt::Display) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert(
        "plate".into(),
        format!("{ERASED_PLATE_PREFIX}{visit_id}").into(),
    );
    fields.insert("nif".into(), 0.into());
    fields.insert("customerName".into(), "".into());
    fields
}

/// What an invoice's `invoice.issued` says once erased: no tax number (0), no plate. The invoice
/// itself is kept as issued (tax law).
pub fn erased_invoice() -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("nif".into(), 0.into());
    fields.insert("plate".into(), "".into());
    fields
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_kind_names_its_owner_and_the_fields_that_go() {
        let customer = json!({"userId": 6, "firstName": "Rui", "nif": 514884112});
        let p = personal("customer.changed", &customer).expect("personal");
        assert_eq!(p.owner, 6);
        assert_eq!(p.erased["firstName"], "");
        assert_eq!(p.erased["vehicles"], json!([]));
        assert!(!p.erased.contains_key("userId") && !p.erased.contains_key("role"));

        let visit = json!({"visitId": 12, "customerId": 6, "plate": "46-ON-05"});
        let p = personal("visit.closed", &visit).expect("personal");
        assert_eq!((p.owner, &p.erased["plate"]), (6, &json!("erased-12")));
        let invoice = json!({"invoiceId": 3, "customerId": 6, "nif": 514884112});
        assert_eq!(personal("invoice.issued", &invoice).expect("p").owner, 6);

        // No person: another kind, or no customer named.
        assert_eq!(personal("coins.requested", &invoice), None);
        assert_eq!(personal("visit.opened", &json!({"plate": "x"})), None);
        assert_eq!(closes("customer.closed", &json!({"userId": 6})), Some(6));
        assert_eq!(closes("customer.changed", &json!({"userId": 6})), None);
    }

    #[test]
    fn an_erased_customer_reads_as_the_erased_document() {
        let doc = CustomerDoc::erased(6, Role::Customer);
        let mut full = serde_json::to_value(&doc).expect("json");
        let object = full.as_object_mut().expect("object");
        for (name, value) in erased_customer() {
            assert_eq!(object.insert(name, value.clone()), Some(value));
        }
        assert_eq!(
            serde_json::from_value::<CustomerDoc>(full).expect("doc"),
            doc
        );
    }
}
