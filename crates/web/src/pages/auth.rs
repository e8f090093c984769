//! Signing in and out, and registering: the users service's login and `createUser` through the
//! gateway. A successful sign-in replaces the session (new id, new CSRF token).

use std::collections::HashMap;

use askama::Template;
use axum::extract::State;
use axum::Form;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::json;

use super::{
    checked, field, page, problem, redirect, redirect_with_cookie, session_of,
    sessions_unavailable, unreachable, Chrome, Page, PageError,
};
use crate::gateway::{claims, person, Reply};
use crate::session::{self, Session, User};
use crate::App;

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
    /// The shape a browser checks as the person types (the plate's).
    pattern: Option<&'static str>,
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

/// `GET /app/signin`.
pub async fn signin_form(State(app): State<App>, headers: HeaderMap) -> Page {
    let (s, fresh) = session_of(&app, &headers).await?;
    if s.user.is_some() {
        return Ok(redirect("/app/account"));
    }
    let html = SignIn {
        chrome: Chrome::of("Sign in", &s),
        email: String::new(),
        error: None,
        notice: None,
    }
    .render();
    Ok(page(
        &app,
        StatusCode::OK,
        html,
        fresh.then_some(s.id.as_str()),
    ))
}

/// `POST /app/signin`.
pub async fn signin(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let s = checked(&app, &headers, &form).await?;
    let email = field(&form, "email").trim().to_owned();
    let body = json!({"email": email, "password": field(&form, "password")});
    Ok(
        match app
            .gateway
            .call_for(person(&headers), Method::POST, "/users/login", &body)
            .await
        {
            Ok(r) if r.status == StatusCode::OK => match signed_in(&app, &s, &r).await? {
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
                let status = r.refused_status();
                page(&app, status, html, None)
            }
            Err(e) => unreachable(&app, &s, &e),
        },
    )
}

/// Signs the session in with a login answer; returns the new session's cookie, or `None` when
/// the answer cannot be read.
///
/// # Errors
/// The "try again" page when the sessions cannot be reached (nobody is signed in then).
async fn signed_in(
    app: &App,
    s: &Session,
    login: &Reply,
) -> Result<Option<HeaderValue>, PageError> {
    let Some(token) = login.body["token"].as_str().map(str::to_owned) else {
        return Ok(None);
    };
    let Some((id, role)) = claims(&token) else {
        return Ok(None);
    };
    let name = login.body["name"].as_str().unwrap_or("you").to_owned();
    let user = User {
        token,
        id,
        role,
        name,
    };
    match app.sessions.sign_in(&s.id, user).await {
        Ok(new) => Ok(Some(session::set_cookie(&new.id, app.secure_cookies))),
        Err(e) => Err(sessions_unavailable(app, &e).into()),
    }
}

/// `POST /app/signout`.
pub async fn signout(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let s = checked(&app, &headers, &form).await?;
    // Ended where it is kept, or not at all: the cookie stays until it has been.
    if let Err(e) = app.sessions.remove(&s.id).await {
        return Err(sessions_unavailable(&app, &e).into());
    }
    Ok(redirect_with_cookie(
        "/app/signin",
        session::clear_cookie(app.secure_cookies),
    ))
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
            pattern: (name == "licensePlateNumber").then_some(super::PLATE_PATTERN),
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
        text(
            "invitationCode",
            "Invitation code (optional)",
            "text",
            "off",
            Some("A customer's code, if one invited you: they earn coins when your first visit ends."),
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
pub async fn register_page(State(app): State<App>, headers: HeaderMap) -> Page {
    let (s, fresh) = session_of(&app, &headers).await?;
    let html = register_form(&s, &HashMap::new(), None).render();
    Ok(page(
        &app,
        StatusCode::OK,
        html,
        fresh.then_some(s.id.as_str()),
    ))
}

/// `POST /app/register`: creates the account, then signs it in.
pub async fn register(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let s = checked(&app, &headers, &form).await?;
    let mut body = json!({
        "firstName": field(&form, "firstName"),
        "lastName": field(&form, "lastName"),
        "email": field(&form, "email").trim(),
        "password": field(&form, "password"),
        "nif": field(&form, "nif").trim(),
        "licensePlateNumber": field(&form, "licensePlateNumber").trim(),
        "vehicleType": field(&form, "vehicleType"),
        "vehicleEnergySource": field(&form, "vehicleEnergySource"),
    });
    let invitation = field(&form, "invitationCode").trim();
    if !invitation.is_empty() {
        body["invitationCode"] = json!(invitation);
    }
    let created = match app
        .gateway
        .call_for(person(&headers), Method::POST, "/users/createUser", &body)
        .await
    {
        Ok(r) => r,
        Err(e) => return Err(unreachable(&app, &s, &e).into()),
    };
    if created.status != StatusCode::CREATED {
        let status = created.refused_status();
        return Ok(page(
            &app,
            status,
            register_form(&s, &form, Some(&created)).render(),
            None,
        ));
    }
    let login = json!({"email": body["email"], "password": body["password"]});
    Ok(
        match app
            .gateway
            .call_for(person(&headers), Method::POST, "/users/login", &login)
            .await
        {
            Ok(r) if r.status == StatusCode::OK => match signed_in(&app, &s, &r).await? {
                Some(cookie) => redirect_with_cookie("/app/account", cookie),
                None => redirect("/app/signin"),
            },
            // Created, but not signed in (the login failed): the sign-in page says what to do.
            _ => redirect("/app/signin"),
        },
    )
}
