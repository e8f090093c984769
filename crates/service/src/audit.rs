//! The audit trail: each staff action a service performs (a park created, a device switched off, a
//! customer blocked, coins granted, …) is recorded by that service, in the transaction that does
//! it, with who, when, what, and the thing before and after; supervisors read it back, filtered,
//! as JSON or CSV.
//!
//! What it owns: the entry a service writes ([`Entry`], through [`AuditConn::audit`] on its
//! transaction), the filters of a read ([`Filter`], from the query string), the read itself, and
//! the answer in both forms ([`answer`]). A service that records adds the table of
//! `schema_audit.sql` (next to this file; SQLite writes its id as `INTEGER PRIMARY KEY`) to its
//! migrations and mounts its own `GET /<service>/audit` around [`answer`].
//!
//! Why in the service that owns the data and in its transaction: the record and the change
//! commit together or not at all, whatever the service's replicas or the broker do, and nothing
//! else needs to be up for a change to be recorded. Why `before` and `after` as documents: what
//! changed differs by action; a reader wants the fields, not a diff format.

use std::future::Future;

use http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::http::{json, Answer};
use crate::store::{Db, StoreError};
use crate::ApiError;
use pms_vocab::fields::{self, FieldError};

/// Entries in one answer unless `limit` says otherwise.
pub const DEFAULT_LIMIT: i64 = 100;
/// Most entries in one answer.
pub const MAX_LIMIT: i64 = 1000;

/// One staff action, as a service records it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The staff member's user id.
    pub actor: i64,
    /// What was done: `park.created`, `device.switched`, `customer.blocked`, …
    pub action: &'static str,
    /// What it was done to: `park 6`, `barrier 31`, `user 12`, …
    pub subject: String,
    /// The thing before (absent for a creation).
    pub before: Option<Value>,
    /// The thing after (absent for a removal).
    pub after: Option<Value>,
}

impl Entry {
    /// `actor` did `action` to `subject`; say how it was and is with [`Entry::before`] and
    /// [`Entry::after`].
    pub fn new(actor: i64, action: &'static str, subject: impl Into<String>) -> Self {
        Self {
            actor,
            action,
            subject: subject.into(),
            before: None,
            after: None,
        }
    }

    /// How the thing was.
    #[must_use]
    pub fn before(mut self, value: &impl Serialize) -> Self {
        self.before = Some(document(value));
        self
    }

    /// How the thing is now.
    #[must_use]
    pub fn after(mut self, value: &impl Serialize) -> Self {
        self.after = Some(document(value));
        self
    }
}

/// `value` as a JSON document (a value that cannot be one is recorded as its error: the entry
/// is still written).
fn document(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| Value::String(format!("unrecordable: {e}")))
}

const RECORD: &str =
    "INSERT INTO audit_log (at_ms, actor_id, action, subject, before_doc, after_doc) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// What a service does with the audit table inside its own transactions.
pub trait AuditConn: Send {
    /// Records `entry`, now. Call it inside the transaction that makes the change.
    fn audit<'a>(
        &'a mut self,
        entry: &'a Entry,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
}

macro_rules! audit_conn {
    ($conn:ty) => {
        impl AuditConn for $conn {
            fn audit<'a>(
                &'a mut self,
                entry: &'a Entry,
            ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a {
                async move {
                    sqlx::query(RECORD)
                        .bind(jiff::Timestamp::now().as_millisecond())
                        .bind(entry.actor)
                        .bind(entry.action)
                        .bind(&entry.subject)
                        .bind(entry.before.as_ref().map(Value::to_string))
                        .bind(entry.after.as_ref().map(Value::to_string))
                        .execute(&mut *self)
                        .await
                        .map(drop)
                }
            }
        }
    };
}
audit_conn!(sqlx::SqliteConnection);
audit_conn!(sqlx::PgConnection);

/// Which entries a read wants, newest first: [`Query`] parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// At or after this instant (ms).
    pub from: Option<i64>,
    /// Before this instant (ms).
    pub to: Option<i64>,
    /// By this staff member.
    pub actor: Option<i64>,
    /// This action, or a prefix ending in a dot.
    pub action: Option<String>,
    /// About this subject.
    pub subject: Option<String>,
    /// Older than this entry.
    pub before: Option<i64>,
    /// Most entries.
    pub limit: Option<i64>,
    /// CSV rather than JSON.
    pub csv: bool,
}

