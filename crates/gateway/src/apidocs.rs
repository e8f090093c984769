//! The public API's contract, served by the gateway itself: `GET /openapi.json` (OpenAPI 3.1)
//! and `GET /docs` (the same document as a readable page, self-contained: no script, nothing
//! fetched from elsewhere).
//!
//! The program embedding the gateway gives it the services' document ([`Settings::openapi`]);
//! the gateway keeps the operations its routes reach and adds what it answers itself on them:
//! 429 on a rate-limited route, 401/403 and the bearer requirement on a `jwt` route, 408/413
//! where there is a body, 502/503/504 when the upstream fails. Both answers are built once,
//! when either is first asked for (see [`OpenApiSource`]).
//!
//! [`Settings::openapi`]: crate::config::Settings::openapi

use std::sync::{Arc, OnceLock};

use askama::Template;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Method, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Map, Value};

use crate::body::ProxyBody;
use crate::config::OpenApiSource;
use crate::headers::X_REQUEST_ID;
use crate::router::Router;

/// Path of the document.
pub const DOCUMENT_PATH: &str = "/openapi.json";
/// Path of the reference page.
pub const PAGE_PATH: &str = "/docs";

/// The two answers, rendered on first use.
#[derive(Debug)]
pub(crate) struct ApiDocs {
    source: OpenApiSource,
    router: Arc<Router>,
    rendered: OnceLock<Rendered>,
}

/// The two answers.
#[derive(Debug)]
struct Rendered {
    /// `application/json`.
    document: Bytes,
    /// `text/html; charset=utf-8`.
    page: Bytes,
}

/// What a path of the docs answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doc {
    /// The OpenAPI document.
    Document,
    /// The reference page.
    Page,
}

impl ApiDocs {
    /// The document `source` makes, cut to what `router` reaches, and its page.
    pub(crate) fn new(source: OpenApiSource, router: Arc<Router>) -> Self {
        Self {
            source,
            router,
            rendered: OnceLock::new(),
        }
    }

    /// Both answers, rendered by the first caller (the others wait for it: a few milliseconds,
    /// once).
    fn rendered(&self) -> &Rendered {
        self.rendered.get_or_init(|| {
            let doc = public(&self.source.document(), &self.router);
            let page = render(&doc);
            Rendered {
                document: Bytes::from(serde_json::to_vec(&doc).unwrap_or_default()),
                page: Bytes::from(page),
            }
        })
    }

    /// Which answer `method path` asks for, if any: only `GET` and `HEAD` of the two paths.
    pub(crate) fn wants(method: &Method, path: &[u8]) -> Option<Doc> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        if path == DOCUMENT_PATH.as_bytes() {
            Some(Doc::Document)
        } else if path == PAGE_PATH.as_bytes() {
            Some(Doc::Page)
        } else {
            None
        }
    }

    /// The answer to a request for `doc`; to a `HEAD` (`head`), the same headers and no body
    /// (HTTP/2 sends no DATA for it, so the body is left out here rather than by the codec).
    pub(crate) fn response(
        &self,
        doc: Doc,
        head: bool,
        request_id: &HeaderValue,
    ) -> Response<ProxyBody> {
        let rendered = self.rendered();
        let (body, content_type) = match doc {
            Doc::Document => (rendered.document.clone(), "application/json"),
            Doc::Page => (rendered.page.clone(), "text/html; charset=utf-8"),
        };
        let length = HeaderValue::from(body.len());
        let mut resp = Response::new(
            Full::new(if head { Bytes::new() } else { body })
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(CONTENT_LENGTH, length);
        h.insert(X_REQUEST_ID.clone(), request_id.clone());
        resp
    }
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

/// `services` with only the operations a route takes, each with the gateway's own answers.
pub(crate) fn public(services: &Value, router: &Router) -> Value {
    let mut doc = services.clone();
    let mut kept = Map::new();
    if let Some(paths) = services.get("paths").and_then(Value::as_object) {
        for (path, item) in paths {
            let Some(item) = item.as_object() else {
                continue;
            };
            let concrete = fill_template(path);
            let mut out = Map::new();
            for (key, op) in item {
                if !METHODS.contains(&key.as_str()) {
                    out.insert(key.clone(), op.clone());
                    continue;
                }
                let Ok(method) = Method::from_bytes(key.to_ascii_uppercase().as_bytes()) else {
                    continue;
                };
                let Ok(index) = router.find(&method, concrete.as_bytes()) else {
                    continue;
                };
                let route = router.route(index);
                let mut op = op.clone();
                add_gateway_answers(&mut op, route.jwt, route.rate_limit.is_some());
                out.insert(key.clone(), op);
            }
            if out.keys().any(|k| METHODS.contains(&k.as_str())) {
                kept.insert(path.clone(), Value::Object(out));
            }
        }
    }
    drop_dangling_links(&mut kept);
    doc["paths"] = Value::Object(kept);
    doc
}

/// Removes the response links to operations no route reaches (their `operationId` is gone).
fn drop_dangling_links(paths: &mut Map<String, Value>) {
    let ids: std::collections::HashSet<String> = paths
        .values()
        .filter_map(Value::as_object)
        .flat_map(|item| item.values())
        .filter_map(|op| op.get("operationId").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in item.values_mut() {
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                continue;
            };
            for response in responses.values_mut() {
                if let Some(links) = response.get_mut("links").and_then(Value::as_object_mut) {
                    links.retain(|_, link| {
                        link.get("operationId")
                            .and_then(Value::as_str)
                            .is_some_and(|id| ids.contains(id))
                    });
                    if links.is_empty() {
                        if let Some(r) = response.as_object_mut() {
                            r.remove("links");
                        }
                    }
                }
            }
        }
    }
}

