//! The pages: sign in, register, sign out and the account page. Each handler reads the
//! session, checks the CSRF token of every form, calls the gateway with the user's token and
//! renders a template; an answer the system refuses is shown where it belongs (beside the
//! field the API names), and a system that does not answer gets a page that says so.

use std::collections::HashMap;

use askama::Template;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Form;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::{json, Value};

use crate::gateway::{claims, Reply};
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
    fn of(title: &str, s: &Session) -> Self {
        Self {
            title: title.into(),
            user_name: s.user.as_ref().map(|u| u.name.clone()),
            csrf: s.csrf.clone(),
        }
    }
}

#[derive(Template)]
#[template(path = "signin.html")]
struct SignIn {
    chrome: Chrome,
    email: String,
    error: Option<String>,
    notice: Option<String>,
}

/// One text input of a form.
#[derive(Debug, Clone)]
struct Field {
    name: &'static str,
    label: &'static str,
    kind: &'static str,
    autocomplete: &'static str,
    value: String,
    hint: Option<&'static str>,
    error: Option<String>,
    described_by: String,
}

/// One choice of a form.
#[derive(Debug, Clone)]
struct Select {
    name: &'static str,
    label: &'static str,
    options: Vec<(&'static str, &'static str)>,
    value: String,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "register.html")]
struct Register {
    chrome: Chrome,
    fields: Vec<Field>,
    selects: Vec<Select>,
    general_error: Option<String>,
}

/// A vehicle as the account page lists it.
#[derive(Debug, Clone)]
struct Vehicle {
    plate: String,
    kind: String,
    energy: String,
}

#[derive(Template)]
#[template(path = "account.html")]
struct Account {
    chrome: Chrome,
    name: String,
    role: String,
    id: i64,
    customer: bool,
    vehicles: Vec<Vehicle>,
    coins: Option<i64>,
    problem: Option<String>,
}

#[derive(Template)]
#[template(path = "problem.html")]
struct Problem {
    chrome: Chrome,
    message: String,
}

/// The request's session, or a new anonymous one (then `fresh` is true and the cookie must be
/// set).
fn session_of(app: &App, headers: &HeaderMap) -> (Session, bool) {
    match session::from_cookies(headers).and_then(|id| app.sessions.get(&id)) {
        Some(s) => (s, false),
        None => (app.sessions.create(), true),
    }
}

/// A rendered page with `status`, setting the session cookie when `cookie` says so.
fn page(
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

fn redirect(to: &'static str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, HeaderValue::from_static(to))],
    )
        .into_response()
}

fn redirect_with_cookie(to: &'static str, cookie: HeaderValue) -> Response {
    let mut r = redirect(to);
    r.headers_mut().insert(header::SET_COOKIE, cookie);
    r
}

/// A page saying what went wrong, with `status`.
fn problem(app: &App, s: &Session, status: StatusCode, message: String) -> Response {
    let html = Problem {
        chrome: Chrome::of("Something went wrong", s),
        message,
    }
    .render();
    page(app, status, html, None)
}

/// A form post whose CSRF token is missing or wrong: refused, nothing done.
fn forged(app: &App, s: &Session) -> Response {
    problem(
        app,
        s,
        StatusCode::FORBIDDEN,
        "This form has expired or did not come from this site. Go back, reload the page and try again.".into(),
    )
}

fn unreachable(app: &App, s: &Session, e: &crate::gateway::GatewayError) -> Response {
    tracing::warn!(error = %e, "the gateway did not answer");
    problem(
        app,
        s,
        StatusCode::BAD_GATEWAY,
        "PMS is not answering right now. Please try again in a moment.".into(),
    )
}

/// `GET /app/`: the account page when signed in, else the sign-in page.
pub async fn start(State(app): State<App>, headers: HeaderMap) -> Response {
    let signed_in = session::from_cookies(&headers)
        .and_then(|id| app.sessions.get(&id))
        .is_some_and(|s| s.user.is_some());
    redirect(if signed_in {
        "/app/account"
    } else {
        "/app/signin"
    })
}

/// `GET /app/signin`.
pub async fn signin_form(State(app): State<App>, headers: HeaderMap) -> Response {
    let (s, fresh) = session_of(&app, &headers);
    if s.user.is_some() {
        return redirect("/app/account");
    }
    let html = SignIn {
        chrome: Chrome::of("Sign in", &s),
        email: String::new(),
        error: None,
        notice: None,
    }
    .render();
    page(&app, StatusCode::OK, html, fresh.then_some(s.id.as_str()))
}

