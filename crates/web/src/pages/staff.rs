//! The user list. Customer managers and supervisors see every user (searched and paged here)
//! and the top-10 PARKY report; customer managers grant or deduct coins for the users they
//! tick. Anyone else opening these pages is told which role they need.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::Form;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use super::Items;
use super::{allowed, call_as, page, problem, redirect, signed_in_user, staff_form, text, Chrome};
use super::{Page, PageError};
use crate::gateway::Reply;
use crate::session::{Session, User};
use crate::App;

/// Who sees the user list.
pub const USER_READERS: &[&str] = &["CUSTOMER_MANAGER", "SUPERVISOR"];
/// Who grants coins.
pub const GRANTERS: &[&str] = &["CUSTOMER_MANAGER"];
/// Users a page shows.
const PAGE: usize = 25;
/// Users read per call while searching.
const BATCH: usize = 1000;

/// A user as the list shows them.
#[derive(Debug, Clone)]
struct UserRow {
    id: i64,
    name: String,
    email: String,
    role: String,
    status: String,
    coins: i64,
}

#[derive(Template)]
#[template(path = "users.html")]
struct Users {
    chrome: Chrome,
    q: String,
    rows: Vec<UserRow>,
    total: usize,
    page: usize,
    pages: usize,
    can_grant: bool,
    /// The grant form's one-time token ([`super::once_key`]).
    once: String,
    top: Vec<(String, String, i64)>,
    notice: Option<&'static str>,
    error: Option<String>,
}

/// The list's query.
#[derive(Debug, Default, serde::Deserialize)]
pub struct UsersQuery {
    q: Option<String>,
    page: Option<usize>,
    done: Option<String>,
}

/// Every user, read a thousand at a time.
async fn all_users(app: &App, s: &Session, user: &User) -> Result<Vec<UserRow>, PageError> {
    let mut out = Vec::new();
    for offset in (0..).step_by(BATCH).take(100) {
        let path = format!("/users/getAllUsers?limit={BATCH}&offset={offset}");
        let r = call_as(app, s, user, Method::GET, &path, &Value::Null).await?;
        if r.status != StatusCode::OK {
            return Err(problem(app, s, StatusCode::BAD_GATEWAY, r.message()).into());
        }
        let batch = r.body.as_array().cloned().unwrap_or_default();
        let n = batch.len();
        out.extend(batch.iter().map(|u| UserRow {
            id: u["id"].as_i64().unwrap_or(0),
            name: format!("{} {}", text(&u["firstName"]), text(&u["lastName"])),
            email: text(&u["email"]),
            role: text(&u["role"]),
            status: text(&u["userStatus"]),
            coins: u["totalParkies"].as_i64().unwrap_or(0),
        }));
        if n < BATCH {
            break;
        }
    }
    Ok(out)
}

async fn users_page(
    app: &App,
    s: &Session,
    user: &User,
    query: &UsersQuery,
    status: StatusCode,
    error: Option<String>,
) -> Page {
    allowed(app, s, user, USER_READERS, "the user list")?;
    let everyone = all_users(app, s, user).await?;
    let q = query.q.clone().unwrap_or_default();
    let needle = q.trim().to_lowercase();
    let found: Vec<UserRow> = everyone
        .into_iter()
        .filter(|u| {
            needle.is_empty()
                || u.name.to_lowercase().contains(&needle)
                || u.email.to_lowercase().contains(&needle)
        })
        .collect();
    let pages = found.len().div_ceil(PAGE).max(1);
    let page_no = query.page.unwrap_or(1).clamp(1, pages);
    let rows = found
        .iter()
        .skip((page_no - 1) * PAGE)
        .take(PAGE)
        .cloned()
        .collect();
    let top = match call_as(
        app,
        s,
        user,
        Method::GET,
        "/userReport/top10Parky",
        &Value::Null,
    )
    .await?
    {
        r if r.status == StatusCode::OK => r
            .body
            .items()
            .map(|t| {
                (
                    text(&t["name"]),
                    text(&t["email"]),
                    t["parkies"].as_i64().unwrap_or(0),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    let html = Users {
        chrome: Chrome::of("Users", s),
        q,
        total: found.len(),
        rows,
        page: page_no,
        pages,
        can_grant: GRANTERS.contains(&user.role.as_str()),
        once: crate::session::random_token(),
        top,
        notice: match query.done.as_deref() {
            Some("grant") => Some("Coins updated."),
            Some("status") => Some("Status set: a blocked customer is told why when signing in."),
            _ => None,
        },
        error,
    }
    .render();
    Ok(page(app, status, html, None))
}

/// `GET /app/users[?q=TEXT&page=N]`.
pub async fn users(
    State(app): State<App>,
    headers: HeaderMap,
    Query(query): Query<UsersQuery>,
) -> Page {
    let (s, user) = signed_in_user(&app, &headers).await?;
    users_page(&app, &s, &user, &query, StatusCode::OK, None).await
}

/// `POST /app/users/grant`: coins to (or, negative, from) every ticked user, with a reason.
pub async fn grant(
    State(app): State<App>,
    headers: HeaderMap,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Page {
    let form: HashMap<String, String> = pairs.iter().cloned().collect();
    let (s, user) = staff_form(&app, &headers, &form, GRANTERS, "granting coins").await?;
    let ids: Vec<Value> = pairs
        .iter()
        .filter(|(k, _)| k == "userIds")
        .map(|(_, v)| v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n)))
        .collect();
    let amount = form.get("amount").map_or("", String::as_str).trim();
    let body = json!({
        "userIds": ids,
        "amount": amount.parse::<i64>().map_or_else(|_| json!(amount), |n| json!(n)),
        "reason": form.get("reason").map_or("", String::as_str),
    });
    let key = super::once_key(&form);
    let reply: Reply = super::call_as_once(
        &app,
        &s,
        &user,
        Method::POST,
        "/users/parkies",
        &body,
        key.as_deref(),
    )
    .await?;
    if reply.status.is_success() {
        return Ok(redirect("/app/users?done=grant"));
    }
    let status = reply.refused_status();
    let query = UsersQuery::default();
    users_page(&app, &s, &user, &query, status, Some(reply.message())).await
}

/// `POST /app/users/status` `{userId, status, reason}`: a customer blocked, with why, or
/// enabled again (`PUT /users/{userId}/status`).
pub async fn set_status(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, GRANTERS, "blocking customers").await?;
    let query = UsersQuery::default();
    let Ok(id) = form
        .get("userId")
        .map_or("", String::as_str)
        .trim()
        .parse::<i64>()
    else {
        let error = "Customer: a user id, a whole number from the list.".to_owned();
        return users_page(
            &app,
            &s,
            &user,
            &query,
            StatusCode::BAD_REQUEST,
            Some(error),
        )
        .await;
    };
    let body = json!({
        "status": form.get("status").map_or("", String::as_str),
        "reason": form.get("reason").map_or("", String::as_str),
    });
    let path = format!("/users/{id}/status");
    let reply = call_as(&app, &s, &user, Method::PUT, &path, &body).await?;
    if reply.status.is_success() {
        return Ok(redirect("/app/users?done=status"));
    }
    let status = reply.refused_status();
    users_page(&app, &s, &user, &query, status, Some(reply.message())).await
}
