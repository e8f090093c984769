//! The front office through `pms up`'s gateway, as a browser without scripts uses it: the
//! session cookie's flags, CSRF refusals, a wrong password, a registration refused beside the
//! field the API names and then accepted, the account page with the new car, signing out, and
//! the security headers on every answer.

mod common;

use std::process::{Child, Command, Stdio};

use std::net::Ipv4Addr;

use common::{free_port, get, get_from, post, post_from, wait_for_port, Page};

const PMS: &str = env!("CARGO_BIN_EXE_pms");

struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Signs `email` in with the seed password; returns the session id.
fn sign_in(port: u16, email: &str) -> String {
    common::sign_in(port, email, "Chosen#Password1")
}

/// A demo car through park 1's barrier `barrier` with the data directory's device keys.
fn barrier(
    data: &std::path::Path,
    barrier: &str,
    direction: &str,
    plate: &str,
    at: &str,
) -> String {
    let mut child = Command::new(PMS)
        .args(["device", "barrier", "--data-dir"])
        .arg(data.join("pd"))
        .args([
            "--park",
            "1",
            "--barrier",
            barrier,
            "--direction",
            direction,
            "--at",
            at,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        child.stdin.as_mut().unwrap(),
        format!("{plate}\n").as_bytes(),
    )
    .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

fn start() -> (tempfile::TempDir, Up, u16) {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let up = Command::new(PMS)
        .args(["up", "--data-dir"])
        .arg(data.path().join("pd"))
        // The passages replay fixed dates of 2024: believe barrier times that far behind.
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
        .env("PMS_SEED_PASSWORD", "Chosen#Password1")
        .env("PMS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = Up(up);
    wait_for_port(port);
    (data, up, port)
}

#[test]
fn a_person_registers_signs_out_and_signs_in_through_the_front_office() {
    let (_data, _up, port) = start();

    // The site's bare address leads to the front office (it was the API's JSON 404), and the
    // start page sends a newcomer to sign in.
    let home = get(port, "/", None);
    assert_eq!(home.status, 303, "{}", home.body);
    assert_eq!(home.header("location"), Some("/app/"));
    let start = get(port, "/app/", None);
    assert_eq!(start.status, 303);
    assert_eq!(start.header("location"), Some("/app/signin"));

    // The sign-in page opens a session: an HttpOnly, SameSite=Strict, Secure cookie, and a CSP
    // that lets no script run but the front office's own files (and this page has none).
    let signin = get(port, "/app/signin", None);
    assert_eq!(signin.status, 200, "{}", signin.body);
    let cookie = signin.header("set-cookie").expect("a session cookie");
    for flag in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/app"] {
        assert!(cookie.contains(flag), "{flag} in {cookie}");
    }
    let csp = signin.header("content-security-policy").expect("a CSP");
    assert!(
        csp.contains("default-src 'none'")
            && csp.contains("script-src 'self';")
            && !csp.contains("unsafe"),
        "{csp}"
    );
    assert!(!signin.body.contains("<script"));
    assert_eq!(signin.header("x-frame-options"), Some("DENY"));
    assert!(
        signin.body.contains("<label for=\"email\">"),
        "labelled fields"
    );
    let anon = signin.session().expect("session id");
    let csrf = signin.csrf();

    // A form without the session's CSRF token is refused, and nothing happens.
    let forged = post(
        port,
        "/app/signin",
        Some(&anon),
        &[
            ("csrf", "0"),
            ("email", "supervisor@isep.ipp.pt"),
            ("password", "Chosen#Password1"),
        ],
    );
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(forged.session().is_none());
    let cross_site = post(
        port,
        "/app/signin",
        None,
        &[
            ("csrf", &csrf),
            ("email", "supervisor@isep.ipp.pt"),
            ("password", "Chosen#Password1"),
        ],
    );
    assert_eq!(cross_site.status, 403, "no cookie, no sign-in");

    // A wrong password says so on the form; the e-mail stays typed in.
    let wrong = post(
        port,
        "/app/signin",
        Some(&anon),
        &[
            ("csrf", &csrf),
            ("email", "supervisor@isep.ipp.pt"),
            ("password", "Wrong#Password1"),
        ],
    );
    assert_eq!(wrong.status, 401);
    assert!(
        wrong.body.contains("wrong e-mail or password"),
        "{}",
        wrong.body
    );
    assert!(wrong.body.contains("value=\"supervisor@isep.ipp.pt\""));

    // Registering: the API's refusal appears beside the field it names, the password is not
    // sent back, and user-typed text is escaped.
    let page = get(port, "/app/register", Some(&anon));
    let csrf = page.csrf();
    let mut form = vec![
        ("csrf", csrf.as_str()),
        ("firstName", "Ana <b>"),
        ("lastName", "Lima"),
        ("email", "ana@example.pt"),
        ("password", "short"),
        ("nif", "234567890"),
        ("licensePlateNumber", "AB-12-CD"),
        ("vehicleType", "AUTOMOBILE"),
        ("vehicleEnergySource", "ELECTRIC"),
    ];
    let refused = post(port, "/app/register", Some(&anon), &form);
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("id=\"password-error\""),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("aria-invalid=\"true\""));
    assert!(
        !refused.body.contains("value=\"short\""),
        "no password echoed"
    );
    assert!(refused.body.contains("Ana &#60;b&#62;") || refused.body.contains("Ana &lt;b&gt;"));
    assert!(!refused.body.contains("Ana <b>"), "escaped");
    assert!(refused
        .body
        .contains("<option value=\"ELECTRIC\" selected>"));

    // Accepted: signed in on a new session (not the anonymous one), and the account shows the car.
    form[4] = ("password", "Longer#Password1");
    form[1] = ("firstName", "Ana");
    let created = post(port, "/app/register", Some(&anon), &form);
    assert_eq!(created.status, 303, "{}", created.body);
    assert_eq!(created.header("location"), Some("/app/account"));
    let session = created.session().expect("a signed-in session");
    assert_ne!(session, anon, "a new session id after signing in");
    assert_eq!(
        get(port, "/app/account", Some(&anon)).status,
        303,
        "the old id is dead"
    );
    let account = get(port, "/app/account", Some(&session));
    assert_eq!(account.status, 200, "{}", account.body);
    assert!(account.body.contains("<dd>Ana</dd>") && account.body.contains("<dd>CUSTOMER</dd>"));
    assert!(account.body.contains("AB-12-CD"), "{}", account.body);
    assert!(account.body.contains("<strong id=\"coins\">0</strong>"));
    assert_eq!(account.header("cache-control"), Some("no-store"));

    // Signing out needs the session's token too, then ends the session.
    let csrf = account.csrf();
    assert_eq!(
        post(port, "/app/signout", Some(&session), &[("csrf", "x")]).status,
        403
    );
    let out = post(port, "/app/signout", Some(&session), &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    assert!(out
        .header("set-cookie")
        .is_some_and(|c| c.contains("Max-Age=0")));
    assert_eq!(get(port, "/app/account", Some(&session)).status, 303);

    // And in again with the password chosen at registration.
    let again = common::try_sign_in(port, "ana@example.pt", "Longer#Password1");
    assert_eq!(again.status, 303, "{}", again.body);
    let account = get(port, "/app/account", again.session().as_deref());
    assert!(account.body.contains("AB-12-CD"));

    // The stylesheet is embedded in the binary.
    let css = get(port, "/app/assets/style.css", None);
    assert_eq!(css.status, 200);
    assert!(css
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/css")));
    assert_eq!(get(port, "/app/assets/missing.js", None).status, 404);
}

#[test]
fn a_customer_adds_a_vehicle_chooses_how_to_pay_and_sees_a_visit_and_its_invoice() {
    let (data, _up, port) = start();
    // Rui has the three vehicles an account may have: no form to add a fourth.
    let rui = sign_in(port, "ruiSoares@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&rui));
    assert_eq!(account.status, 200, "{}", account.body);
    assert!(
        account.body.contains("28-XQ-51"),
        "the demo car: {}",
        account.body
    );
    assert!(account.body.contains("Three vehicles is the most"));
    assert!(!account.body.contains("action=\"/app/vehicles\""));

    let session = sign_in(port, "leoKim@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&session));
    assert!(account.body.contains("55-ND-41"), "{}", account.body);
    let csrf = account.csrf();

    // A bad plate is refused beside the vehicle form; nothing is added.
    let refused = post(
        port,
        "/app/vehicles",
        Some(&session),
        &[
            ("csrf", &csrf),
            ("licensePlateNumber", "12345"),
            ("vehicleType", "AUTOMOBILE"),
            ("vehicleEnergySource", "FUEL"),
        ],
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("id=\"plate-error\""),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("value=\"12345\""),
        "the typed plate stays"
    );
    // Without the CSRF token, nothing either.
    let forged = post(
        port,
        "/app/vehicles",
        Some(&session),
        &[
            ("licensePlateNumber", "77-AB-77"),
            ("vehicleType", "AUTOMOBILE"),
            ("vehicleEnergySource", "FUEL"),
        ],
    );
    assert_eq!(forged.status, 403);
    // A good one is added, and the page says so after the redirect.
    let added = post(
        port,
        "/app/vehicles",
        Some(&session),
        &[
            ("csrf", &csrf),
            ("licensePlateNumber", "77-ab-77"),
            ("vehicleType", "MOTORCYCLE"),
            ("vehicleEnergySource", "ELECTRIC"),
        ],
    );
    assert_eq!(added.status, 303, "{}", added.body);
    assert_eq!(added.header("location"), Some("/app/account?done=vehicle"));
    let account = get(port, "/app/account?done=vehicle", Some(&session));
    assert!(account.body.contains("Vehicle added."));
    assert!(
        account.body.contains("77-AB-77") && account.body.contains("MOTORCYCLE"),
        "{}",
        account.body
    );
    assert!(!account.body.contains("100-AB-77"));
    assert!(
        !account.body.contains("Three vehicles is the most"),
        "two of three"
    );

    // The payment method and the coin flag, saved and shown.
    let saved = post(
        port,
        "/app/payment-method",
        Some(&session),
        &[("csrf", &csrf), ("paymentMethod", "PAYPAL")],
    );
    assert_eq!(saved.status, 303, "{}", saved.body);
    let flagged = post(
        port,
        "/app/coins",
        Some(&session),
        &[("csrf", &csrf), ("parkyFlag", "on")],
    );
    assert_eq!(flagged.status, 303, "{}", flagged.body);
    let account = get(port, "/app/account", Some(&session));
    assert!(
        account.body.contains("<option value=\"PAYPAL\" selected>"),
        "{}",
        account.body
    );
    assert!(
        account.body.contains("id=\"parkyFlag\" checked"),
        "{}",
        account.body
    );
    let unflagged = post(port, "/app/coins", Some(&session), &[("csrf", &csrf)]);
    assert_eq!(unflagged.status, 303);
    assert!(!get(port, "/app/account", Some(&session))
        .body
        .contains("id=\"parkyFlag\" checked"));

    // A visit through the device endpoints: the visits page shows it with its price, and the
    // invoice.
    let session = rui;
    let empty = get(port, "/app/visits", Some(&session));
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert!(empty.body.contains("No visit yet.") && empty.body.contains("No invoice yet."));
    assert!(barrier(
        data.path(),
        "1",
        "entrance",
        "28-XQ-51",
        "2024-07-01T08:30:00Z"
    )
    .contains("\"success\":true"));
    assert!(
        barrier(data.path(), "2", "exit", "28-XQ-51", "2024-07-01T09:30:00Z")
            .contains("Your total will be 0.6")
    );
    // The barrier said the price at once; the invoice, and with it the visit's price, follows
    // through the events. Times are the park's (Lisbon, summer time), as its prices are.
    let mut visits = get(port, "/app/visits", Some(&session));
    for _ in 0..500 {
        if visits.body.contains("ISSUED") && visits.body.contains("0.6 €") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        visits = get(port, "/app/visits", Some(&session));
    }
    assert!(
        visits.body.contains("2024-07-01 09:30 WEST") && visits.body.contains("1 h 00 min"),
        "{}",
        visits.body
    );
    assert!(visits.body.contains("0.6 €"), "the price: {}", visits.body);
    assert!(
        visits.body.contains("ISSUED"),
        "the invoice: {}",
        visits.body
    );
    // A second, later visit: listed first, as the page and docs/web.md say (it listed the
    // oldest first).
    assert!(barrier(
        data.path(),
        "1",
        "entrance",
        "28-XQ-51",
        "2024-07-03T08:30:00Z"
    )
    .contains("\"success\":true"));
    assert!(
        barrier(data.path(), "2", "exit", "28-XQ-51", "2024-07-03T10:30:00Z")
            .contains("\"success\":true")
    );
    let mut visits = get(port, "/app/visits", Some(&session));
    for _ in 0..500 {
        if visits.body.matches("ISSUED").count() == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        visits = get(port, "/app/visits", Some(&session));
    }
    let at = |text: &str| visits.body.find(text).unwrap_or(usize::MAX);
    assert!(
        at("2024-07-03 09:30 WEST") < at("2024-07-01 09:30 WEST"),
        "newest visit first: {}",
        visits.body
    );
    let invoices = &visits.body[visits.body.find("id=\"invoices\"").expect("invoices")..];
    let at = |text: &str| invoices.find(text).unwrap_or(usize::MAX);
    assert!(
        at("2024-07-03 11:30 WEST") < at("2024-07-01 10:30 WEST")
            && at("2024-07-01 10:30 WEST") != usize::MAX,
        "newest invoice first: {}",
        visits.body
    );

    // Someone else's pages are not reachable: a manager sees who they are, no customer forms.
    let manager = sign_in(port, "customermanager@isep.ipp.pt");
    let page = get(port, "/app/account", Some(&manager));
    assert!(page.body.contains("CUSTOMER_MANAGER") && !page.body.contains("/app/vehicles"));
}

#[test]
fn staff_screens_open_to_their_roles_only() {
    let (_data, _up, port) = start();

    // A customer opening a manager's page is told which role it needs.
    let leo = sign_in(port, "leoKim@isep.ipp.pt");
    for path in ["/app/users", "/app/parks", "/app/parks/1", "/app/events"] {
        let r = get(port, path, Some(&leo));
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(
            r.body.contains("Not allowed") && r.body.contains("CUSTOMER"),
            "{}",
            r.body
        );
    }

    // The customer manager: every user, a search, coins granted to the ticked ones.
    let cm = sign_in(port, "customermanager@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&cm));
    assert!(
        account.body.contains("href=\"/app/users\"")
            && !account.body.contains("href=\"/app/parks\"")
    );
    let list = get(port, "/app/users", Some(&cm));
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains("6 user(s)"), "{}", list.body);
    let found = get(port, "/app/users?q=GUPTA", Some(&cm));
    assert!(found.body.contains("1 user(s)") && found.body.contains("mayaGupta@isep.ipp.pt"));
    let maya_id = {
        let at = found
            .body
            .find("name=\"userIds\" value=\"")
            .expect("a checkbox")
            + 22;
        found.body[at..].split('"').next().unwrap().to_owned()
    };
    let csrf = list.csrf();
    let no_reason = post(
        port,
        "/app/users/grant",
        Some(&cm),
        &[
            ("csrf", &csrf),
            ("userIds", &maya_id),
            ("amount", "150"),
            ("reason", ""),
        ],
    );
    assert_eq!(no_reason.status, 400, "{}", no_reason.body);
    assert!(no_reason.body.contains("id=\"grant-error\""));
    let granted = post(
        port,
        "/app/users/grant",
        Some(&cm),
        &[
            ("csrf", &csrf),
            ("userIds", &maya_id),
            ("userIds", "4"),
            ("amount", "150"),
            ("reason", "welcome"),
        ],
    );
    assert_eq!(granted.status, 303, "{}", granted.body);
    let list = get(port, "/app/users?done=grant&q=isep", Some(&cm));
    assert!(list.body.contains("Coins updated."));
    assert!(list.body.contains("<td>150</td>"), "{}", list.body);
    assert!(
        list.body
            .contains("Maya Gupta (mayaGupta@isep.ipp.pt): 150"),
        "top 10: {}",
        list.body
    );
    let too_much = post(
        port,
        "/app/users/grant",
        Some(&cm),
        &[
            ("csrf", &csrf),
            ("userIds", &maya_id),
            ("amount", "-1000"),
            ("reason", "oops"),
        ],
    );
    assert_eq!(too_much.status, 409, "{}", too_much.body);
    // The same grant form posted twice at once (a double click): done once. It was done twice.
    let form = get(port, "/app/users?q=GUPTA", Some(&cm));
    let (csrf, once) = (form.csrf(), form.hidden("once"));
    let twice: Vec<_> = (0..2)
        .map(|_| {
            let (cm, csrf, once, maya) = (cm.clone(), csrf.clone(), once.clone(), maya_id.clone());
            std::thread::spawn(move || {
                post(
                    port,
                    "/app/users/grant",
                    Some(&cm),
                    &[
                        ("csrf", &csrf),
                        ("once", &once),
                        ("userIds", &maya),
                        ("amount", "25"),
                        ("reason", "double click"),
                    ],
                )
                .status
            })
        })
        .collect();
    for t in twice {
        assert_eq!(t.join().expect("post"), 303);
    }
    let list = get(port, "/app/users?q=isep", Some(&cm));
    assert!(
        list.body
            .contains("Maya Gupta (mayaGupta@isep.ipp.pt): 175"),
        "150 and one grant of 25: {}",
        list.body
    );

    // Maya blocked, with why: signing in, she is told; enabled again, she signs in.
    let status = |state: &str, reason: &str, csrf: &str| {
        post(
            port,
            "/app/users/status",
            Some(&cm),
            &[
                ("csrf", csrf),
                ("userId", &maya_id),
                ("status", state),
                ("reason", reason),
            ],
        )
    };
    let list = get(port, "/app/users", Some(&cm));
    assert!(list.body.contains("Block a customer, or enable them again"));
    let no_reason = status("BLOCKED", "", &list.csrf());
    assert_eq!(no_reason.status, 400, "{}", no_reason.body);
    assert!(
        no_reason.body.contains("reason: must be 1 to 500"),
        "{}",
        no_reason.body
    );
    let blocked = status("BLOCKED", "Unpaid visits", &list.csrf());
    assert_eq!(blocked.status, 303, "{}", blocked.body);
    let list = get(port, "/app/users?done=status&q=gupta", Some(&cm));
    assert!(list.body.contains("Status set") && list.body.contains("<td>BLOCKED</td>"));
    let signin = get(port, "/app/signin", None);
    let refused = post(
        port,
        "/app/signin",
        signin.session().as_deref(),
        &[
            ("csrf", &signin.csrf()),
            ("email", "mayaGupta@isep.ipp.pt"),
            ("password", "Chosen#Password1"),
        ],
    );
    assert!(
        refused
            .body
            .contains("this account is blocked: Unpaid visits"),
        "{}",
        refused.body
    );
    assert_eq!(status("ENABLED", "Paid", &list.csrf()).status, 303);
    sign_in(port, "mayaGupta@isep.ipp.pt");

    // The supervisor reads the list but grants nothing.
    let sup = sign_in(port, "supervisor@isep.ipp.pt");
    let list = get(port, "/app/users", Some(&sup));
    assert_eq!(list.status, 200);
    assert!(!list.body.contains("name=\"userIds\"") && !list.body.contains("name=\"amount\""));
    let refused = post(
        port,
        "/app/users/grant",
        Some(&sup),
        &[
            ("csrf", &list.csrf()),
            ("userIds", &maya_id),
            ("amount", "5"),
            ("reason", "x"),
        ],
    );
    assert_eq!(refused.status, 403);

    // The park manager: the parks, a spot taken out of service and back.
    let pm = sign_in(port, "parkmanager@isep.ipp.pt");
    let parks = get(port, "/app/parks", Some(&pm));
    assert_eq!(parks.status, 200, "{}", parks.body);
    assert_eq!(parks.body.matches("href=\"/app/parks/").count(), 5);
    let park = get(port, "/app/parks/1", Some(&pm));
    assert!(
        park.body.contains("<strong id=\"free\">8</strong> of 12"),
        "{}",
        park.body
    );
    let out = post(
        port,
        "/app/parks/1/spots",
        Some(&pm),
        &[
            ("csrf", &park.csrf()),
            ("spotNumber", "A2"),
            ("operational", "false"),
        ],
    );
    assert_eq!(out.status, 303, "{}", out.body);
    let park = get(port, "/app/parks/1?done=spot", Some(&pm));
    assert!(
        park.body.contains("Spot updated.") && park.body.contains("<strong id=\"free\">7</strong>")
    );
    assert!(park.body.contains("Put back spot A2"));
    let unknown = post(
        port,
        "/app/parks/1/spots",
        Some(&pm),
        &[
            ("csrf", &park.csrf()),
            ("spotNumber", "Z9"),
            ("operational", "false"),
        ],
    );
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(get(port, "/app/parks/99", Some(&pm)).status, 404);
    assert_eq!(get(port, "/app/events", Some(&pm)).status, 403);

    // The supervisor: every service's set-aside events (none here), and a retry of one that is
    // not set aside is refused with the services' words.
    let sv = sign_in(port, "supervisor@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&sv));
    assert!(
        account.body.contains("href=\"/app/events\""),
        "{}",
        account.body
    );
    let events = get(port, "/app/events", Some(&sv));
    assert_eq!(events.status, 200, "{}", events.body);
    assert!(events.body.contains("id=\"no-events\""), "{}", events.body);
    assert!(
        !events.body.contains("could not be read"),
        "{}",
        events.body
    );
    let retry = |csrf: &str, consumer: &str, id: &str| {
        post(
            port,
            "/app/events/retry",
            Some(&sv),
            &[
                ("csrf", csrf),
                ("consumer", consumer),
                ("source", "parks"),
                ("id", id),
            ],
        )
    };
    let missing = retry(&events.csrf(), "payments", "424242");
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(missing.body.contains("is set aside"), "{}", missing.body);
    assert_eq!(retry(&events.csrf(), "gateway", "1").status, 400);
    assert_eq!(retry("forged", "payments", "1").status, 403);
}

/// The value of the page's first `name="NAME" value="…"` input.
fn value_of(page: &Page, name: &str) -> String {
    let key = format!("name=\"{name}\" ");
    let at = page.body.find(&key).expect(name);
    let rest = &page.body[at..];
    let v = rest.find("value=\"").expect("a value") + 7;
    rest[v..].split('"').next().unwrap_or_default().to_owned()
}

#[test]
fn a_park_manager_sets_thresholds_the_overnight_fee_and_prices_and_reads_usage_as_charts() {
    let (data, _up, port) = start();

    let leo = sign_in(port, "leoKim@isep.ipp.pt");
    for path in ["/app/parks/1/prices", "/app/parks/1/report"] {
        assert_eq!(get(port, path, Some(&leo)).status, 403, "{path}");
    }
    let pm = sign_in(port, "parkmanager@isep.ipp.pt");

    // PARKY thresholds: a refusal beside the form with what was typed, then saved.
    let park = get(port, "/app/parks/1", Some(&pm));
    assert_eq!(value_of(&park, "parkiesPerHour"), "15");
    let csrf = park.csrf();
    let bad = post(
        port,
        "/app/parks/1/thresholds",
        Some(&pm),
        &[
            ("csrf", &csrf),
            ("parkiesPerHour", "-1"),
            ("parkiesPerMinute", "1"),
        ],
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("id=\"thresholds-error\""), "{}", bad.body);
    assert_eq!(value_of(&bad, "parkiesPerHour"), "-1", "kept as typed");
    let saved = post(
        port,
        "/app/parks/1/thresholds",
        Some(&pm),
        &[
            ("csrf", &csrf),
            ("parkiesPerHour", "20"),
            ("parkiesPerMinute", "2"),
        ],
    );
    assert_eq!(saved.status, 303, "{}", saved.body);
    let park = get(port, "/app/parks/1?done=thresholds", Some(&pm));
    assert!(park.body.contains("PARKY thresholds saved."));
    assert_eq!(value_of(&park, "parkiesPerHour"), "20");
    assert_eq!(value_of(&park, "parkiesPerMinute"), "2");

    // The overnight fee of park 3 (8 €, off): too high is refused, then 5 € switched on.
    let park3 = get(port, "/app/parks/3", Some(&pm));
    assert_eq!(value_of(&park3, "overnightFee"), "8");
    assert!(!park3.body.contains("id=\"overnightOn\" checked"));
    let too_high = post(
        port,
        "/app/parks/3/overnight",
        Some(&pm),
        &[
            ("csrf", &csrf),
            ("overnightFee", "99999"),
            ("overnightOn", "on"),
        ],
    );
    assert_eq!(too_high.status, 400, "{}", too_high.body);
    assert!(too_high.body.contains("id=\"overnight-error\""));
    let on = post(
        port,
        "/app/parks/3/overnight",
        Some(&pm),
        &[
            ("csrf", &csrf),
            ("overnightFee", "5"),
            ("overnightOn", "on"),
        ],
    );
    assert_eq!(on.status, 303, "{}", on.body);
    let park3 = get(port, "/app/parks/3?done=overnight", Some(&pm));
    assert_eq!(value_of(&park3, "overnightFee"), "5");
    assert!(park3.body.contains("id=\"overnightOn\" checked"));

    // A spot taken out shows who did it and when.
    let out = post(
        port,
        "/app/parks/1/spots",
        Some(&pm),
        &[
            ("csrf", &csrf),
            ("spotNumber", "A2"),
            ("operational", "false"),
        ],
    );
    assert_eq!(out.status, 303);
    let park = get(port, "/app/parks/1", Some(&pm));
    let row = park
        .body
        .split("<tr>")
        .find(|r| r.contains("<td>A2</td>"))
        .expect("A2");
    assert!(row.contains("UTC</td>"), "{row}");

    // The price table: the seeded one as a form, previewed with changes, refused, saved.
    let prices = get(port, "/app/parks/3/prices", Some(&pm));
    assert_eq!(prices.status, 200, "{}", prices.body);
    assert_eq!(value_of(&prices, "p0.start"), "9:00");
    assert!(prices.body.contains("Add a period") && prices.body.contains("Europe/Lisbon"));
    assert!(
        prices.body.contains("5 € a night"),
        "the overnight fee now on"
    );
    let table = |block_minutes: &'static str, end: &'static str, action: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("p0.start", "0:00".to_owned()),
            ("p0.end", end.to_owned()),
            ("p0.b0.minutes", block_minutes.to_owned()),
            ("p0.b0.car", "1.50".to_owned()),
            ("p0.b0.moto", "0.75".to_owned()),
            ("p0.b1.minutes", String::new()),
            ("p0.b1.car", String::new()),
            ("p0.b1.moto", String::new()),
            ("p1.start", String::new()),
            ("p1.end", String::new()),
            ("p1.b0.minutes", String::new()),
            ("graceMinutes", String::new()),
            ("dailyMaximum", String::new()),
            ("dailyMaximumResetsAt", String::new()),
            ("minimumCharge", String::new()),
            ("vehicle", "AUTOMOBILE".to_owned()),
            ("arrival", "2030-01-10T22:30".to_owned()),
            ("minutes", "120".to_owned()),
            ("action", action.to_owned()),
        ]
    };
    let send = |form: Vec<(&str, String)>| {
        let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        post(port, "/app/parks/3/prices", Some(&pm), &pairs)
    };
    // Two hours from 22:30 across midnight: two blocks of 60 min at 1.50 and one night at 5 €.
    let preview = send(table("60", "0:00", "preview"));
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(
        preview.body.contains("id=\"preview-total\">8.00 €"),
        "{}",
        preview.body
    );
    assert!(preview.body.contains("Overnight fee"));
    let zero = send(table("0", "0:00", "preview"));
    assert_eq!(zero.status, 400);
    assert!(
        zero.body.contains("Period 1, block 1, minutes:"),
        "{}",
        zero.body
    );
    assert!(zero.body.contains("aria-invalid=\"true\""));
    let gap = send(table("60", "21:00", "save"));
    assert_eq!(gap.status, 400, "a gap is refused before it is sent");
    assert!(gap.body.contains("cover the whole day"), "{}", gap.body);
    assert_eq!(
        value_of(&get(port, "/app/parks/3/prices", Some(&pm)), "p0.start"),
        "9:00",
        "nothing saved"
    );
    let saved = send(table("60", "0:00", "save"));
    assert_eq!(saved.status, 303, "{}", saved.body);
    let prices = get(port, "/app/parks/3/prices?done=saved", Some(&pm));
    assert!(prices.body.contains("Price table saved."));
    assert_eq!(value_of(&prices, "p0.start"), "0:00");
    assert_eq!(value_of(&prices, "p0.b0.car"), "1.5");

    // The usage report: one visit through park 1, then the charts.
    assert!(barrier(
        data.path(),
        "1",
        "entrance",
        "28-XQ-51",
        "2024-07-01T08:30:00Z"
    )
    .contains("\"success\":true"));
    assert!(
        barrier(data.path(), "2", "exit", "28-XQ-51", "2024-07-01T09:30:00Z")
            .contains("\"success\":true")
    );
    let report = get(port, "/app/parks/1/report?period=day", Some(&pm));
    assert_eq!(report.status, 200, "{}", report.body);
    assert!(report.body.contains("<strong id=\"total\">1</strong>"));
    assert!(report.body.contains("<svg") && report.body.contains("id=\"vehicles\""));
    assert!(report.body.contains("100.0 %"), "one car: {}", report.body);
    assert!(
        report.body.contains("2024-07-01") && report.body.contains("1 h 00 min"),
        "{}",
        report.body
    );
    assert_eq!(
        get(port, "/app/parks/1/report?period=week", Some(&pm)).status,
        400
    );

    // The operator's view: each barrier with its displays and what they show after that visit.
    let devices = get(port, "/app/parks/1/devices", Some(&pm));
    assert_eq!(devices.status, 200, "{}", devices.body);
    assert!(
        devices.body.contains("Barrier B1.1: entrance"),
        "{}",
        devices.body
    );
    assert!(devices
        .body
        .contains("Barrier B3.1: entrance (switched off)"));
    let b11 = devices
        .body
        .split("Barrier B1.2")
        .next()
        .unwrap_or_default();
    assert!(
        b11.contains("D1.1") && b11.contains("Welcome to the park"),
        "{b11}"
    );
    assert_eq!(get(port, "/app/parks/1/devices", Some(&leo)).status, 403);
    // Switched off and on again from the page.
    let switch = |device: &str, id: &str, state: &str, csrf: &str| {
        post(
            port,
            "/app/parks/1/devices",
            Some(&pm),
            &[
                ("csrf", csrf),
                ("device", device),
                ("deviceID", id),
                ("state", state),
            ],
        )
    };
    let out = switch("BARRIER", "1", "DISABLED", &devices.csrf());
    assert_eq!(out.status, 303, "{}", out.body);
    let off = get(port, "/app/parks/1/devices?done=off", Some(&pm));
    assert!(
        off.body.contains("Barrier B1.1: entrance (switched off)"),
        "{}",
        off.body
    );
    assert!(
        off.body.contains("Switched off: it does nothing"),
        "{}",
        off.body
    );
    assert!(off.body.contains("aria-label=\"Switch on barrier B1.1\""));
    assert_eq!(switch("BARRIER", "1", "ACTIVE", &off.csrf()).status, 303);
    let on = get(port, "/app/parks/1/devices", Some(&pm));
    assert!(
        on.body.contains("aria-label=\"Switch off barrier B1.1\""),
        "{}",
        on.body
    );
    let unknown = switch("DISPLAY", "99", "DISABLED", &on.csrf());
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(switch("BARRIER", "1", "DISABLED", "forged").status, 403);

    // The live feed pages follow: a version at once, a newer one once something changed.
    let nobody = get(port, "/app/live", None);
    assert_eq!(nobody.status, 401);
    let now = get(port, "/app/live", Some(&pm));
    assert_eq!(now.status, 200, "{}", now.body);
    assert_eq!(now.header("cache-control"), Some("no-store"));
    let version: u64 = now
        .body
        .split("\"version\":")
        .nth(1)
        .and_then(|v| v.trim_end_matches('}').parse().ok())
        .expect("a version");
    let back = post(
        port,
        "/app/parks/1/spots",
        Some(&pm),
        &[
            ("csrf", &csrf),
            ("spotNumber", "A2"),
            ("operational", "true"),
        ],
    );
    assert_eq!(back.status, 303);
    let later = get(port, &format!("/app/live?after={version}"), Some(&pm));
    assert_eq!(later.status, 200);
    assert!(
        !later.body.contains(&format!("\"version\":{version}}}")),
        "moved on: {}",
        later.body
    );
    let park = get(port, "/app/parks/1", Some(&pm));
    assert!(park.body.contains("id=\"spots-table\" data-live"));
    assert!(park
        .body
        .contains("<script src=\"/app/assets/live.js\"></script>"));
    let script = get(port, "/app/assets/live.js", None);
    assert_eq!(script.status, 200);
    assert!(script
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/javascript")));
}

#[test]
fn a_customer_finds_parks_near_a_place_and_sees_their_coins_history() {
    let (_data, _up, port) = start();
    let cm = sign_in(port, "customermanager@isep.ipp.pt");
    let list = get(port, "/app/users?q=leoKim", Some(&cm));
    let leo_id = {
        let at = list.body.find("name=\"userIds\" value=\"").expect("leo") + 22;
        list.body[at..].split('"').next().unwrap().to_owned()
    };
    let granted = post(
        port,
        "/app/users/grant",
        Some(&cm),
        &[
            ("csrf", &list.csrf()),
            ("userIds", &leo_id),
            ("amount", "40"),
            ("reason", "a <b>welcome</b> gift"),
        ],
    );
    assert_eq!(granted.status, 303, "{}", granted.body);

    let leo = sign_in(port, "leoKim@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&leo));
    let events = account
        .body
        .split("id=\"coin-events\"")
        .nth(1)
        .expect("events");
    assert!(events.contains("<td>+40</td>"), "{events}");
    assert!(
        events.contains("a &#60;b&#62;welcome&#60;/b&#62; gift")
            || events.contains("a &lt;b&gt;welcome&lt;/b&gt; gift"),
        "escaped: {events}"
    );
    assert!(account.body.contains("href=\"/app/nearby\""));
    assert!(
        account.body.contains("pattern=\""),
        "the plate is checked as it is typed"
    );

    let form = get(port, "/app/nearby", Some(&leo));
    assert_eq!(form.status, 200);
    assert!(form.body.contains("id=\"lat\"") && !form.body.contains("<svg"));
    let near = get(
        port,
        "/app/nearby?lat=41.178496&lon=-8.607637&km=1500",
        Some(&leo),
    );
    assert_eq!(near.status, 200, "{}", near.body);
    assert!(
        near.body.contains("5 parks, nearest first"),
        "{}",
        near.body
    );
    assert_eq!(
        near.body.matches("class=\"park\"").count(),
        5,
        "five markers"
    );
    assert!(near.body.contains(" km</td>"));
    let close = get(
        port,
        "/app/nearby?lat=41.178496&lon=-8.607637&km=4.5",
        Some(&leo),
    );
    assert!(
        close.body.contains("1 park, nearest first"),
        "{}",
        close.body
    );
    let words = get(port, "/app/nearby?lat=north&lon=-8.6", Some(&leo));
    assert_eq!(words.status, 400);
    assert!(words.body.contains("id=\"where-error\""));
    let off_earth = get(port, "/app/nearby?lat=91&lon=0&km=1", Some(&leo));
    assert_eq!(off_earth.status, 400, "{}", off_earth.body);
    assert!(off_earth.body.contains("id=\"where-error\""));
    let sneaky = get(port, "/app/nearby?lat=41&lon=-8&km=1%2F..%2F..", Some(&leo));
    assert_eq!(sneaky.status, 400, "only numbers reach the path");
}

/// Issue 59: the front office signs everyone in through the gateway, which limits sign-ins per
/// client. One visitor (127.0.0.2) posting made-up e-mails until the gateway refuses them must
/// not lock out a person at another address (127.0.0.3): the front office names each person to
/// the gateway, which trusts it by its key. Before, all sign-ins came from the front office's
/// one address and drew from one bucket.
#[test]
fn one_noisy_visitor_does_not_lock_others_out_of_signing_in() {
    let (_data, _up, port) = start();
    let noisy = Ipv4Addr::new(127, 0, 0, 2);
    let form = get_from(noisy, port, "/app/signin", None);
    let (session, csrf) = (form.session(), form.csrf());
    let mut refused = None;
    // The login route's burst is 100, refilled at 10 a second: far fewer than 1,000 tries
    // empty it, however slow the machine.
    for i in 0..1000 {
        let email = format!("nobody{i}@example.com");
        let r = post_from(
            noisy,
            port,
            "/app/signin",
            session.as_deref(),
            &[
                ("csrf", &csrf),
                ("email", &email),
                ("password", "Wrong#Guess1"),
            ],
        );
        if r.status == 429 {
            assert!(r.body.contains("try again"), "{}", r.body);
            refused = Some(i);
            break;
        }
        assert_eq!(r.status, 401, "try {i}: {}", r.body);
    }
    let refused = refused.expect("the gateway stops the noisy visitor");
    assert!(
        refused >= 100,
        "the whole burst first: refused at try {refused}"
    );
    // Someone else, at once: their own bucket is full.
    let quiet = Ipv4Addr::new(127, 0, 0, 3);
    let form = get_from(quiet, port, "/app/signin", None);
    let r = post_from(
        quiet,
        port,
        "/app/signin",
        form.session().as_deref(),
        &[
            ("csrf", &form.csrf()),
            ("email", "leoKim@isep.ipp.pt"),
            ("password", "Chosen#Password1"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/app/account"));
}

#[test]
fn pms_web_runs_alone_in_front_of_a_gateway() {
    let (_data, _up, gateway) = start();
    let port = free_port();
    let web = Command::new(PMS)
        .args(["web", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--gateway-url", &format!("http://127.0.0.1:{gateway}")])
        .env("PMS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _web = Up(web);
    wait_for_port(port);
    // Straight to the standalone front office: it signs in through the gateway.
    let session = sign_in(port, "leoKim@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&session));
    assert_eq!(account.status, 200, "{}", account.body);
    assert!(account.body.contains("55-ND-41"), "{}", account.body);
    // Its own operations endpoints, on its own port (the gateway routes only /app to it).
    assert_eq!(get(port, "/readyz", None).status, 200);
    let metrics = get(port, "/metrics", None);
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .body
            .contains("pms_web_requests_total{status=\"200\"}")
            && metrics
                .body
                .contains("pms_web_requests_total{status=\"303\"}"),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("pms_web_sessions "),
        "{}",
        metrics.body
    );

    let refused = Command::new(PMS)
        .args(["web", "--gateway-url", "https://gateway.example"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("plain http://"));
}

#[test]
fn an_operator_builds_a_park_in_the_front_office_and_a_supervisor_reads_the_trail() {
    let (_data, _up, port) = start();
    let pm = sign_in(port, "parkmanager@isep.ipp.pt");
    let parks = get(port, "/app/parks", Some(&pm));
    assert!(parks.body.contains("Create the park"), "{}", parks.body);
    let csrf = parks.csrf();

    // A park refused beside its form with what was typed, then created.
    let park = |zone: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("name", "Riverside".to_owned()),
            ("address", "Cais 1".to_owned()),
            ("latitude", "41.14".to_owned()),
            ("longitude", "-8.61".to_owned()),
            ("timeZone", zone.to_owned()),
            ("parkNumber", String::new()),
        ]
    };
    let form =
        |fields: &[(&'static str, String)]| -> Vec<(&'static str, String)> { fields.to_vec() };
    let send = |path: &str, fields: Vec<(&'static str, String)>| {
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        post(port, path, Some(&pm), &pairs)
    };
    let bad = send("/app/parks", park("Europe/Atlantis"));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("id=\"new-park-error\""), "{}", bad.body);
    assert_eq!(value_of(&bad, "name"), "Riverside", "kept as typed");
    let made = send("/app/parks", park("Europe/Lisbon"));
    assert_eq!(made.status, 303, "{}", made.body);
    assert_eq!(made.header("location"), Some("/app/parks/6?done=created"));

    // Its spots, its settings and its opening hours.
    let spots = form(&[
        ("csrf", csrf.clone()),
        ("floorLevel", "A".into()),
        ("spotVehicleType", "AUTOMOBILE".into()),
        ("spotType", "FUEL".into()),
        ("count", "3".into()),
    ]);
    assert_eq!(send("/app/parks/6/spots/add", spots.clone()).status, 303);
    let clash = send("/app/parks/6/spots/add", spots);
    assert_eq!(clash.status, 409, "{}", clash.body);
    assert!(
        clash.body.contains("id=\"new-spots-error\""),
        "{}",
        clash.body
    );
    let page = get(port, "/app/parks/6", Some(&pm));
    assert!(page.body.contains("Park 6: Riverside"), "{}", page.body);
    assert!(page.body.contains("of 3 spots free now"), "{}", page.body);
    let retire = |spot: &str| {
        send(
            "/app/parks/6/spots/retire",
            form(&[("csrf", csrf.clone()), ("spotNumber", spot.to_owned())]),
        )
    };
    let retired = retire("A3");
    assert_eq!(retired.status, 303, "{}", retired.body);
    let page = get(port, "/app/parks/6?done=retired", Some(&pm));
    assert!(page.body.contains("Spot retired"), "{}", page.body);
    assert!(page.body.contains("of 2 spots free now"), "{}", page.body);
    let gone = retire("A3");
    assert_eq!(gone.status, 404, "{}", gone.body);
    let settings = form(&[
        ("csrf", csrf.clone()),
        ("name", "Riverside".into()),
        ("address", "Cais 1".into()),
        ("latitude", "41.14".into()),
        ("longitude", "-8.61".into()),
        ("timeZone", "Europe/Lisbon".into()),
        ("mondayHours", "07:00-12:00, 13:00\u{2013}22:00".into()),
        (
            "hoursExceptions",
            "2026-12-25 closed\n\n2026-12-24 08:00-13:00".into(),
        ),
    ]);
    let saved = send("/app/parks/6/settings", settings.clone());
    assert_eq!(saved.status, 303, "{}", saved.body);
    let page = get(port, "/app/parks/6?done=settings", Some(&pm));
    assert!(page.body.contains("Settings saved."));
    assert_eq!(value_of(&page, "mondayHours"), "07:00-12:00, 13:00-22:00");
    assert_eq!(value_of(&page, "tuesdayHours"), "", "closed all day");
    assert!(
        page.body
            .contains(">2026-12-25 closed\n2026-12-24 08:00-13:00</textarea>"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("id=\"entrancesOpen\" checked"),
        "closed to new cars"
    );
    // Refused on the page (not hours at all) and by the API (a span backwards): each beside
    // the form, with everything kept as typed.
    for (day, typed, says) in [
        ("tuesdayHours", "09:00", "is not a span such as 07:00-12:00"),
        ("wednesdayHours", "12:00-09:00", "weekly.wednesday[0]"),
    ] {
        let mut bad = settings.clone();
        bad.push((day, typed.into()));
        let refused = send("/app/parks/6/settings", bad);
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(
            refused.body.contains("id=\"settings-error\""),
            "{}",
            refused.body
        );
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
        assert_eq!(value_of(&refused, day), typed, "kept as typed");
    }
    let mut bad = settings.clone();
    bad.retain(|(k, _)| *k != "hoursExceptions");
    bad.push(("hoursExceptions", "Christmas".into()));
    let refused = send("/app/parks/6/settings", bad);
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("Exceptions, line 1"),
        "{}",
        refused.body
    );

    // A barrier and its display, and a key shown once on a page nobody keeps.
    let barrier = form(&[
        ("csrf", csrf.clone()),
        ("barrierNumber", "E1".into()),
        ("direction", "ENTRANCE".into()),
    ]);
    assert_eq!(
        send("/app/parks/6/devices/barriers", barrier.clone()).status,
        303
    );
    let taken = send("/app/parks/6/devices/barriers", barrier);
    assert_eq!(taken.status, 409, "{}", taken.body);
    let display = form(&[
        ("csrf", csrf.clone()),
        ("displayNumber", "D1".into()),
        ("barrierID", "31".into()),
    ]);
    assert_eq!(send("/app/parks/6/devices/displays", display).status, 303);
    let devices = get(port, "/app/parks/6/devices?done=display", Some(&pm));
    assert!(
        devices.body.contains("Barrier E1: entrance"),
        "{}",
        devices.body
    );
    assert!(
        devices.body.contains("Never heard from."),
        "a new barrier: {}",
        devices.body
    );
    assert!(
        devices.body.contains("<strong>D1</strong>"),
        "{}",
        devices.body
    );
    let key = send(
        "/app/parks/6/devices/key",
        form(&[
            ("csrf", csrf.clone()),
            ("device", "BARRIER".into()),
            ("deviceID", "31".into()),
            ("name", "E1".into()),
        ]),
    );
    assert_eq!(key.status, 200, "{}", key.body);
    assert_eq!(key.header("cache-control"), Some("no-store"));
    let shown = key
        .body
        .split("id=\"key\">")
        .nth(1)
        .and_then(|r| r.get(..64))
        .unwrap_or("");
    assert!(
        shown.bytes().all(|b| b.is_ascii_hexdigit()) && shown.len() == 64,
        "{}",
        key.body
    );

    // The supervisor reads every step; the park manager may not.
    assert_eq!(get(port, "/app/audit", Some(&pm)).status, 403);
    let sup = sign_in(port, "supervisor@isep.ipp.pt");
    let trail = get(port, "/app/audit?service=parks&subject=park+6", Some(&sup));
    assert_eq!(trail.status, 200, "{}", trail.body);
    for action in ["park.created", "spots.created", "park.changed"] {
        assert!(trail.body.contains(action), "{action}: {}", trail.body);
    }
    let devices = get(port, "/app/audit?service=parks&action=device.", Some(&sup));
    assert!(
        devices.body.contains("device.key_issued"),
        "{}",
        devices.body
    );
    assert!(!devices.body.contains(shown), "no key in the trail");
    let csv = get(
        port,
        "/app/audit.csv?service=parks&action=park.",
        Some(&sup),
    );
    assert_eq!(csv.status, 200, "{}", csv.body);
    assert_eq!(csv.header("content-type"), Some("text/csv; charset=utf-8"));
    assert!(
        csv.body
            .starts_with("id,at,actorId,action,subject,before,after"),
        "{}",
        csv.body
    );

    // A customer's account gives their invitation code; the registration form takes one.
    let rui = sign_in(port, "ruiSoares@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&rui));
    assert!(
        account.body.contains("id=\"invitation\""),
        "{}",
        account.body
    );
    let register = get(port, "/app/register", None);
    assert!(
        register.body.contains("name=\"invitationCode\""),
        "{}",
        register.body
    );
}

#[test]
fn a_customer_closes_their_account_and_is_told_what_was_kept() {
    let (_data, _up, port) = start();
    let maya = sign_in(port, "mayaGupta@isep.ipp.pt");
    let account = get(port, "/app/account", Some(&maya));
    assert!(
        account.body.contains("action=\"/app/close-account\""),
        "{}",
        account.body
    );
    let csrf = account.csrf();
    // Staff have no such form: their accounts are not closed this way.
    let boss = sign_in(port, "supervisor@isep.ipp.pt");
    let staff = get(port, "/app/account", Some(&boss));
    assert!(!staff.body.contains("/app/close-account"), "{}", staff.body);

    // A wrong password is refused beside the form, and the account stays; without the CSRF
    // token, nothing either.
    let refused = post(
        port,
        "/app/close-account",
        Some(&maya),
        &[("csrf", &csrf), ("password", "not hers")],
    );
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("id=\"closure-error\""),
        "{}",
        refused.body
    );
    let forged = post(
        port,
        "/app/close-account",
        Some(&maya),
        &[("password", "Chosen#Password1")],
    );
    assert_eq!(forged.status, 403);
    assert_eq!(get(port, "/app/account", Some(&maya)).status, 200);

    // Closed: told what went and what stayed, signed out, and she cannot sign in again.
    let closed = post(
        port,
        "/app/close-account",
        Some(&maya),
        &[("csrf", &csrf), ("password", "Chosen#Password1")],
    );
    assert_eq!(closed.status, 200, "{}", closed.body);
    for text in ["What was erased", "What was kept, and why", "Invoices"] {
        assert!(closed.body.contains(text), "{text}: {}", closed.body);
    }
    assert!(
        closed
            .header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0")),
        "{:?}",
        closed.headers
    );
    let after = get(port, "/app/account", Some(&maya));
    assert_eq!(after.status, 303, "the session ended");
    let again = common::try_sign_in(port, "mayaGupta@isep.ipp.pt", "Chosen#Password1");
    assert_eq!(again.status, 401, "{}", again.body);
}