/// `/users/vehicle/{userId}` as a request path the router can match (`/users/vehicle/1`).
fn fill_template(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => in_param = true,
            '}' if in_param => {
                in_param = false;
                out.push('1');
            }
            _ if in_param => {}
            _ => out.push(c),
        }
    }
    out
}

fn error(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

/// Adds what the gateway answers on a route, keeping what the service documented.
fn add_gateway_answers(op: &mut Value, jwt: bool, limited: bool) {
    let has_body = op.get("requestBody").is_some();
    if jwt && op.get("security").is_none() {
        op["security"] = json!([{"bearer": []}]);
    }
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    let mut add = |status: &str, description: &str| {
        responses
            .entry(status)
            .or_insert_with(|| error(description));
    };
    if jwt {
        add(
            "401",
            "No bearer token (`missing_token`), or one that does not verify or has expired \
             (`invalid_token`).",
        );
        add(
            "403",
            "The token's role may not use this route (`forbidden`).",
        );
    }
    if limited {
        add(
            "429",
            "Over the route's rate limit (`too_many_requests`); `Retry-After` says when to try \
             again.",
        );
    }
    if has_body {
        add(
            "408",
            "The body did not arrive in time (`request_timeout`).",
        );
        add(
            "413",
            "The body is over the gateway's limit (`payload_too_large`).",
        );
    }
    add(
        "502",
        "The service behind the gateway could not be reached or failed mid-answer \
         (`bad_gateway`).",
    );
    add(
        "503",
        "The service is busy past the gateway's queue (`upstream_busy`), or token keys cannot \
         be fetched (`service_unavailable`).",
    );
    add(
        "504",
        "The service did not answer in time (`gateway_timeout`).",
    );
}

/// The reference page.
#[derive(Template)]
#[template(path = "docs.html")]
struct Page {
    title: String,
    version: String,
    description: Prose,
    operations: Vec<Operation>,
    schemas: Vec<Schema>,
}

struct Operation {
    anchor: String,
    method: String,
    path: String,
    summary: Prose,
    description: Prose,
    /// How the caller proves who it is (`bearer token`, `device key`), if it must.
    credential: Option<&'static str>,
    params: Vec<Field>,
    body: Option<String>,
    example: Option<String>,
    responses: Vec<Answer>,
}

struct Answer {
    status: String,
    description: Prose,
    schema: Option<String>,
}

struct Field {
    name: String,
    kind: String,
    required: bool,
    description: Prose,
}

struct Schema {
    name: String,
    description: Prose,
    kind: String,
    fields: Vec<Field>,
    example: Option<String>,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// A description as the page shows it: text, with `backticked` spans as code.
struct Prose(Vec<Span>);

/// A run of a [`Prose`].
struct Span {
    code: bool,
    text: String,
}

impl Prose {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `v[key]` as [`Prose`]: the parts between backticks are code; an unpaired backtick is text.
fn prose(v: &Value, key: &str) -> Prose {
    let text = text(v, key);
    let mut spans = Vec::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('`') {
        let Some(len) = rest[open + 1..].find('`') else {
            break;
        };
        if open > 0 {
            spans.push(Span {
                code: false,
                text: rest[..open].to_owned(),
            });
        }
        spans.push(Span {
            code: true,
            text: rest[open + 1..open + 1 + len].to_owned(),
        });
        rest = &rest[open + 2 + len..];
    }
    if !rest.is_empty() {
        spans.push(Span {
            code: false,
            text: rest.to_owned(),
        });
    }
    Prose(spans)
}

/// What an operation's `security` asks for, in words.
fn credential(op: &Value) -> Option<&'static str> {
    let schemes = op.get("security")?.as_array()?;
    let names = schemes
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|s| s.keys());
    let mut found = None;
    for name in names {
        found = Some(if name == "bearer" {
            "bearer token"
        } else {
            "device key"
        });
    }
    found
}

/// A schema's kind in a few words: `Vehicle`, `array of UserDto`, `integer (int64)`, an enum's
/// names.
fn kind(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().unwrap_or(r).to_owned();
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = values
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect();
        return format!("one of {}", names.join(", "));
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        let parts: Vec<String> = all.iter().map(kind).collect();
        return parts.join(" and ");
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    };
    if ty == "array" {
        return format!(
            "array of {}",
            schema.get("items").map_or("any".into(), kind)
        );
    }
    match schema.get("format").and_then(Value::as_str) {
        Some(f) => format!("{ty} ({f})"),
        None => ty,
    }
}

