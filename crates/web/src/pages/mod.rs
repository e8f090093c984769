//! The pages. Every handler reads the session, checks the CSRF token of every form, calls the
//! gateway with the signed-in user's token and renders a template: [`auth`] signs people in and
//! out and registers them, [`customer`] is a customer's own account and [`nearby`] the parks
//! around them, [`staff`] the user list, [`parks`] a park's spots and settings, [`prices`] its
//! price table editor, [`reports`] its usage charts and [`devices`] its barriers and displays;
//! [`audit`] is the supervisors' audit trail; [`live`] lets pages follow the parks as they change. What the system refuses is
//! shown where it belongs (beside the field the API names); a system that does not answer gets a
//! page that says so, and an expired token sends the person to sign in again.

pub mod audit;
pub mod auth;
pub mod customer;
pub mod devices;
pub mod events;
pub mod live;
pub mod nearby;
pub mod parks;
pub mod prices;
pub mod reports;
pub mod staff;

use std::collections::HashMap;

use askama::Template;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::Value;

use crate::gateway::{GatewayError, Reply};
use crate::session::{self, Session, User};
use crate::App;

/// What every page's frame shows.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// The page's heading and title.
    pub title: String,
    /// The signed-in user's name (the sign-out button shows with it).
    pub user_name: Option<String>,
    /// The session's CSRF token, for the page's forms.
    pub csrf: String,
}

impl Chrome {
    /// The frame of page `title` for session `s`.
    pub fn of(title: &str, s: &Session) -> Self {
        Self {
            title: title.into(),
            user_name: s.user.as_ref().map(|u| u.name.clone()),
            csrf: s.csrf.clone(),
        }
    }

    /// The frame of page `title` for someone whose session just ended.
    pub fn signed_out(title: &str) -> Self {
        Self {
            title: title.into(),
            user_name: None,
            csrf: String::new(),
        }
    }
}

/// What a page handler answers: the page, or the answer that takes its place ([`PageError`]).
pub type Page = Result<Response, PageError>;

/// The answer a page gives instead of itself — the sign-in redirect, the "not allowed" or "not
/// answering" page, the refusal of a forged form — so that a handler's steps end in `?`. Boxed:
/// a response is large, and the error path is the rare one.
#[derive(Debug)]
pub struct PageError(Box<Response>);

impl From<Response> for PageError {
    fn from(r: Response) -> Self {
        Self(Box::new(r))
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        *self.0
    }
}

#[derive(Template)]
#[template(path = "problem.html")]
struct Problem {
    chrome: Chrome,
    message: String,
}

/// The request's session, or a new visitor's (then `fresh` is true and the cookie must be set).
///
/// # Errors
/// The "try again" page (503) when the sessions cannot be reached.
pub async fn session_of(app: &App, headers: &HeaderMap) -> Result<(Session, bool), PageError> {
    match existing(app, headers).await? {
        Some(s) => Ok((s, false)),
        None => Ok((app.sessions.create(), true)),
    }
}

/// The request's session when it has a session cookie: the signed-in session it names, or else
/// the visitor's anonymous one ([`Session::anonymous`], nothing kept).
///
/// # Errors
/// The "try again" page (503) when the sessions cannot be reached.
pub async fn existing(app: &App, headers: &HeaderMap) -> Result<Option<Session>, PageError> {
    let Some(id) = session::from_cookies(headers) else {
        return Ok(None);
    };
    let kept = app
        .sessions
        .get(&id)
        .await
        .map_err(|e| sessions_unavailable(app, &e))?;
    Ok(Some(kept.unwrap_or_else(|| Session::anonymous(id))))
}

/// The page for a request whose session could not be read or kept: nothing was done.
pub fn sessions_unavailable(app: &App, e: &session::Unavailable) -> Response {
    tracing::warn!(error = %e, "sessions unavailable");
    problem(
        app,
        &Session::unsaved(),
        StatusCode::SERVICE_UNAVAILABLE,
        "Sessions cannot be reached right now, so nothing was done. Please try again in a moment."
            .into(),
    )
}

