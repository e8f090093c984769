//! Other tools' result files, written the way each tool writes them, read as samples: the same
//! three requests (15 ms and 12 ms answers, then one that timed out) in every encoding, so every
//! reader must come to the same statistics.

use std::time::Duration;

use pms_bench::import::{self, Encoding, ImportError};
use pms_bench::stats::ErrorKind;

const URL: &str = "http://localhost:9090/users/getAllUsers";

/// Three requests at 0, 0.5 and 1 s: 15 ms, 12 ms, and a timeout after `timeout_ms`.
fn check(name: &str, text: &str, encoding: Encoding, timeout_ms: f64) {
    let imported = import::parse(name, text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(imported.encoding, encoding, "{name}");
    assert_eq!(imported.rows.len(), 3, "{name}: {:?}", imported.rows);
    let r = imported.reduce(Duration::ZERO);
    let s = r.measured.summary("measured", r.window);
    assert_eq!((s.samples, s.errors), (3, 1), "{name}: {s:?}");
    assert_eq!(
        s.errors_by_kind.get(&ErrorKind::Timeout),
        Some(&1),
        "{name}: {s:?}"
    );
    assert_eq!(s.status_codes.get(&0), Some(&1), "{name}: no response");
    // The timeout counts in the latency, as each tool's own report counts it.
    let mean = (15.0 + 12.0 + timeout_ms) / 3.0;
    assert!(
        (s.mean_ms - mean).abs() < mean * 0.002,
        "{name}: mean {} against {mean}",
        s.mean_ms
    );
    assert!((s.min_ms - 12.0).abs() < 0.02, "{name}: {}", s.min_ms);
    // Throughput over the span from the first start to the last end, as JMeter divides.
    let span = 1.0 + timeout_ms / 1000.0;
    assert!(
        (r.window.as_secs_f64() - span).abs() < 0.002,
        "{name}: window {:?} against {span}",
        r.window
    );
}

#[test]
fn jmeter_csv_with_its_header_row() {
    let text = format!(
        "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,failureMessage,bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect\n\
         1700000000000,15,getAllUsers,200,OK,Thread Group 1-1,text,true,,2452,150,1,1,{URL},14,0,2\n\
         1700000000500,12,getAllUsers,200,OK,Thread Group 1-2,text,true,,2452,150,2,2,{URL},11,0,1\n\
         1700000001000,2003,getAllUsers,Non HTTP response code: java.net.SocketTimeoutException,Non HTTP response message: Read timed out,Thread Group 1-3,text,false,,2107,0,1,1,{URL},0,0,1\n"
    );
    check("header.jtl", &text, Encoding::JtlCsv, 2003.0);
    let imported = import::parse("header.jtl", &text).unwrap();
    let first = &imported.rows[0];
    assert_eq!((first.received, first.sent), (2452, 150));
    assert_eq!(first.connect_ms, Some(2.0));
    let r = imported.reduce(Duration::ZERO);
    let s = r.measured.summary("m", r.window);
    let connect = s.breakdown.connect.expect("connect times were recorded");
    assert_eq!(connect.count, 3);
}

#[test]
fn jmeter_csv_without_a_header_is_read_in_the_default_column_order() {
    let text = format!(
        "1700000000000,15,getAllUsers,200,OK,Thread Group 1-1,text,true,,2452,150,1,1,{URL},14,0,2\n\
         1700000000500,12,getAllUsers,200,OK,Thread Group 1-2,text,true,,2452,150,2,2,{URL},11,0,1\n\
         1700000001000,2003,getAllUsers,\"Non HTTP response code: java.net.SocketTimeoutException\",\"Non HTTP response message: Read timed out\",Thread Group 1-3,text,false,,2107,0,1,1,{URL},0,0,1\n"
    );
    check("bare.csv", &text, Encoding::JtlCsv, 2003.0);
}

#[test]
fn jmeter_xml_counts_top_level_samples_only() {
    let text = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<testResults version="1.2">
<httpSample t="15" it="0" lt="14" ct="2" ts="1700000000000" s="true" lb="getAllUsers" rc="200" rm="OK" tn="Thread Group 1-1" dt="text" by="2452" sby="150" ng="1" na="1">
  <httpSample t="4" it="0" lt="4" ct="0" ts="1700000000001" s="true" lb="getAllUsers-0" rc="302" rm="Found" tn="Thread Group 1-1" dt="text" by="120" sby="150" ng="1" na="1"/>
  <java.net.URL>{URL}</java.net.URL>
</httpSample>
<httpSample t="12" it="0" lt="11" ct="1" ts="1700000000500" s="true" lb="getAllUsers" rc="200" rm="OK" tn="Thread Group 1-2" dt="text" by="2452" sby="150" ng="2" na="2"/>
<httpSample t="2003" it="0" lt="0" ct="1" ts="1700000001000" s="false" lb="getAllUsers" rc="Non HTTP response code: java.net.SocketTimeoutException" rm="Non HTTP response message: Read timed out" tn="Thread Group 1-3" dt="text" by="2107" sby="0" ng="1" na="1"/>
</testResults>
"#
    );
    check("results.xml", &text, Encoding::JtlXml, 2003.0);
}

