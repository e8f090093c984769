//! A person's own account. Everyone sees who they are; a customer also manages their vehicles
//! (add one, at most three), their payment method, their PARKY wallet and the "pay my next
//! visit with coins" flag, reads their visits and invoices, and may close the account. Every change is a form posted
//! here (CSRF-checked), sent to the gateway with the customer's token, then a redirect back
//! (so a reload never posts twice); a refusal is shown beside the form it concerns.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::Form;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use super::Items;
use super::{
    call_as, checked, field, page, redirect, signed_in_user, text, when, when_in, Chrome, Done,
    Page, PageError,
};
use crate::gateway::Reply;
use crate::session::{Session, User};
use crate::App;

/// Most vehicles a customer may have (the users service's rule).
const MAX_VEHICLES: usize = 3;

/// A vehicle as the account page lists it.
#[derive(Debug, Clone)]
struct Vehicle {
    plate: String,
    kind: String,
    energy: String,
}

/// What a customer's part of the account page shows.
#[derive(Debug, Clone, Default)]
struct CustomerView {
    vehicles: Vec<Vehicle>,
    coins: Option<i64>,
    /// The wallet's events, newest first: when, coins (signed), why.
    coin_events: Vec<(String, String, String)>,
    coin_flag: Option<bool>,
    payment_method: Option<String>,
    /// The code the customer gives the friends they invite.
    invitation_code: Option<String>,
}

/// A refusal to show beside one of the page's forms.
#[derive(Debug, Clone, Default)]
struct Refusals {
    vehicle: Option<String>,
    payment: Option<String>,
    coins: Option<String>,
    closure: Option<String>,
}

#[derive(Template)]
#[template(path = "account.html")]
struct Account {
    chrome: Chrome,
    user: User,
    customer: Option<CustomerView>,
    refusals: Refusals,
    /// The form values of a refused vehicle, shown again.
    plate: String,
    notice: Option<&'static str>,
    problem: Option<String>,
}

impl Account {
    /// The staff screens this user's role opens.
    fn tools(&self) -> Vec<(&'static str, &'static str)> {
        let role = self.user.role.as_str();
        let mut out = vec![("/app/nearby", "Parks near you")];
        if super::staff::USER_READERS.contains(&role) {
            out.push(("/app/users", "Users and PARKY coins"));
        }
        if super::PARK_STAFF.contains(&role) {
            out.push(("/app/parks", "Parks and spots"));
        }
        if super::events::EVENT_STAFF.contains(&role) {
            out.push(("/app/events", "Set-aside events"));
        }
        if super::audit::AUDIT_STAFF.contains(&role) {
            out.push(("/app/audit", "Audit trail"));
        }
        out
    }

    fn can_add_vehicle(&self) -> bool {
        self.customer
            .as_ref()
            .is_some_and(|c| c.vehicles.len() < MAX_VEHICLES)
    }
}

/// A visit as the visits page lists it.
#[derive(Debug, Clone)]
struct VisitRow {
    start: String,
    end: String,
    duration: String,
    park: String,
    plate: String,
    price: String,
}

/// An invoice as the visits page lists it.
#[derive(Debug, Clone)]
struct InvoiceRow {
    id: String,
    park: String,
    plate: String,
    left: String,
    total: String,
    discount: String,
    paid: String,
    status: String,
}

#[derive(Template)]
#[template(path = "visits.html")]
struct Visits {
    chrome: Chrome,
    visits: Vec<VisitRow>,
    invoices: Vec<InvoiceRow>,
    problem: Option<String>,
}

fn notice(done: Option<&str>) -> Option<&'static str> {
    match done? {
        "vehicle" => Some("Vehicle added."),
        "payment" => Some("Payment method saved."),
        "coins" => Some("Saved: your next visit's coin choice."),
        _ => None,
    }
}

/// JSON money (`1.2`, `"1.20"`) as text, `—` when absent.
fn money(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("{n} €"),
        Value::String(s) => format!("{s} €"),
        _ => "—".into(),
    }
}