/// The query string of `GET /<service>/audit`, as its OpenAPI operation lists it.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Query {
    /// Entries at or after this instant (RFC 3339).
    #[param(format = DateTime, example = "2026-12-01T00:00:00Z")]
    pub from: Option<String>,
    /// Entries before this instant (RFC 3339).
    #[param(format = DateTime, example = "2026-12-31T00:00:00Z")]
    pub to: Option<String>,
    /// Entries by this staff member (user id).
    #[param(minimum = 1)]
    pub actor: Option<i64>,
    /// This action (`park.created`), or every action under a prefix ending in a dot (`park.`).
    #[param(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub action: Option<String>,
    /// Entries about this subject (`park 6`).
    #[param(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub subject: Option<String>,
    /// Entries older than this one (its id: the next page).
    #[param(minimum = 1)]
    pub before: Option<i64>,
    /// Most entries (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// `json` (the default) or `csv`.
    #[param(pattern = "^(json|csv)$")]
    pub format: Option<String>,
}

impl Filter {
    /// The filter a query string says.
    ///
    /// # Errors
    /// A field that does not parse, named.
    pub fn parse(raw: Option<&str>) -> Result<Self, FieldError> {
        let [from, to, actor, action, subject, before, limit, format] = fields::query(
            raw,
            [
                "from", "to", "actor", "action", "subject", "before", "limit", "format",
            ],
        )?;
        let instant = |field: &'static str, text: Option<String>| {
            text.map(|t| {
                t.parse::<jiff::Timestamp>()
                    .map(jiff::Timestamp::as_millisecond)
                    .map_err(|_| FieldError::new(field, "must be an RFC 3339 instant"))
            })
            .transpose()
        };
        let text = |field: &'static str, text: Option<String>| match text {
            Some(t)
                if t.is_empty() || t.chars().count() > 100 || t.chars().any(char::is_control) =>
            {
                Err(FieldError::new(
                    field,
                    "must be 1 to 100 printable characters",
                ))
            }
            other => Ok(other),
        };
        Ok(Self {
            from: instant("from", from)?,
            to: instant("to", to)?,
            actor: fields::query_int("actor", actor.as_deref(), 1..=i64::MAX)?,
            action: text("action", action)?,
            subject: text("subject", subject)?,
            before: fields::query_int("before", before.as_deref(), 1..=i64::MAX)?,
            limit: fields::query_int("limit", limit.as_deref(), 1..=MAX_LIMIT)?,
            csv: match format.as_deref() {
                None | Some("json") => false,
                Some("csv") => true,
                Some(_) => return Err(FieldError::new("format", "must be json or csv")),
            },
        })
    }
}

/// One recorded staff action, as read back.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Its id (ascending with time; `before` pages by it).
    pub id: i64,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// The staff member's user id.
    pub actor_id: i64,
    /// What was done.
    pub action: String,
    /// What it was done to.
    pub subject: String,
    /// The thing before (absent for a creation).
    #[schema(value_type = Option<Object>)]
    pub before: Option<Value>,
    /// The thing after.
    #[schema(value_type = Option<Object>)]
    pub after: Option<Value>,
}

const READ: &str =
    "SELECT id, at_ms, actor_id, action, subject, before_doc, after_doc FROM audit_log \
     WHERE ($1 IS NULL OR at_ms >= $1) AND ($2 IS NULL OR at_ms < $2) \
     AND ($3 IS NULL OR actor_id = $3) \
     AND ($4 IS NULL OR action = $4 OR (substr($4, length($4), 1) = '.' \
          AND substr(action, 1, length($4)) = $4)) \
     AND ($5 IS NULL OR subject = $5) AND ($6 IS NULL OR id < $6) \
     ORDER BY id DESC LIMIT $7";

type Row = (
    i64,
    i64,
    i64,
    String,
    String,
    Option<String>,
    Option<String>,
);

