//! `/openapi.json` and `/docs`: the services' document cut to the routes, with the gateway's own
//! answers, on both front ends; off with `[api_docs] enabled = false`.

use pms_testkit::client::{Proto, TestClient};
use serde_json::{json, Value};

use crate::support::{gateway_with, inspector, Gw};

/// Two services' operations: `/users/login` (routed) links to `getUser` (routed) and to
/// `parksOnly` (not routed: no route takes `/parks/`).
fn services() -> Value {
    let answer = |links: Value| json!({"200": {"description": "ok", "links": links}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "test", "version": "1"},
        "paths": {
            "/users/login": {"post": {
                "operationId": "login",
                "summary": "Log in for a `token`",
                "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": answer(json!({
                    "toUser": {"operationId": "getUser", "parameters": {"id": "$response.body#/id"}},
                    "toParks": {"operationId": "parksOnly"}
                })),
            }},
            "/users/{id}": {"get": {
                "operationId": "getUser",
                "summary": "A user",
                "security": [{"bearer": []}],
                "responses": answer(json!({})),
            }},
            "/parks/all": {"get": {
                "operationId": "parksOnly",
                "summary": "Parks",
                "responses": answer(json!({})),
            }},
        },
    })
}

async fn gateway(upstream: std::net::SocketAddr, extra: &str) -> Gw {
    let toml = format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listeners]]
name = "public"
listen = "127.0.0.1:0"

[[upstreams]]
name = "users"
endpoints = ["http://{upstream}"]

[[routes]]
name = "login"
match = {{ path_prefix = "/users/login" }}
upstream = "users"

[[routes]]
name = "users"
match = {{ path_prefix = "/users/" }}
upstream = "users"
auth = "jwt"

[auth.jwt]
algorithms = ["HS256"]
secret_env = "TEST_JWT_SECRET"

{extra}
"#
    );
    let secret = [("TEST_JWT_SECRET", "an-api-docs-test-secret-of-32-bytes")];
    gateway_with(&toml, &secret, |s| {
        s.openapi = Some(pms_gateway::config::OpenApiSource::new(services))
    })
    .await
}

#[tokio::test]
async fn the_document_keeps_what_the_routes_reach_with_the_gateway_s_answers() {
    let up = inspector().await;
    let gw = gateway(up.addr, "").await;
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        let r = c
            .call("GET", "/openapi.json", &[("x-request-id", "docs-1")], "")
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{proto:?}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("x-request-id"), Some("docs-1"));
        let doc = r.json();
        let paths = doc["paths"].as_object().expect("paths");
        let mut kept: Vec<&str> = paths.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["/users/login", "/users/{id}"], "{proto:?}");

        let login = &doc["paths"]["/users/login"]["post"];
        let links = login["responses"]["200"]["links"]
            .as_object()
            .expect("links");
        assert!(links.contains_key("toUser"), "{links:?}");
        assert!(
            !links.contains_key("toParks"),
            "a link to an unrouted operation"
        );
        for status in ["408", "413", "502", "503", "504"] {
            assert!(login["responses"][status].is_object(), "login {status}");
        }
        assert!(login.get("security").is_none(), "login is not a jwt route");

        let user = &doc["paths"]["/users/{id}"]["get"];
        assert_eq!(user["security"], json!([{"bearer": []}]));
        for status in ["401", "403"] {
            assert!(user["responses"][status].is_object(), "jwt route {status}");
        }
        assert!(user["responses"]["413"].is_null(), "no body, no 413");

        let r = c.call("HEAD", "/openapi.json", &[], "").await.unwrap();
        assert_eq!(r.status(), 200, "{proto:?}");
        assert!(r.text().is_empty());

        let r = c.call("GET", "/docs", &[], "").await.unwrap();
        assert_eq!(r.status(), 200, "{proto:?}");
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        let page = r.text();
        assert!(
            page.contains("Log in") && page.contains("/users/{id}"),
            "{page}"
        );
        assert!(
            !page.contains("Parks"),
            "the page shows only routed operations"
        );
        assert!(!page.contains("<script"), "no script");
    }
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("POST", "/users/login", &[], "{}").await.unwrap();
    assert_eq!(r.status(), 200, "the route itself still works");
}

#[tokio::test]
async fn other_methods_and_a_disabled_document_go_to_the_route_table() {
    let up = inspector().await;
    let gw = gateway(up.addr, "[api_docs]\nenabled = false").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    for path in ["/openapi.json", "/docs"] {
        let r = c.call("GET", path, &[], "").await.unwrap();
        assert_eq!(r.status(), 404, "{path}: no route takes it");
        assert_eq!(r.json()["error"]["code"], "not_found", "{path}");
    }
    let gw = gateway(up.addr, "").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("POST", "/openapi.json", &[], "{}").await.unwrap();
    assert_eq!(
        r.status(),
        404,
        "only GET and HEAD are the document's; no route takes it"
    );
}