/// Reads what a customer's account page shows; `Err` carries the response for an expired
/// session or a silent system.
async fn customer_view(
    app: &App,
    s: &Session,
    user: &User,
) -> Result<(CustomerView, Option<String>), PageError> {
    let paths = [
        format!("/users/vehicles/{}", user.id),
        format!("/users/parkies/{}", user.id),
        format!("/parks/getUserParkyFlag/{}", user.id),
        format!("/users/paymentMethod/{}", user.id),
    ];
    let null = Value::Null;
    let (vehicles, wallet, flag, method) = tokio::join!(
        call_as(app, s, user, Method::GET, &paths[0], &null),
        call_as(app, s, user, Method::GET, &paths[1], &null),
        call_as(app, s, user, Method::GET, &paths[2], &null),
        call_as(app, s, user, Method::GET, &paths[3], &null),
    );
    let (vehicles, wallet, flag, method) = (vehicles?, wallet?, flag?, method?);
    let ok = |r: &Reply| r.status == StatusCode::OK;
    let mut problem = None;
    if !ok(&vehicles) {
        problem = Some(vehicles.message());
    }
    let view = CustomerView {
        vehicles: vehicles
            .body
            .items()
            .map(|v| Vehicle {
                plate: text(&v["licensePlateNumber"]),
                kind: text(&v["vehicleType"]),
                energy: text(&v["vehicleEnergySource"]),
            })
            .collect(),
        coins: ok(&wallet)
            .then(|| wallet.body["parkies"].as_i64())
            .flatten(),
        invitation_code: wallet.body["invitationCode"].as_str().map(str::to_owned),
        coin_events: wallet.body["parkyEvents"]
            .items()
            .rev()
            .map(|e| {
                let amount = e["amount"].as_i64().unwrap_or(0);
                (
                    // The published layout has no zone; it is UTC.
                    when(&format!("{}Z", text(&e["transactionTime"]))),
                    if amount > 0 {
                        format!("+{amount}")
                    } else {
                        amount.to_string()
                    },
                    text(&e["reason"]),
                )
            })
            .collect(),
        coin_flag: ok(&flag).then(|| flag.body.as_bool()).flatten(),
        payment_method: ok(&method)
            .then(|| method.body["paymentMethod"].as_str().map(str::to_owned))
            .flatten(),
    };
    Ok((view, problem))
}

/// The account page for `user`, with `refusals` beside their forms.
async fn account_page(
    app: &App,
    s: &Session,
    user: &User,
    status: StatusCode,
    refusals: Refusals,
    plate: String,
    done: Option<&str>,
) -> Page {
    let (customer, problem) = if user.role == "CUSTOMER" {
        let (view, problem) = customer_view(app, s, user).await?;
        (Some(view), problem)
    } else {
        (None, None)
    };
    let html = Account {
        chrome: Chrome::of("Your account", s),
        user: user.clone(),
        customer,
        refusals,
        plate,
        notice: notice(done),
        problem,
    }
    .render();
    Ok(page(app, status, html, None))
}

/// `GET /app/account`.
pub async fn account(State(app): State<App>, headers: HeaderMap, Query(done): Query<Done>) -> Page {
    let (s, user) = signed_in_user(&app, &headers).await?;
    account_page(
        &app,
        &s,
        &user,
        StatusCode::OK,
        Refusals::default(),
        String::new(),
        done.done.as_deref(),
    )
    .await
}

/// A change posted from the account page: the gateway call it makes, and where a refusal shows.
enum Change {
    Vehicle,
    Payment,
    Coins,
}

async fn change(app: App, headers: HeaderMap, form: HashMap<String, String>, what: Change) -> Page {
    let s = checked(&app, &headers, &form).await?;
    let Some(user) = s.user.clone() else {
        return Ok(redirect("/app/signin"));
    };
    let (method, path, body, done) = match what {
        Change::Vehicle => (
            Method::PUT,
            format!("/users/vehicle/{}", user.id),
            json!({
                "licensePlateNumber": field(&form, "licensePlateNumber").trim(),
                "vehicleType": field(&form, "vehicleType"),
                "vehicleEnergySource": field(&form, "vehicleEnergySource"),
            }),
            "/app/account?done=vehicle",
        ),
        Change::Payment => (
            Method::PUT,
            format!("/users/paymentMethod/{}", user.id),
            json!({"paymentMethod": field(&form, "paymentMethod")}),
            "/app/account?done=payment",
        ),
        Change::Coins => (
            Method::PUT,
            "/parks/changeUserParkyFlag".to_owned(),
            json!({"customerID": user.id, "parkyFlag": field(&form, "parkyFlag") == "on"}),
            "/app/account?done=coins",
        ),
    };
    let reply = call_as(&app, &s, &user, method, &path, &body).await?;
    if reply.status.is_success() {
        return Ok(redirect(done));
    }
    let mut refusals = Refusals::default();
    let message = Some(reply.message());
    match what {
        Change::Vehicle => refusals.vehicle = message,
        Change::Payment => refusals.payment = message,
        Change::Coins => refusals.coins = message,
    }
    let status = reply.refused_status();
    let plate = field(&form, "licensePlateNumber").to_owned();
    account_page(&app, &s, &user, status, refusals, plate, None).await
}