/// A rendered page with `status`, setting the session cookie when `cookie` says so.
pub fn page(
    app: &App,
    status: StatusCode,
    html: Result<String, askama::Error>,
    cookie: Option<&str>,
) -> Response {
    let mut resp = match html {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "rendering a page");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered",
            )
                .into_response()
        }
    };
    if let Some(id) = cookie {
        resp.headers_mut().insert(
            header::SET_COOKIE,
            session::set_cookie(id, app.secure_cookies),
        );
    }
    resp
}

pub fn redirect(to: &str) -> Response {
    let location = HeaderValue::try_from(to).unwrap_or_else(|_| HeaderValue::from_static("/app/"));
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

pub fn redirect_with_cookie(to: &str, cookie: HeaderValue) -> Response {
    let mut r = redirect(to);
    r.headers_mut().insert(header::SET_COOKIE, cookie);
    r
}

/// A page saying what went wrong, with `status`.
pub fn problem(app: &App, s: &Session, status: StatusCode, message: String) -> Response {
    let html = Problem {
        chrome: Chrome::of("Something went wrong", s),
        message,
    }
    .render();
    page(app, status, html, None)
}

/// A form post whose CSRF token is missing or wrong: refused, nothing done.
pub fn forged(app: &App, s: &Session) -> Response {
    problem(
        app,
        s,
        StatusCode::FORBIDDEN,
        "This form has expired or did not come from this site. Go back, reload the page and try again.".into(),
    )
}

pub fn unreachable(app: &App, s: &Session, e: &GatewayError) -> Response {
    tracing::warn!(error = %e, "the gateway did not answer");
    problem(
        app,
        s,
        StatusCode::BAD_GATEWAY,
        "PMS is not answering right now. Please try again in a moment.".into(),
    )
}

/// A form's value for `name` (empty when it was not sent).
pub fn field<'a>(form: &'a HashMap<String, String>, name: &str) -> &'a str {
    form.get(name).map_or("", String::as_str)
}

/// The signed-in user of a request, or the answer that sends them to sign in.
///
/// # Errors
/// The redirect to the sign-in page when nobody is signed in.
pub async fn signed_in_user(app: &App, headers: &HeaderMap) -> Result<(Session, User), PageError> {
    existing(app, headers)
        .await?
        .and_then(|s| s.user.clone().map(|u| (s, u)))
        .ok_or_else(|| redirect("/app/signin").into())
}

/// Calls the gateway as `user`; an expired token ends the session and sends them to sign in,
/// no answer at all gets the "not answering" page.
///
/// # Errors
/// The response to send instead.
pub async fn call_as(
    app: &App,
    s: &Session,
    user: &User,
    method: Method,
    path: &str,
    body: &Value,
) -> Result<Reply, PageError> {
    call_as_once(app, s, user, method, path, body, None).await
}

/// [`call_as`] under an idempotency key (a form's one-time token, [`once_key`]): a form
/// submitted twice is done once.
///
/// # Errors
/// The response to send instead.
pub async fn call_as_once(
    app: &App,
    s: &Session,
    user: &User,
    method: Method,
    path: &str,
    body: &Value,
    key: Option<&str>,
) -> Result<Reply, PageError> {
    match app
        .gateway
        .call_once(method, path, Some(&user.token), body, key)
        .await
    {
        Ok(r) if r.status == StatusCode::UNAUTHORIZED => {
            // The token is dead anyway; a session left behind expires by itself.
            if let Err(e) = app.sessions.remove(&s.id).await {
                tracing::warn!(error = %e, "ending a session whose token expired");
            }
            Err(
                redirect_with_cookie("/app/signin", session::clear_cookie(app.secure_cookies))
                    .into(),
            )
        }
        Ok(r) => Ok(r),
        Err(e) => Err(unreachable(app, s, &e).into()),
    }
}