fn fields_of(object: &Value) -> Vec<Field> {
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    if let Some(props) = object.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            out.push(Field {
                name: name.clone(),
                kind: kind(p),
                required: required.contains(&name.as_str()),
                description: prose(p, "description"),
            });
        }
    }
    for part in object
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.extend(fields_of(part));
    }
    out
}

fn pretty(v: Option<&Value>) -> Option<String> {
    v.and_then(|v| serde_json::to_string_pretty(v).ok())
}

fn render(doc: &Value) -> String {
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            let body = op.pointer("/requestBody/content/application~1json/schema");
            let params = op
                .get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| Field {
                    name: format!("{} ({})", text(p, "name"), text(p, "in")),
                    kind: p.get("schema").map_or_else(String::new, kind),
                    required: p.get("required").and_then(Value::as_bool) == Some(true),
                    description: prose(p, "description"),
                })
                .collect();
            let responses = op["responses"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(status, r)| Answer {
                    status: status.clone(),
                    description: prose(r, "description"),
                    schema: r.pointer("/content/application~1json/schema").map(kind),
                })
                .collect();
            operations.push(Operation {
                anchor: op
                    .get("operationId")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("{method}-{path}"), str::to_owned),
                method: method.to_ascii_uppercase(),
                path: path.clone(),
                summary: prose(op, "summary"),
                description: prose(op, "description"),
                credential: credential(op),
                params,
                body: body.map(kind),
                example: pretty(body.and_then(|b| example_of(doc, b))),
                responses,
            });
        }
    }
    let schemas = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, s)| Schema {
            name: name.clone(),
            description: prose(s, "description"),
            kind: kind(s),
            fields: fields_of(s),
            example: pretty(s.get("example")),
        })
        .collect();
    let page = Page {
        title: text(&doc["info"], "title"),
        version: text(&doc["info"], "version"),
        description: prose(&doc["info"], "description"),
        operations,
        schemas,
    };
    page.render()
        .unwrap_or_else(|e| format!("<!doctype html><title>API</title><p>{e}</p>"))
}

/// The example of `schema`, or of the schema it refers to.
fn example_of<'a>(doc: &'a Value, schema: &'a Value) -> Option<&'a Value> {
    if let Some(e) = schema.get("example") {
        return Some(e);
    }
    let name = schema.get("$ref")?.as_str()?.rsplit('/').next()?;
    doc.pointer(&format!("/components/schemas/{name}/example"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_to_operations_no_route_reaches_are_dropped() {
        let link = |id: &str| json!({"operationId": id});
        let mut paths = json!({
            "/a": {"get": {"operationId": "a", "responses": {"200": {
                "description": "", "links": {"toB": link("b"), "toGone": link("gone")}}}}},
            "/b": {"get": {"operationId": "b", "responses": {"200": {
                "description": "", "links": {"toGone": link("gone")}}}}},
        });
        drop_dangling_links(paths.as_object_mut().unwrap());
        let a = &paths["/a"]["get"]["responses"]["200"]["links"];
        assert_eq!(a.as_object().map(|l| l.len()), Some(1));
        assert_eq!(a["toB"]["operationId"], "b");
        assert!(paths["/b"]["get"]["responses"]["200"]
            .get("links")
            .is_none());
    }

    #[test]
    fn backticks_mark_code_and_an_unpaired_one_is_text() {
        let spans = |text: &str| -> Vec<(bool, String)> {
            prose(&json!({ "d": text }), "d")
                .0
                .into_iter()
                .map(|s| (s.code, s.text))
                .collect()
        };
        let t = |s: &str| (false, s.to_owned());
        let c = |s: &str| (true, s.to_owned());
        assert_eq!(spans("a `b` c"), [t("a "), c("b"), t(" c")]);
        assert_eq!(spans("`x``y`"), [c("x"), c("y")]);
        assert_eq!(spans("one ` left"), [t("one ` left")]);
        assert_eq!(spans(""), Vec::<(bool, String)>::new());
    }

    #[test]
    fn templates_become_matchable_paths() {
        assert_eq!(fill_template("/users/vehicle/{userId}"), "/users/vehicle/1");
        assert_eq!(fill_template("/a/{x}/b/{y}"), "/a/1/b/1");
        assert_eq!(fill_template("/plain"), "/plain");
    }

    #[test]
    fn kinds_read_as_words() {
        assert_eq!(
            kind(&json!({"$ref": "#/components/schemas/Vehicle"})),
            "Vehicle"
        );
        assert_eq!(
            kind(&json!({"type": "array", "items": {"$ref": "#/components/schemas/U"}})),
            "array of U"
        );
        assert_eq!(kind(&json!({"type": ["string", "null"]})), "string or null");
        assert_eq!(
            kind(&json!({"type": "string", "enum": ["A", "B"]})),
            "one of A, B"
        );
        assert_eq!(
            kind(&json!({"type": "integer", "format": "int64"})),
            "integer (int64)"
        );
    }
}
