//! Browsers' sessions: an in-memory table keyed by a random id that only the session cookie
//! carries (`HttpOnly`, `SameSite=Strict`, `Secure`, path `/app`), each with its CSRF token and,
//! once signed in, the user's bearer token and who they are. The token never reaches the browser.
//! Nothing is written to disk: a restart signs everyone out. Signing in replaces the session id
//! (no fixation); idle sessions expire.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue};

/// The session cookie's name.
pub const COOKIE: &str = "pms_session";
/// A session unused this long is gone.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// Most sessions kept; past it the least recently used go first.
const MAX_SESSIONS: usize = 100_000;

/// Who is signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The bearer token the users service issued.
    pub token: String,
    /// Their user id (the token's subject).
    pub id: i64,
    /// Their role (`CUSTOMER`, `CUSTOMER_MANAGER`, `PARK_MANAGER`, `SUPERVISOR`).
    pub role: String,
    /// Their first name, as the login answered.
    pub name: String,
}

/// One browser's session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The id the cookie carries.
    pub id: String,
    /// The token every form of this session must send back.
    pub csrf: String,
    /// Who is signed in, if anyone.
    pub user: Option<User>,
    last_seen: Instant,
}

impl Session {
    /// Whether `sent` is this session's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, sent: &str) -> bool {
        let (a, b) = (self.csrf.as_bytes(), sent.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// Every live session.
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

impl Sessions {
    fn table(&self) -> MutexGuard<'_, HashMap<String, Session>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session with `id`, if it is live (it counts as used now).
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut table = self.table();
        let s = table.get_mut(id)?;
        if s.last_seen.elapsed() > IDLE {
            table.remove(id);
            return None;
        }
        s.last_seen = Instant::now();
        Some(s.clone())
    }

    /// A new anonymous session.
    pub fn create(&self) -> Session {
        let s = Session {
            id: random_token(),
            csrf: random_token(),
            user: None,
            last_seen: Instant::now(),
        };
        let mut table = self.table();
        if table.len() >= MAX_SESSIONS {
            table.retain(|_, s| s.last_seen.elapsed() <= IDLE);
            if table.len() >= MAX_SESSIONS {
                if let Some(oldest) = table
                    .iter()
                    .min_by_key(|(_, s)| s.last_seen)
                    .map(|(k, _)| k.clone())
                {
                    table.remove(&oldest);
                }
            }
        }
        table.insert(s.id.clone(), s.clone());
        s
    }

    /// Signs `user` in on a new session that replaces `old` (new id and CSRF token).
    pub fn sign_in(&self, old: &str, user: User) -> Session {
        self.remove(old);
        let mut s = self.create();
        s.user = Some(user);
        self.table().insert(s.id.clone(), s.clone());
        s
    }

    /// Ends a session.
    pub fn remove(&self, id: &str) {
        self.table().remove(id);
    }

    /// Live sessions.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// 32 random bytes from the operating system, as hex.
pub fn random_token() -> String {
    let mut buf = [0u8; 32];
    // The operating system's generator does not fail on the systems PMS runs on; if it ever
    // did, no session could be made safely, so stop rather than hand out a guessable id.
    getrandom::fill(&mut buf).expect("operating-system randomness");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The session id a request's `Cookie` headers carry.
pub fn from_cookies(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `Set-Cookie` for session `id`.
pub fn set_cookie(id: &str, secure: bool) -> HeaderValue {
    cookie(&format!("{COOKIE}={id}"), secure)
}

/// `Set-Cookie` that ends the session in the browser.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    cookie(&format!("{COOKIE}=; Max-Age=0"), secure)
}

fn cookie(start: &str, secure: bool) -> HeaderValue {
    let text = format!(
        "{start}; Path=/app; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    );
    HeaderValue::try_from(text)
        .unwrap_or_else(|_| HeaderValue::from_static("pms_session=; Max-Age=0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> User {
        User {
            token: "t".into(),
            id: 4,
            role: "CUSTOMER".into(),
            name: "Rui".into(),
        }
    }

    #[test]
    fn signing_in_replaces_the_session_and_its_csrf_token() {
        let sessions = Sessions::default();
        let anon = sessions.create();
        let signed = sessions.sign_in(&anon.id, user());
        assert_ne!(signed.id, anon.id, "no session fixation");
        assert_ne!(signed.csrf, anon.csrf);
        assert!(sessions.get(&anon.id).is_none());
        assert_eq!(sessions.get(&signed.id).and_then(|s| s.user), Some(user()));
        sessions.remove(&signed.id);
        assert!(sessions.is_empty());
    }

    #[test]
    fn csrf_tokens_must_match_exactly() {
        let s = Sessions::default().create();
        assert!(s.csrf_matches(&s.csrf.clone()));
        assert!(!s.csrf_matches(""));
        assert!(!s.csrf_matches(&s.csrf[1..]));
        assert!(!s.csrf_matches(
            &s.csrf
                .to_uppercase()
                .replace(|c: char| c.is_ascii_digit(), "x")
        ));
    }

    #[test]
    fn the_cookie_is_read_among_others_and_must_look_like_an_id() {
        let id = random_token();
        let mut h = HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            HeaderValue::try_from(format!("a=b; {COOKIE}={id}; c=d")).unwrap(),
        );
        assert_eq!(from_cookies(&h), Some(id));
        h.insert(
            http::header::COOKIE,
            HeaderValue::from_static("pms_session=../../etc"),
        );
        assert_eq!(from_cookies(&h), None);
        let set = set_cookie("abc", true);
        let set = set.to_str().unwrap();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Secure")
        );
    }
}