/// The idempotency key of a form that moves money: its one-time token (field `once`, a fresh
/// [`session::random_token`] in every form rendered), so the same form posted twice (a double
/// click, a resubmission) is done once. `None` when the form has none.
pub fn once_key(form: &std::collections::HashMap<String, String>) -> Option<String> {
    form.get("once")
        .map(|t| t.trim())
        .filter(|t| {
            !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(|t| format!("form-{t}"))
}

/// A Portuguese plate as an HTML `pattern` (anchored by the browser, spaces around allowed, any
/// case): the users service's rule, so a browser marks a wrong plate while it is typed.
pub const PLATE_PATTERN: &str = r"\s*([A-Za-z]{2}-[0-9]{2}-[0-9]{2}|[0-9]{2}-[A-Za-z]{2}-[0-9]{2}|[0-9]{2}-[0-9]{2}-[A-Za-z]{2}|[A-Za-z]{2}-[0-9]{2}-[A-Za-z]{2})\s*";

/// Checks the gateway's answers about park `number`: the "no such park" page (404) when the
/// first says so, the "not answering" kind of page (502) when any other failed.
///
/// # Errors
/// The page to answer instead.
pub fn park_answers(
    app: &App,
    s: &Session,
    number: i64,
    replies: &[&Reply],
) -> Result<(), PageError> {
    if replies
        .first()
        .is_some_and(|r| r.status == StatusCode::NOT_FOUND)
    {
        return Err(problem(
            app,
            s,
            StatusCode::NOT_FOUND,
            format!("There is no park {number}."),
        )
        .into());
    }
    match replies.iter().find(|r| r.status != StatusCode::OK) {
        Some(failed) => Err(problem(app, s, StatusCode::BAD_GATEWAY, failed.message()).into()),
        None => Ok(()),
    }
}

/// Who manages parks.
pub const PARK_STAFF: &[&str] = &["PARK_MANAGER", "SUPERVISOR"];

/// The "not allowed" page when `user`'s role is not among `roles`.
///
/// # Errors
/// The 403 page naming the roles `what` is for.
pub fn allowed(
    app: &App,
    s: &Session,
    user: &User,
    roles: &[&str],
    what: &str,
) -> Result<(), PageError> {
    if roles.contains(&user.role.as_str()) {
        return Ok(());
    }
    Err(problem(
        app,
        s,
        StatusCode::FORBIDDEN,
        format!(
            "Not allowed: {what} is for {}. You are signed in as {}.",
            roles.join(" and "),
            user.role
        ),
    )
    .into())
}

/// The signed-in user of a page for `roles`.
///
/// # Errors
/// The redirect to sign in, or the "not allowed" page.
pub async fn staff_page(
    app: &App,
    headers: &HeaderMap,
    roles: &[&str],
    what: &str,
) -> Result<(Session, User), PageError> {
    let (s, user) = signed_in_user(app, headers).await?;
    allowed(app, &s, &user, roles, what)?;
    Ok((s, user))
}

/// Which change just succeeded, after a form's redirect (`?done=…`): the page says so.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Done {
    /// What was done.
    pub done: Option<String>,
}

/// The session and user of a form posted to a page for `roles`, CSRF-checked.
///
/// # Errors
/// The refusal of a forged form, the redirect to sign in, or the "not allowed" page.
pub async fn staff_form(
    app: &App,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
    roles: &[&str],
    what: &str,
) -> Result<(Session, User), PageError> {
    let s = checked(app, headers, form).await?;
    let Some(user) = s.user.clone() else {
        return Err(redirect("/app/signin").into());
    };
    allowed(app, &s, &user, roles, what)?;
    Ok((s, user))
}

/// A form post's session, if its CSRF token is the session's.
///
/// # Errors
/// The refusal (403) when the token is missing or wrong, or the browser had no session.
pub async fn checked(
    app: &App,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<Session, PageError> {
    match existing(app, headers).await? {
        Some(s) if s.csrf_matches(field(form, "csrf")) => Ok(s),
        Some(s) => Err(forged(app, &s).into()),
        None => Err(forged(app, &Session::unsaved()).into()),
    }
}

/// The elements of a JSON array the API answered: none for anything else (a page shows an
/// empty list rather than failing on an answer of another shape).
pub trait Items {
    /// The elements, in order.
    fn items(&self) -> std::slice::Iter<'_, Value>;
}

impl Items for Value {
    fn items(&self) -> std::slice::Iter<'_, Value> {
        self.as_array().map_or([].iter(), |a| a.iter())
    }
}

/// A JSON string or number as text (empty for anything else).
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// An RFC 3339 instant as people read it: `2024-07-01 08:30 UTC`.
pub fn when(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(11..16)) {
        (Some(day), Some(time)) if rfc3339.ends_with('Z') => format!("{day} {time} UTC"),
        _ => rfc3339.to_owned(),
    }
}