/// The entries `filter` wants, newest first.
///
/// # Errors
/// Database failures.
pub async fn read(db: &Db, filter: &Filter) -> Result<Vec<Record>, StoreError> {
    let rows: Vec<Row> = crate::repeatable!(db, |conn| {
        sqlx::query_as(READ)
            .bind(filter.from)
            .bind(filter.to)
            .bind(filter.actor)
            .bind(filter.action.as_deref())
            .bind(filter.subject.as_deref())
            .bind(filter.before)
            .bind(filter.limit.unwrap_or(DEFAULT_LIMIT))
            .fetch_all(&mut *conn)
            .await
    })?;
    let doc =
        |text: Option<String>| text.map(|t| serde_json::from_str(&t).unwrap_or(Value::String(t)));
    Ok(rows
        .into_iter()
        .map(
            |(id, at, actor_id, action, subject, before, after)| Record {
                id,
                at: jiff::Timestamp::from_millisecond(at)
                    .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
                    .to_string(),
                actor_id,
                action,
                subject,
                before: doc(before),
                after: doc(after),
            },
        )
        .collect())
}

/// The answer of `GET /<service>/audit?…`: the entries the query string asks for, as a JSON
/// array or (`format=csv`) a CSV file with a header row, the documents as JSON text.
///
/// # Errors
/// 400 naming a query field that does not parse; 503 while the database is away.
pub async fn answer(db: &Db, raw_query: Option<&str>) -> Answer {
    let filter = Filter::parse(raw_query)?;
    let records = read(db, &filter).await?;
    if !filter.csv {
        return Ok(json(StatusCode::OK, &records));
    }
    let body = csv(&records).map_err(ApiError::internal)?;
    axum::response::Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "text/csv; charset=utf-8")
        .header(
            http::header::CONTENT_DISPOSITION,
            "attachment; filename=\"audit.csv\"",
        )
        .body(axum::body::Body::from(body))
        .map_err(ApiError::internal)
}

/// `records` as CSV. A cell that a spreadsheet would take for a formula (it begins with `=`,
/// `+`, `-`, `@`, a tab or a carriage return) is written with a leading `'`, so opening the
/// export runs nothing a customer typed.
fn csv(records: &[Record]) -> Result<Vec<u8>, csv::Error> {
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record([
        "id", "at", "actorId", "action", "subject", "before", "after",
    ])?;
    let text = |doc: &Option<Value>| doc.as_ref().map(Value::to_string).unwrap_or_default();
    for r in records {
        let cells = [
            r.id.to_string(),
            r.at.clone(),
            r.actor_id.to_string(),
            r.action.clone(),
            r.subject.clone(),
            text(&r.before),
            text(&r.after),
        ];
        out.write_record(cells.iter().map(|c| inert(c)))?;
    }
    out.into_inner().map_err(|e| e.into_error().into())
}

/// `cell`, with a leading `'` when a spreadsheet would read it as a formula.
fn inert(cell: &str) -> String {
    match cell.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{cell}"),
        _ => cell.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_bad_ones_are_named() {
        let f = Filter::parse(Some(
            "from=2026-12-01T00:00:00Z&actor=3&action=park.&limit=5&format=csv",
        ))
        .expect("filter");
        assert_eq!(f.from, Some(1_796_083_200_000));
        assert_eq!((f.actor, f.limit, f.csv), (Some(3), Some(5), true));
        assert_eq!(f.action.as_deref(), Some("park."));
        assert_eq!(Filter::parse(None).expect("none"), Filter::default());
        for (query, field) in [
            ("from=yesterday", "from"),
            ("to=2026-13-01T00:00:00Z", "to"),
            ("actor=0", "actor"),
            ("limit=1001", "limit"),
            ("format=xml", "format"),
            ("action=", "action"),
            ("subject=%00", "subject"),
            ("before=x", "before"),
        ] {
            let e = Filter::parse(Some(query)).expect_err(query);
            assert_eq!(e.field, field, "{query}");
        }
    }

    #[test]
    fn csv_has_a_header_and_defuses_formulas() {
        let record = Record {
            id: 7,
            at: "2026-12-06T10:00:00Z".into(),
            actor_id: 3,
            action: "customer.blocked".into(),
            subject: "=HYPERLINK(\"x\")".into(),
            before: None,
            after: Some(serde_json::json!({"reason": "a, \"quoted\" reason"})),
        };
        let text = String::from_utf8(csv(&[record]).expect("csv")).expect("utf-8");
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("id,at,actorId,action,subject,before,after")
        );
        assert_eq!(
            lines.next(),
            Some(
                "7,2026-12-06T10:00:00Z,3,customer.blocked,\"'=HYPERLINK(\"\"x\"\")\",,\
                 \"{\"\"reason\"\":\"\"a, \\\"\"quoted\\\"\" reason\"\"}\""
            )
        );
    }
}
