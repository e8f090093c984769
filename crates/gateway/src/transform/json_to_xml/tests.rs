use super::*;

fn generic(json: &str) -> String {
    let xml = convert(
        json.as_bytes(),
        &XmlLayout::Generic {
            root: "root".into(),
        },
    )
    .unwrap();
    String::from_utf8(xml).unwrap()
}

fn compat(json: &str) -> String {
    String::from_utf8(convert(json.as_bytes(), &XmlLayout::BallerinaCompat).unwrap()).unwrap()
}

#[test]
fn ballerina_compat_reproduces_the_published_bytes() {
    let xml = compat(r#"{"size":"50B","payload":["0123456789","ABCDEFGH"]}"#);
    assert_eq!(
        xml,
        "<size>50B</size><payload><item>0123456789</item><item>ABCDEFGH</item></payload>"
    );
    assert_eq!(xml.len(), 79);
}

#[test]
fn ballerina_compat_1024_byte_payload_is_1803_bytes() {
    // The published report's response size for the 1024-byte ARRAY payload.
    let doc = String::from_utf8(pms_testkit::payload::array(1024)).unwrap();
    assert_eq!(compat(&doc).len(), 1803);
}

#[test]
fn generic_layout_has_a_root_and_repeats_array_members() {
    assert_eq!(
        generic(r#"{"size":"50B","payload":["a","b"]}"#),
        "<root><size>50B</size><payload>a</payload><payload>b</payload></root>"
    );
    assert_eq!(
        generic("[1,[2,3]]"),
        "<root><item>1</item><item><item>2</item><item>3</item></item></root>"
    );
    assert_eq!(
        generic(r#"{"m":[[1],[]]}"#),
        "<root><m><item>1</item></m><m></m></root>"
    );
}

#[test]
fn scalars_null_and_nesting() {
    assert_eq!(
        generic(r#"{"a":{"b":true,"c":null,"d":-3,"e":2.5,"f":1e3}}"#),
        "<root><a><b>true</b><c/><d>-3</d><e>2.5</e><f>1000.0</f></a></root>"
    );
    assert_eq!(generic("\"x\""), "<root>x</root>");
    assert_eq!(generic("null"), "<root/>");
    assert_eq!(compat("42"), "<root>42</root>");
    assert_eq!(compat("[1]"), "<root><item>1</item></root>");
    assert_eq!(compat(r#"{"o":[{"k":1}]}"#), "<o><item><k>1</k></item></o>");
}

#[test]
fn text_is_escaped_and_unrepresentable_characters_replaced() {
    assert_eq!(
        generic(r#"{"t":"a<b & c>d ]]> \"q\" \u0001 \t"}"#),
        "<root><t>a&lt;b &amp; c&gt;d ]]&gt; \"q\" \u{FFFD} \t</t></root>"
    );
}

#[test]
fn invalid_names_are_made_valid_deterministically() {
    assert_eq!(xml_name("ok_name-1.x"), "ok_name-1.x");
    assert_eq!(xml_name("1abc"), "_1abc");
    assert_eq!(xml_name("-x"), "_-x");
    assert_eq!(xml_name("a b<c"), "a_b_c");
    assert_eq!(xml_name(""), "_");
    assert_eq!(xml_name("xmlns"), "_xmlns");
    assert_eq!(xml_name("XMLdata"), "_XMLdata");
    assert_eq!(xml_name("ns:tag"), "ns_tag");
    assert_eq!(xml_name("€"), "_");
    assert_eq!(xml_name("ñame"), "ñame");
    assert_eq!(
        generic(r#"{"1":"a","a b":"c"}"#),
        "<root><_1>a</_1><a_b>c</a_b></root>"
    );
    for n in ["1abc", "-x", "a b<c", "", "xmlns", "ns:tag", "€"] {
        assert!(is_xml_name(&xml_name(n)), "{n:?}");
    }
}

#[test]
fn escaped_member_names_are_decoded_then_sanitized() {
    assert_eq!(
        generic(r#"{"a\u0041":"1","q\"":"2"}"#),
        "<root><aA>1</aA><q_>2</q_></root>"
    );
}

#[test]
fn invalid_json_reports_the_position() {
    let err = convert(b"{\"a\":\n  [1,}", &XmlLayout::BallerinaCompat).unwrap_err();
    assert_eq!((err.line, err.column), (2, 6));
    assert!(err.to_string().contains("line 2 column 6"), "{err}");
    for bad in [&b""[..], b"{", b"{} {}", b"[1 2]", b"nul", b"\"\xff\""] {
        assert!(
            convert(bad, &XmlLayout::BallerinaCompat).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    assert!(convert(deep.as_bytes(), &XmlLayout::BallerinaCompat).is_err());
}