#[test]
fn k6_csv_takes_the_http_req_duration_rows() {
    let head = "metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,metadata";
    // k6 stamps a sample when the request ended, in whole seconds.
    let text = format!(
        "{head}\n\
         http_reqs,1700000000,1.000000,,,,true,,GET,{URL},HTTP/1.1,default,,200,,,{URL},,\n\
         http_req_duration,1700000000,15.000000,,,,true,,GET,{URL},HTTP/1.1,default,,200,,,{URL},,\n\
         http_req_blocked,1700000000,2.000000,,,,true,,GET,{URL},HTTP/1.1,default,,200,,,{URL},,\n\
         http_req_duration,1700000001,12.000000,,,,true,,GET,{URL},HTTP/1.1,default,,200,,,{URL},,\n\
         http_req_duration,1700000031,30000.000000,,request timeout,1050,false,,GET,{URL},,default,,0,,,{URL},,\n\
         iteration_duration,1700000031,30001.000000,,,,,,,,,default,,,,,,,\n"
    );
    let imported = import::parse("k6.csv", &text).unwrap();
    assert_eq!(imported.encoding, Encoding::K6Csv);
    let durations: Vec<f64> = imported.rows.iter().map(|r| r.elapsed_ms).collect();
    assert_eq!(durations, vec![15.0, 12.0, 30000.0]);
    let r = imported.reduce(Duration::ZERO);
    let s = r.measured.summary("m", r.window);
    assert_eq!((s.samples, s.errors), (3, 1));
    assert_eq!(s.errors_by_kind.get(&ErrorKind::Timeout), Some(&1));
}

#[test]
fn k6_json_takes_the_http_req_duration_points() {
    let point = |time: &str, value: f64, status: &str, expected: &str, error: &str| {
        format!(
            r#"{{"metric":"http_req_duration","type":"Point","data":{{"time":"{time}","value":{value},"tags":{{"error":"{error}","expected_response":"{expected}","group":"","method":"GET","name":"{URL}","proto":"HTTP/1.1","scenario":"default","status":"{status}","url":"{URL}"}}}}}}"#
        )
    };
    // k6 stamps a point when the request ended.
    let text = [
        r#"{"type":"Metric","data":{"name":"http_req_duration","type":"trend","contains":"time","thresholds":[],"submetrics":null},"metric":"http_req_duration"}"#.to_owned(),
        point("2023-11-14T22:13:20.015Z", 15.0, "200", "true", ""),
        r#"{"metric":"http_reqs","type":"Point","data":{"time":"2023-11-14T22:13:20.015Z","value":1,"tags":{"status":"200"}}}"#.to_owned(),
        point("2023-11-14T22:13:20.512Z", 12.0, "200", "true", ""),
        point("2023-11-14T22:13:23.003Z", 2003.0, "0", "false", "request timeout"),
    ]
    .join("\n");
    check("k6.json", &text, Encoding::K6Json, 2003.0);
}

#[test]
fn vegeta_json_and_csv_encodings() {
    let line = |ts: &str, seq: u32, code: u16, ns: u64, bytes_in: u64, error: &str| {
        format!(
            r#"{{"attack":"","seq":{seq},"code":{code},"timestamp":"{ts}","latency":{ns},"bytes_out":0,"bytes_in":{bytes_in},"error":"{error}","body":null,"method":"GET","url":"{URL}","headers":{{}}}}"#
        )
    };
    let timeout =
        "Get \\\"http://localhost:9090/users/getAllUsers\\\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)";
    let json = [
        line("2023-11-14T22:13:20Z", 0, 200, 15_000_000, 2452, ""),
        line("2023-11-14T22:13:20.5Z", 1, 200, 12_000_000, 2452, ""),
        line("2023-11-14T22:13:21Z", 2, 0, 2_003_000_000, 0, timeout),
    ]
    .join("\n");
    check("vegeta.json", &json, Encoding::VegetaJson, 2003.0);
    let csv = format!(
        "1700000000000000000,200,15000000,0,2452,,eyJ1c2VycyI6W119,,0,GET,{URL},\n\
         1700000000500000000,200,12000000,0,2452,,eyJ1c2VycyI6W119,,1,GET,{URL},\n\
         1700000001000000000,0,2003000000,0,0,\"Get \"\"{URL}\"\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)\",,,2,GET,{URL},\n"
    );
    check("vegeta.csv", &csv, Encoding::VegetaCsv, 2003.0);
}

#[test]
fn the_warm_up_is_split_from_the_first_start() {
    let text = "timeStamp,elapsed,label,responseCode,success\n\
         1700000000000,40,getAllUsers,200,true\n\
         1700000000900,30,getAllUsers,200,true\n\
         1700000001000,10,getAllUsers,200,true\n\
         1700000002000,12,getAllUsers,200,true\n";
    let r = import::parse("w.jtl", text)
        .unwrap()
        .reduce(Duration::from_secs(1));
    assert_eq!((r.warmup.samples(), r.measured.samples()), (2, 2));
    let s = r.measured.summary("m", r.window);
    assert!((s.max_ms - 12.0).abs() < 0.02, "{s:?}");
    assert!(
        (r.window.as_secs_f64() - 1.012).abs() < 1e-6,
        "{:?}",
        r.window
    );
}

#[test]
fn unknown_and_broken_files_say_what_is_wrong() {
    assert!(matches!(
        import::parse("x.csv", "x,y\n1,2\n"),
        Err(ImportError::Unknown(_))
    ));
    match import::parse("bad.jtl", "timeStamp,elapsed\n1700000000000,fast\n") {
        Err(ImportError::Bad { record, why, .. }) => {
            assert_eq!(record, 2);
            assert!(why.contains("elapsed"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        import::parse("empty.jtl", "timeStamp,elapsed\n"),
        Err(ImportError::Empty(_))
    ));
}