/// `POST /app/vehicles`: adds a vehicle.
pub async fn add_vehicle(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    change(app, headers, form, Change::Vehicle).await
}

/// `POST /app/payment-method`.
pub async fn set_payment_method(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    change(app, headers, form, Change::Payment).await
}

/// `POST /app/coins`: "pay my next visit with coins" on or off.
pub async fn set_coin_flag(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    change(app, headers, form, Change::Coins).await
}

/// What closing the account told the customer, shown once, signed out.
#[derive(Template)]
#[template(path = "closed.html")]
struct Closed {
    chrome: Chrome,
    closed_at: String,
    coins: String,
    erased: Vec<String>,
    /// What was kept, and why.
    kept: Vec<(String, String)>,
}

/// `POST /app/close-account`: the customer closes their account, confirming with their
/// password. Refused (a wrong password, say): the account page with the refusal beside the
/// form. Closed: the session ends (its cookie too) and the page says what was erased and what
/// was kept, and why, as the users service told it.
pub async fn close_account(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let s = checked(&app, &headers, &form).await?;
    let Some(user) = s.user.clone() else {
        return Ok(redirect("/app/signin"));
    };
    let path = format!("/users/{}/closure", user.id);
    let body = json!({"password": field(&form, "password")});
    let reply = call_as(&app, &s, &user, Method::POST, &path, &body).await?;
    if !reply.status.is_success() {
        let refusals = Refusals {
            closure: Some(reply.message()),
            ..Refusals::default()
        };
        let status = reply.refused_status();
        return account_page(&app, &s, &user, status, refusals, String::new(), None).await;
    }
    // The account is gone, so is its session; the cookie is cleared whatever the store says.
    if let Err(e) = app.sessions.remove(&s.id).await {
        tracing::warn!(error = %e, "the closed account's session was not removed; it ends with its token");
    }
    let told = &reply.body;
    let list = |key: &str| told[key].as_array().cloned().unwrap_or_default();
    let html = Closed {
        chrome: Chrome::signed_out("Your account is closed"),
        closed_at: when(&text(&told["closedAt"])),
        coins: text(&told["coinsForfeited"]),
        erased: list("erased").iter().map(text).collect(),
        kept: list("kept")
            .iter()
            .map(|k| (text(&k["what"]), text(&k["why"])))
            .collect(),
    }
    .render();
    let mut answer = page(&app, StatusCode::OK, html, None);
    answer.headers_mut().insert(
        http::header::SET_COOKIE,
        crate::session::clear_cookie(app.secure_cookies),
    );
    Ok(answer)
}

/// `GET /app/visits`: the customer's visits and invoices, newest first.
pub async fn visits(State(app): State<App>, headers: HeaderMap) -> Page {
    let (s, user) = signed_in_user(&app, &headers).await?;
    let history_path = format!("/parks/parkingHistory/{}", user.id);
    let (history, invoices) = tokio::join!(
        call_as(&app, &s, &user, Method::GET, &history_path, &Value::Null),
        call_as(&app, &s, &user, Method::GET, "/payments/mine", &Value::Null),
    );
    let (history, invoices) = (history?, invoices?);
    let problem = [&history, &invoices]
        .into_iter()
        .find(|r| r.status != StatusCode::OK)
        .map(Reply::message);
    // Both APIs answer newest first.
    let visits: Vec<VisitRow> = history
        .body
        .items()
        .map(|v| VisitRow {
            start: when_in(&text(&v["startTime"]), &text(&v["timeZone"])),
            end: when_in(&text(&v["endTime"]), &text(&v["timeZone"])),
            duration: format!(
                "{} h {:02} min",
                v["hoursBetweenEntranceExit"].as_i64().unwrap_or(0),
                v["minutesBetweenEntranceExit"].as_i64().unwrap_or(0)
            ),
            park: text(&v["parkId"]),
            plate: text(&v["plateNumber"]),
            price: if v["price"].is_null() {
                "invoice to follow".into()
            } else {
                money(&v["price"])
            },
        })
        .collect();
    let invoices: Vec<InvoiceRow> = invoices
        .body
        .items()
        .map(|i| InvoiceRow {
            id: text(&i["invoice"]),
            park: text(&i["parkId"]),
            plate: text(&i["licensePlateNumber"]),
            left: when_in(&text(&i["leftPark"]), &text(&i["timeZone"])),
            total: money(&i["total"]),
            discount: money(&i["discount"]),
            paid: money(&i["finalPrice"]),
            status: text(&i["status"]),
        })
        .collect();
    let html = Visits {
        chrome: Chrome::of("Your visits and invoices", &s),
        visits,
        invoices,
        problem,
    }
    .render();
    Ok(page(&app, StatusCode::OK, html, None))
}