fn field<'a>(form: &'a HashMap<String, String>, name: &str) -> &'a str {
    form.get(name).map_or("", String::as_str)
}

/// `POST /app/signin`.
pub async fn signin(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let (s, fresh) = session_of(&app, &headers);
    if fresh || !s.csrf_matches(field(&form, "csrf")) {
        return forged(&app, &s);
    }
    let email = field(&form, "email").trim().to_owned();
    let body = json!({"email": email, "password": field(&form, "password")});
    match app
        .gateway
        .call(Method::POST, "/users/login", None, &body)
        .await
    {
        Ok(r) if r.status == StatusCode::OK => match signed_in(&app, &s, &r) {
            Some(cookie) => redirect_with_cookie("/app/account", cookie),
            None => problem(
                &app,
                &s,
                StatusCode::BAD_GATEWAY,
                "The sign-in answer could not be read.".into(),
            ),
        },
        Ok(r) => {
            let html = SignIn {
                chrome: Chrome::of("Sign in", &s),
                email,
                error: Some(r.message()),
                notice: None,
            }
            .render();
            let status = if r.status.is_client_error() {
                r.status
            } else {
                StatusCode::BAD_GATEWAY
            };
            page(&app, status, html, None)
        }
        Err(e) => unreachable(&app, &s, &e),
    }
}

/// Signs the session in with a login answer; returns the new session's cookie.
fn signed_in(app: &App, s: &Session, login: &Reply) -> Option<HeaderValue> {
    let token = login.body["token"].as_str()?.to_owned();
    let (id, role) = claims(&token)?;
    let name = login.body["name"].as_str().unwrap_or("you").to_owned();
    let new = app.sessions.sign_in(
        &s.id,
        User {
            token,
            id,
            role,
            name,
        },
    );
    Some(session::set_cookie(&new.id, app.secure_cookies))
}

/// `POST /app/signout`.
pub async fn signout(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let (s, fresh) = session_of(&app, &headers);
    if fresh || !s.csrf_matches(field(&form, "csrf")) {
        return forged(&app, &s);
    }
    app.sessions.remove(&s.id);
    redirect_with_cookie("/app/signin", session::clear_cookie(app.secure_cookies))
}