/// An RFC 3339 instant on a park's clock (IANA `zone`), as people read it: `2024-07-01 09:30
/// WEST`, the time of day prices follow; in UTC ([`when`]) when the zone is unknown.
pub fn when_in(rfc3339: &str, zone: &str) -> String {
    match (
        rfc3339.parse::<jiff::Timestamp>(),
        jiff::tz::TimeZone::get(zone),
    ) {
        (Ok(t), Ok(tz)) => t
            .to_zoned_datetime(tz)
            .strftime("%Y-%m-%d %H:%M %Z")
            .to_string(),
        _ => when(rfc3339),
    }
}

/// `GET /app/`: the account page when signed in, else the sign-in page.
pub async fn start(State(app): State<App>, headers: HeaderMap) -> Page {
    let signed_in = existing(&app, &headers)
        .await?
        .is_some_and(|s| s.user.is_some());
    Ok(redirect(if signed_in {
        "/app/account"
    } else {
        "/app/signin"
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_said_on_the_parks_clock_with_its_zone() {
        assert_eq!(
            when_in("2024-07-01T08:30:00Z", "Europe/Lisbon"),
            "2024-07-01 09:30 WEST"
        );
        assert_eq!(
            when_in("2024-01-10T08:30:00Z", "Europe/Lisbon"),
            "2024-01-10 08:30 WET"
        );
        assert_eq!(
            when_in("2024-07-01T08:30:00Z", "Nowhere/Else"),
            "2024-07-01 08:30 UTC"
        );
    }

    proptest::proptest! {
        /// The browser's check of a plate (the pattern, anchored as HTML anchors it) says what
        /// the users service will say.
        #[test]
        fn the_plate_pattern_agrees_with_the_services_rule(
            plate in "( ?)([A-Za-z0-9]{2}|[A-Z]{2}|[0-9]{2}|[a-z0-9-]{1,3})-([A-Z]{2}|[0-9]{2}|[a-z0-9]{1,3})-([A-Za-z]{2}|[0-9]{2}|[A-Z0-9-]{1,3})( ?)"
        ) {
            let browser = regex::Regex::new(&format!("^(?:{PLATE_PATTERN})$")).expect("pattern");
            proptest::prop_assert_eq!(
                browser.is_match(&plate),
                pms_vocab::plate(&plate).is_ok(),
                "{:?}", plate
            );
        }
    }

    #[test]
    fn instants_read_as_day_and_minute_in_utc() {
        assert_eq!(when("2024-07-01T08:30:00Z"), "2024-07-01 08:30 UTC");
        assert_eq!(when("2024-07-01T08:30:00.123Z"), "2024-07-01 08:30 UTC");
        assert_eq!(when("yesterday"), "yesterday");
    }
}
