//! An operator's first day, scripted against the real binary: `pms up --no-seed-parks` (the
//! demo people, no park), a park built through the API by its park manager (spots, an entrance
//! and an exit, a display), the barriers' keys issued, a customer's car driven in and out with
//! `pms device barrier` and those keys, the invoice and the coins the visit earned, the customer
//! blocked and their car refused, and every step read back by a supervisor in the audit trails;
//! a front end served from another origin (`--cors-origin`) may call the API.

mod common;

use std::process::{Child, Command, Stdio};

use common::{exchange, free_port, wait_for_port};
use serde_json::{json, Value};

const PMS: &str = env!("CARGO_BIN_EXE_pms");
const PASSWORD: &str = "Chosen#Password1";

struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `method path` through the gateway on `port` as `token`, with `body` as JSON; the status and
/// the JSON answer (`Null` when it is not JSON).
fn call(port: u16, method: &str, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let raw = exchange(
        port,
        &format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let status = raw.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = raw
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

fn login(port: u16, email: &str) -> String {
    let (status, body) = call(
        port,
        "POST",
        "/users/login",
        None,
        &json!({"email": email, "password": PASSWORD}),
    );
    assert_eq!(status, 200, "{email}: {body}");
    body["token"].as_str().expect("token").to_owned()
}

/// Which barrier a car passes: its park, its id, which way, and the key it proves itself with.
struct Barrier<'a> {
    park: i64,
    id: i64,
    direction: &'a str,
    key: &'a str,
}

/// A car read by `b` at `at`, through `pms device barrier`; its answer.
fn pass(data: &std::path::Path, b: &Barrier<'_>, plate: &str, at: &str) -> Value {
    let key = b.key;
    let mut child = Command::new(PMS)
        .args(["device", "barrier", "--data-dir"])
        .arg(data.join("pd"))
        .args([
            "--park",
            &b.park.to_string(),
            "--barrier",
            &b.id.to_string(),
        ])
        .args(["--direction", b.direction])
        .args(["--key", key, "--at", at])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("pms device barrier");
    std::io::Write::write_all(
        child.stdin.as_mut().expect("stdin"),
        format!("{plate}\n").as_bytes(),
    )
    .expect("plate");
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("answer");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON answer: {text}"))
}

/// Asks `ask` up to 100 times, 100 ms apart, until it answers `Some`: the events between the
/// services are applied after the request that wrote them.
fn eventually<T>(what: &str, mut ask: impl FnMut() -> Option<T>) -> T {
    for _ in 0..100 {
        if let Some(v) = ask() {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{what}: never");
}

#[test]
fn an_operator_builds_a_park_from_nothing_and_a_supervisor_reads_every_step() {
    let data = tempfile::tempdir().expect("data");
    let port = free_port();
    let up = Command::new(PMS)
        .args(["up", "--no-seed-parks", "--data-dir"])
        .arg(data.path().join("pd"))
        .args(["--passage-delay-h", "1000000"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--tls-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
        .args([
            "--users-listen",
            "127.0.0.1:0",
            "--parks-listen",
            "127.0.0.1:0",
        ])
        .args([
            "--payments-listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .args(["--argon2-m-kib", "64", "--argon2-t", "1"])
        .args(["--cors-origin", "http://localhost:5173"])
        .env("PMS_SEED_PASSWORD", PASSWORD)
        .env("PMS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pms up");
    let _up = Up(up);
    wait_for_port(port);
    // A front end of the operator's own, served elsewhere, may call the API from the browser.
    let preflight = exchange(
        port,
        "OPTIONS /parks HTTP/1.1\r\nhost: x\r\norigin: http://localhost:5173\r\n\
         access-control-request-method: POST\r\n\
         access-control-request-headers: authorization, content-type\r\nconnection: close\r\n\r\n",
    );
    assert!(preflight.starts_with("HTTP/1.1 204"), "{preflight}");
    assert!(
        preflight
            .to_ascii_lowercase()
            .contains("access-control-allow-origin: http://localhost:5173"),
        "{preflight}"
    );
    let pm = login(port, "parkmanager@isep.ipp.pt");
    let pm = Some(pm.as_str());
    let (status, parks) = call(port, "GET", "/parks/getAllParks", pm, &Value::Null);
    assert_eq!((status, parks), (200, json!([])), "no park to begin with");

    // The park, its spots, an entrance and an exit, a display, and the barriers' own keys.
    let park = json!({"name": "Station", "latitude": 41.15, "longitude": -8.61,
        "timeZone": "Europe/Lisbon", "parkiesPerHour": 10, "parkiesPerMinute": 0});
    let (status, made) = call(port, "POST", "/parks", pm, &park);
    assert_eq!(status, 201, "{made}");
    let (id, number) = (
        made["parkId"].as_i64().expect("id"),
        made["parkNumber"].as_i64().expect("n"),
    );
    let spots =
        json!({"floorLevel": "A", "spotVehicleType": "AUTOMOBILE", "spotType": "FUEL", "count": 2});
    let (status, added) = call(port, "POST", &format!("/parks/{number}/spots"), pm, &spots);
    assert_eq!(status, 201, "{added}");
    let mut barriers = Vec::new();
    for (name, direction) in [("E1", "ENTRANCE"), ("X1", "EXIT")] {
        let body = json!({"barrierNumber": name, "direction": direction});
        let (status, b) = call(
            port,
            "POST",
            &format!("/parks/{number}/barriers"),
            pm,
            &body,
        );
        assert_eq!(status, 201, "{b}");
        let barrier_id = b["barrierId"].as_i64().expect("barrier id");
        let body = json!({"device": "BARRIER", "deviceID": barrier_id});
        let (status, k) = call(
            port,
            "POST",
            &format!("/parks/devices/{number}/key"),
            pm,
            &body,
        );
        assert_eq!(status, 200, "{k}");
        barriers.push((barrier_id, k["key"].as_str().expect("key").to_owned()));
    }
    let [(entrance, entrance_key), (exit, exit_key)] = <[_; 2]>::try_from(barriers).expect("two");
    let entrance = Barrier {
        park: id,
        id: entrance,
        direction: "entrance",
        key: &entrance_key,
    };
    let exit = Barrier {
        park: id,
        id: exit,
        direction: "exit",
        key: &exit_key,
    };
    let body = json!({"displayNumber": "D1", "barrierID": exit.id});
    let (status, shown) = call(
        port,
        "POST",
        &format!("/parks/{number}/displays"),
        pm,
        &body,
    );
    assert_eq!(status, 201, "{shown}");

    // Rui's car in and out with the issued keys: the exit prices it and says the coins earned.
    let went_in = pass(data.path(), &entrance, "28-XQ-51", "2024-07-01T08:30:00Z");
    assert_eq!(went_in["success"], true, "{went_in}");
    let went_out = pass(data.path(), &exit, "28-XQ-51", "2024-07-01T10:30:00Z");
    assert_eq!(went_out["success"], true, "{went_out}");
    let said = went_out["message"].as_str().unwrap_or("");
    assert!(said.ends_with("You earned 20 PARKY coins."), "{said}");
    let rui = login(port, "ruiSoares@isep.ipp.pt");
    let rui = Some(rui.as_str());
    let invoice = eventually("the invoice", || {
        let (_, mine) = call(port, "GET", "/payments/mine", rui, &Value::Null);
        mine.as_array().and_then(|a| a.first().cloned())
    });
    assert_eq!(invoice["parkId"], id, "{invoice}");
    eventually("the coins earned", || {
        let (_, wallet) = call(port, "GET", "/users/parkies/6", rui, &Value::Null);
        (wallet["parkies"] == 20).then_some(())
    });

    // Rui blocked by the customer manager: his next car is refused once parks has heard.
    let cm = login(port, "customermanager@isep.ipp.pt");
    let block = json!({"status": "BLOCKED", "reason": "Unpaid visits"});
    let (status, set) = call(port, "PUT", "/users/6/status", Some(&cm), &block);
    assert_eq!(status, 200, "{set}");
    let mut minute = 0;
    let refused = eventually("the block reaching the parks", || {
        minute += 1;
        let at = format!("2024-07-02T09:{minute:02}:00Z");
        let r = pass(data.path(), &entrance, "32-VT-07", &at);
        if r["success"] == true {
            // Not heard yet: let the car out and try again.
            let out = format!("2024-07-02T09:{minute:02}:30Z");
            pass(data.path(), &exit, "32-VT-07", &out);
            return None;
        }
        Some(r)
    });
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("You have reached")),
        "{refused}"
    );

    // The supervisor reads every step, in the service that owns it.
    let sup = login(port, "supervisor@isep.ipp.pt");
    let sup = Some(sup.as_str());
    let (_, trail) = call(port, "GET", "/parks/audit", sup, &Value::Null);
    let actions: Vec<&str> = trail
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        [
            "display.created",
            "device.key_issued",
            "barrier.created",
            "device.key_issued",
            "barrier.created",
            "spots.created",
            "park.created"
        ],
        "{trail}"
    );
    let (_, trail) = call(
        port,
        "GET",
        "/users/audit?subject=user%206",
        sup,
        &Value::Null,
    );
    assert_eq!(trail[0]["action"], "customer.blocked", "{trail}");
    assert_eq!(trail[0]["after"]["reason"], "Unpaid visits");
}