/// The registration form's inputs, with the values and errors to show.
fn register_form(s: &Session, form: &HashMap<String, String>, reply: Option<&Reply>) -> Register {
    let error_for = |name: &str| {
        reply
            .filter(|r| r.field() == Some(name))
            .map(Reply::message)
    };
    let text = |name: &'static str, label, kind, autocomplete, hint: Option<&'static str>| {
        let error = error_for(name);
        let described_by = [
            hint.map(|_| format!("{name}-hint")),
            error.as_ref().map(|_| format!("{name}-error")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        Field {
            name,
            label,
            kind,
            autocomplete,
            // The password is never sent back.
            value: if kind == "password" {
                String::new()
            } else {
                field(form, name).to_owned()
            },
            hint,
            error,
            described_by,
        }
    };
    let select = |name: &'static str, label, options: Vec<(&'static str, &'static str)>| Select {
        name,
        label,
        value: form
            .get(name)
            .cloned()
            .unwrap_or_else(|| options.first().map(|o| o.0.to_owned()).unwrap_or_default()),
        options,
        error: error_for(name),
    };
    let fields = vec![
        text("firstName", "First name", "text", "given-name", None),
        text("lastName", "Last name", "text", "family-name", None),
        text("email", "E-mail", "email", "email", None),
        text(
            "password",
            "Password",
            "password",
            "new-password",
            Some("11 to 128 characters, no spaces, with a lower-case and an upper-case letter and a symbol."),
        ),
        text("nif", "NIF (tax number)", "text", "off", Some("Nine digits.")),
        text(
            "licensePlateNumber",
            "Your car's plate",
            "text",
            "off",
            Some("AA-00-00, 00-AA-00, 00-00-AA or AA-00-AA."),
        ),
    ];
    let selects = vec![
        select(
            "vehicleType",
            "Vehicle",
            vec![("AUTOMOBILE", "Car"), ("MOTORCYCLE", "Motorcycle")],
        ),
        select(
            "vehicleEnergySource",
            "Energy",
            vec![
                ("FUEL", "Fuel"),
                ("GPL", "LPG"),
                ("ELECTRIC", "Electric"),
                ("PLUG_IN_HYBRID", "Plug-in hybrid"),
            ],
        ),
    ];
    let shown: Vec<&str> = fields
        .iter()
        .map(|f| f.name)
        .chain(selects.iter().map(|s| s.name))
        .collect();
    let general_error = reply
        .filter(|r| r.field().is_none_or(|f| !shown.contains(&f)))
        .map(Reply::message);
    Register {
        chrome: Chrome::of("Create your account", s),
        fields,
        selects,
        general_error,
    }
}

/// `GET /app/register`.
pub async fn register_page(State(app): State<App>, headers: HeaderMap) -> Response {
    let (s, fresh) = session_of(&app, &headers);
    let html = register_form(&s, &HashMap::new(), None).render();
    page(&app, StatusCode::OK, html, fresh.then_some(s.id.as_str()))
}

/// `POST /app/register`: creates the account, then signs it in.
pub async fn register(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let (s, fresh) = session_of(&app, &headers);
    if fresh || !s.csrf_matches(field(&form, "csrf")) {
        return forged(&app, &s);
    }
    let body = json!({
        "firstName": field(&form, "firstName"),
        "lastName": field(&form, "lastName"),
        "email": field(&form, "email").trim(),
        "password": field(&form, "password"),
        "nif": field(&form, "nif").trim(),
        "licensePlateNumber": field(&form, "licensePlateNumber").trim(),
        "vehicleType": field(&form, "vehicleType"),
        "vehicleEnergySource": field(&form, "vehicleEnergySource"),
    });
    let created = match app
        .gateway
        .call(Method::POST, "/users/createUser", None, &body)
        .await
    {
        Ok(r) => r,
        Err(e) => return unreachable(&app, &s, &e),
    };
    if created.status != StatusCode::CREATED {
        let status = if created.status.is_client_error() {
            created.status
        } else {
            StatusCode::BAD_GATEWAY
        };
        return page(
            &app,
            status,
            register_form(&s, &form, Some(&created)).render(),
            None,
        );
    }
    let login = json!({"email": body["email"], "password": body["password"]});
    match app
        .gateway
        .call(Method::POST, "/users/login", None, &login)
        .await
    {
        Ok(r) if r.status == StatusCode::OK => match signed_in(&app, &s, &r) {
            Some(cookie) => redirect_with_cookie("/app/account", cookie),
            None => redirect("/app/signin"),
        },
        // Created, but not signed in (the login failed): the sign-in page says what to do.
        _ => redirect("/app/signin"),
    }
}

/// `GET /app/account`.
pub async fn account(State(app): State<App>, headers: HeaderMap) -> Response {
    let (s, _) = session_of(&app, &headers);
    let Some(user) = s.user.clone() else {
        return redirect("/app/signin");
    };
    let customer = user.role == "CUSTOMER";
    let mut problem_text = None;
    let (mut vehicles, mut coins) = (Vec::new(), None);
    if customer {
        let token = Some(user.token.as_str());
        let (vehicles_path, wallet_path) = (
            format!("/users/vehicles/{}", user.id),
            format!("/users/parkies/{}", user.id),
        );
        let (v, c) = tokio::join!(
            app.gateway
                .call(Method::GET, &vehicles_path, token, &Value::Null),
            app.gateway
                .call(Method::GET, &wallet_path, token, &Value::Null),
        );
        let expired = [&v, &c]
            .into_iter()
            .flatten()
            .any(|r| r.status == StatusCode::UNAUTHORIZED);
        if expired {
            // The token expired: sign in again.
            app.sessions.remove(&s.id);
            return redirect_with_cookie("/app/signin", session::clear_cookie(app.secure_cookies));
        }
        match v {
            Ok(r) if r.status == StatusCode::OK => {
                vehicles = r
                    .body
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| Vehicle {
                        plate: v["licensePlateNumber"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        kind: v["vehicleType"].as_str().unwrap_or_default().to_owned(),
                        energy: v["vehicleEnergySource"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    })
                    .collect();
            }
            Ok(r) => problem_text = Some(r.message()),
            Err(e) => problem_text = Some(e.to_string()),
        }
        if let Ok(r) = c {
            coins = r.body["parkies"].as_i64();
        }
    }
    let html = Account {
        chrome: Chrome::of("Your account", &s),
        name: user.name.clone(),
        role: user.role.clone(),
        id: user.id,
        customer,
        vehicles,
        coins,
        problem: problem_text,
    }
    .render();
    page(&app, StatusCode::OK, html, None)
}
