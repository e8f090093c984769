//! JSON→XML through the gateway.

use std::time::Duration;

use pms_testkit::client::{Proto, TestClient};

use crate::support::{echo, endpoint, inspector, simple};

#[tokio::test]
async fn ballerina_compat_bytes_reach_the_backend_as_xml() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = simple(
        &endpoint(back.addr),
        "transform = \"json-to-xml\"\nxml_layout = \"ballerina-compat\"",
        "",
        &[],
    )
    .await;
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        let r = c
            .call(
                "POST",
                "/transform",
                &[("content-type", "application/json")],
                pms_testkit::payload::array(50),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.text(),
            "<size>50B</size><payload><item>0123456789</item><item>ABCDEFGH</item></payload>"
        );
        assert_eq!(r.header("content-type"), Some("application/xml"));
        assert_eq!(r.header("content-length"), Some("79"));
        let r = c
            .call("POST", "/transform", &[], pms_testkit::payload::array(1024))
            .await
            .unwrap();
        assert_eq!(r.body.len(), 1803);
    }
}

#[tokio::test]
async fn generic_layout_with_configured_root() {
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "transform = \"json-to-xml\"",
        "[transform]\nxml_root = \"order\"",
        &[],
    )
    .await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c
        .call(
            "POST",
            "/t?x=1",
            &[("content-type", "application/json")],
            r#"{"a":[1,2],"b":null}"#,
        )
        .await
        .unwrap();
    let seen = r.json();
    assert_eq!(seen["body"], "<order><a>1</a><a>2</a><b/></order>");
    assert_eq!(seen["headers"]["content-type"][0], "application/xml");
    assert_eq!(seen["headers"]["content-length"][0], "35");
    assert_eq!(seen["query"], "x=1");
}

#[tokio::test]
async fn invalid_json_is_400_with_position_and_oversize_is_413() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = simple(
        &endpoint(back.addr),
        "transform = \"json-to-xml\"",
        "[transform]\nmax_body_bytes = 100",
        &[],
    )
    .await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c
        .call("POST", "/t", &[], "{\"a\": [1,\n2,]}")
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e = r.json();
    assert_eq!(e["error"]["code"], "invalid_body");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("line 2 column 3"),
        "{e}"
    );
    let r = c
        .call("POST", "/t", &[], pms_testkit::payload::array(101))
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = c
        .call("POST", "/t", &[], pms_testkit::payload::array(100))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
