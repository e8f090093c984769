//! Browsers' sessions: a table keyed by a random id that only the session cookie carries
//! (`HttpOnly`, `SameSite=Strict`, `Secure`, path `/app`), each with its CSRF token and, once
//! signed in, the user's bearer token and who they are. The token never reaches the browser.
//! Signing in replaces the session id (no fixation); sessions idle for [`IDLE`] are gone.
//!
//! Only signed-in sessions are kept. A visitor who has not signed in has a cookie with a random
//! id and a CSRF token derived from it ([`Session::anonymous`]), and nothing on the server: page
//! views cannot fill the table and push signed-in people out of it (until 2026-12-05 every
//! cookie-less page view stored a session, and 100,400 of them in 15 s evicted signed-in ones).
//! The token needs no secret: a form from another site cannot carry it without the cookie's
//! value, which the browser never shows to a page. In memory the table is a least-recently-used
//! map, so no operation scans it.
//!
//! Where the table is kept ([`Sessions`]): in this process's memory (`pms up`, or one `pms web`;
//! a restart signs everyone out), or with `--nats-url` in a NATS JetStream key-value bucket
//! ([`BUCKET`]) that every replica of the front office shares, so that a browser's requests may
//! reach any of them (the gateway balances per request) and a sign-out holds everywhere.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv;
use hashlink::LruCache;
use http::{HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};

/// The session cookie's name.
pub const COOKIE: &str = "pms_session";
/// A session unused this long is gone.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// Most signed-in sessions kept; past it the least recently used go first (in the shared bucket,
/// the least recently written, whose entries also expire [`IDLE`] after their last write).
const MAX_SESSIONS: usize = 100_000;
/// The key-value bucket of the shared sessions.
pub const BUCKET: &str = "pms_web_sessions";
/// A shared session's last use is written again once it is older than this, so that the
/// bucket's expiry follows use without a write per request: a session is gone between
/// [`IDLE`] and `IDLE` + this after its last use.
const TOUCH: Duration = Duration::from_secs(60);
/// Longest wait for the shared bucket's answer: past it the page says to try again.
const SHARED_TIMEOUT: Duration = Duration::from_secs(2);

/// Who is signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// When it was last used (written), ms since the Unix epoch.
    seen_ms: u64,
}

impl Session {
    /// Whether `sent` is this session's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, sent: &str) -> bool {
        let (a, b) = (self.csrf.as_bytes(), sent.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// A session that is not kept anywhere: the frame of a page answered when sessions cannot
    /// be reached or a form is refused.
    pub fn unsaved() -> Self {
        Self::fresh(None)
    }

    /// The session of a visitor who has not signed in, with cookie id `id`: nothing about it is
    /// kept; its CSRF token is derived from the id, the same on every replica.
    pub fn anonymous(id: String) -> Self {
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            format!("pms-web anonymous csrf\0{id}").as_bytes(),
        );
        Self {
            csrf: digest.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
            id,
            user: None,
            seen_ms: now_ms(),
        }
    }

    fn fresh(user: Option<User>) -> Self {
        Self {
            id: random_token(),
            csrf: random_token(),
            user,
            seen_ms: now_ms(),
        }
    }

    /// Unused for longer than [`IDLE`].
    fn expired(&self, now: u64) -> bool {
        now.saturating_sub(self.seen_ms) > millis(IDLE)
    }
}

/// A session as the shared bucket keeps it (the id is the key).
#[derive(Serialize, Deserialize)]
struct Stored {
    csrf: String,
    user: Option<User>,
    seen_ms: u64,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// The shared session store could not be reached: the page says so (503) and nothing changes.
#[derive(Debug, thiserror::Error)]
#[error("the session store is unavailable: {0}")]
pub struct Unavailable(String);

fn unavailable(e: impl std::fmt::Display) -> Unavailable {
    Unavailable(e.to_string())
}

/// Every live session, wherever they are kept.
#[derive(Debug)]
pub struct Sessions(Kept);

#[derive(Debug)]
enum Kept {
    Memory(Mutex<LruCache<String, Session>>),
    /// The bucket, made on first use (and again after a failure), so the front office starts
    /// and recovers while the broker is away.
    Shared(Box<Shared>),
}

/// The shared bucket's handle.
#[derive(Debug)]
struct Shared {
    js: async_nats::jetstream::Context,
    bucket: tokio::sync::OnceCell<kv::Store>,
}

impl Shared {
    /// The bucket (made if it does not exist yet). Its stream is made here, as the client's
    /// `create_key_value` would make it, because that call first reads the account's limits in
    /// a form older servers (Debian's 2.9) do not answer in.
    async fn bucket(&self) -> Result<&kv::Store, Unavailable> {
        use async_nats::jetstream::stream;
        self.bucket
            .get_or_try_init(|| async {
                self.js
                    .get_or_create_stream(stream::Config {
                        name: format!("KV_{BUCKET}"),
                        description: Some("PMS front office sessions".into()),
                        subjects: vec![format!("$KV.{BUCKET}.>")],
                        max_messages_per_subject: 1,
                        max_age: IDLE + TOUCH,
                        // Full: the least recently written session goes, as in memory.
                        max_messages: i64::try_from(MAX_SESSIONS).unwrap_or(i64::MAX),
                        discard: stream::DiscardPolicy::Old,
                        storage: stream::StorageType::File,
                        allow_rollup: true,
                        deny_delete: true,
                        allow_direct: true,
                        ..Default::default()
                    })
                    .await
                    .map_err(unavailable)?;
                self.js.get_key_value(BUCKET).await.map_err(unavailable)
            })
            .await
    }
}

/// A client of the NATS server at `url` for [`Sessions::shared`]: it connects (and reconnects)
/// in the background, so the front office starts while the broker is away.
///
/// # Errors
/// [`Unavailable`] when the URL is malformed.
pub async fn connect(url: &str) -> Result<async_nats::Client, Unavailable> {
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url)
        .await
        .map_err(unavailable)
}

impl Default for Sessions {
    fn default() -> Self {
        Self::in_memory()
    }
}

impl Sessions {
    /// Sessions in this process's memory.
    pub fn in_memory() -> Self {
        Self::in_memory_for(MAX_SESSIONS)
    }

    /// Sessions in this process's memory, at most `most` of them.
    fn in_memory_for(most: usize) -> Self {
        Self(Kept::Memory(Mutex::new(LruCache::new(most))))
    }

    /// Sessions in the JetStream key-value bucket [`BUCKET`] of `client`'s server, shared by
    /// every front office using it.
    pub fn shared(client: async_nats::Client) -> Self {
        Self(Kept::Shared(Box::new(Shared {
            js: async_nats::jetstream::context::ContextBuilder::new()
                .timeout(SHARED_TIMEOUT)
                .build(client),
            bucket: tokio::sync::OnceCell::new(),
        })))
    }

    fn table(m: &Mutex<LruCache<String, Session>>) -> MutexGuard<'_, LruCache<String, Session>> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session with `id`, if it is live (it counts as used now).
    ///
    /// # Errors
    /// [`Unavailable`] when the shared store does not answer.
    pub async fn get(&self, id: &str) -> Result<Option<Session>, Unavailable> {
        let now = now_ms();
        match &self.0 {
            Kept::Memory(m) => {
                let mut table = Self::table(m);
                let Some(s) = table.get_mut(id) else {
                    return Ok(None);
                };
                if s.expired(now) {
                    table.remove(id);
                    return Ok(None);
                }
                s.seen_ms = now;
                Ok(Some(s.clone()))
            }
            Kept::Shared(shared) => {
                let store = shared.bucket().await?;
                let Some(bytes) = store.get(id).await.map_err(unavailable)? else {
                    return Ok(None);
                };
                let Ok(stored) = serde_json::from_slice::<Stored>(&bytes) else {
                    tracing::warn!("a shared session that cannot be read: dropped");
                    store.purge(id).await.map_err(unavailable)?;
                    return Ok(None);
                };
                let mut s = Session {
                    id: id.to_owned(),
                    csrf: stored.csrf,
                    user: stored.user,
                    seen_ms: stored.seen_ms,
                };
                if s.expired(now) {
                    store.purge(id).await.map_err(unavailable)?;
                    return Ok(None);
                }
                if now.saturating_sub(s.seen_ms) > millis(TOUCH) {
                    s.seen_ms = now;
                    Self::put(store, &s).await?;
                }
                Ok(Some(s))
            }
        }
    }

    async fn put(store: &kv::Store, s: &Session) -> Result<(), Unavailable> {
        let stored = Stored {
            csrf: s.csrf.clone(),
            user: s.user.clone(),
            seen_ms: s.seen_ms,
        };
        let bytes = serde_json::to_vec(&stored).map_err(unavailable)?;
        store
            .put(&s.id, bytes.into())
            .await
            .map(|_| ())
            .map_err(unavailable)
    }

    async fn insert(&self, s: &Session) -> Result<(), Unavailable> {
        match &self.0 {
            Kept::Memory(m) => {
                // Full: the least recently used goes (expired ones are the least recent).
                Self::table(m).insert(s.id.clone(), s.clone());
                Ok(())
            }
            Kept::Shared(shared) => Self::put(shared.bucket().await?, s).await,
        }
    }

    /// A new visitor's session, with a new random id: nothing is kept
    /// ([`Session::anonymous`]).
    pub fn create(&self) -> Session {
        Session::anonymous(random_token())
    }

    /// Signs `user` in on a new session that replaces `old` (new id and CSRF token).
    ///
    /// # Errors
    /// [`Unavailable`] when the shared store does not answer (then nobody is signed in).
    pub async fn sign_in(&self, old: &str, user: User) -> Result<Session, Unavailable> {
        let s = Session::fresh(Some(user));
        self.insert(&s).await?;
        self.remove(old).await?;
        Ok(s)
    }

    /// Ends a session.
    ///
    /// # Errors
    /// [`Unavailable`] when the shared store does not answer.
    pub async fn remove(&self, id: &str) -> Result<(), Unavailable> {
        match &self.0 {
            Kept::Memory(m) => {
                Self::table(m).remove(id);
                Ok(())
            }
            // Purged rather than deleted: no marker of it is kept.
            Kept::Shared(shared) => shared.bucket().await?.purge(id).await.map_err(unavailable),
        }
    }

    /// Sessions held in this process's memory; `None` when they are shared (the bucket counts
    /// ended sessions' markers too, until they expire).
    pub fn held(&self) -> Option<u64> {
        match &self.0 {
            Kept::Memory(m) => Some(Self::table(m).len() as u64),
            Kept::Shared(_) => None,
        }
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

    /// The same rules for a session store, wherever it keeps them.
    async fn keeps_sessions_as_it_should(sessions: &Sessions) {
        // A visitor's session is not kept; its token is its id's, whoever derives it.
        let anon = sessions.create();
        assert!(sessions.get(&anon.id).await.expect("get").is_none());
        assert_eq!(Session::anonymous(anon.id.clone()).csrf, anon.csrf);
        assert_ne!(sessions.create().csrf, anon.csrf);
        let signed = sessions.sign_in(&anon.id, user()).await.expect("sign in");
        assert_ne!(signed.id, anon.id, "no session fixation");
        assert_ne!(signed.csrf, anon.csrf);
        assert!(sessions.get(&anon.id).await.expect("get").is_none());
        let found = sessions.get(&signed.id).await.expect("get");
        assert_eq!(found.as_ref().and_then(|s| s.user.clone()), Some(user()));
        assert_eq!(found.map(|s| s.csrf), Some(signed.csrf.clone()));
        // Idle past IDLE: gone, and forgotten.
        let mut idle = Session::fresh(Some(user()));
        idle.seen_ms -= millis(IDLE) + 1;
        sessions.insert(&idle).await.expect("insert");
        assert!(sessions.get(&idle.id).await.expect("get").is_none());
        sessions.remove(&signed.id).await.expect("remove");
        assert!(sessions.get(&signed.id).await.expect("get").is_none());
        assert!(sessions.get(&random_token()).await.expect("get").is_none());
        assert!(
            sessions.held().is_none_or(|n| n == 0),
            "{:?}",
            sessions.held()
        );
    }

    #[tokio::test]
    async fn sessions_in_memory() {
        keeps_sessions_as_it_should(&Sessions::in_memory()).await;
    }

    async fn shared(url: &str) -> Sessions {
        let client = async_nats::connect(url).await.expect("nats");
        Sessions::shared(client)
    }

    #[tokio::test]
    async fn sessions_shared_by_front_offices() {
        if pms_testkit::nats::skipped() {
            eprintln!("PMS_TEST_SKIP_NATS=1: skipping the broker variant");
            return;
        }
        let server = pms_testkit::nats::NatsServer::start();
        let (one, other) = (shared(&server.url).await, shared(&server.url).await);
        keeps_sessions_as_it_should(&one).await;
        // A session signed in at one front office is the other's too, signing out included.
        let anon = one.create();
        let signed = other.sign_in(&anon.id, user()).await.expect("sign in");
        assert!(one.get(&anon.id).await.expect("get").is_none());
        let there = one.get(&signed.id).await.expect("get").expect("shared");
        assert_eq!(there.user, Some(user()));
        one.remove(&signed.id).await.expect("remove");
        assert!(other.get(&signed.id).await.expect("get").is_none());
        // A used session is written again once TOUCH has passed, which keeps it from expiring.
        let mut old = Session::fresh(None);
        old.seen_ms -= millis(TOUCH) + 1;
        one.insert(&old).await.expect("insert");
        let before = old.seen_ms;
        other.get(&old.id).await.expect("get").expect("live");
        let Kept::Shared(handle) = &one.0 else {
            unreachable!("shared sessions");
        };
        let store = handle.bucket().await.expect("bucket");
        let bytes = store.get(&old.id).await.expect("get").expect("stored");
        let stored: Stored = serde_json::from_slice(&bytes).expect("json");
        assert!(stored.seen_ms > before, "touched");
        // Bounded as the memory table is: the least recently written go first.
        let info = store.stream.get_info().await.expect("stream info");
        let config = &info.config;
        assert_eq!(config.max_messages, MAX_SESSIONS as i64);
        assert_eq!(
            config.discard,
            async_nats::jetstream::stream::DiscardPolicy::Old
        );
        // Without the broker: a clear error, not a panic or a silent sign-out.
        drop(server);
        let gone = one.get(&old.id).await;
        assert!(gone.is_err(), "{gone:?}");
    }

    /// Page views keep nothing, so no number of them pushes a signed-in session out; signed-in
    /// sessions past the bound push out the least recently used, without scanning the table.
    #[tokio::test]
    async fn visitors_never_push_out_signed_in_sessions() {
        let sessions = Sessions::in_memory_for(3);
        let kept = sessions
            .sign_in(&random_token(), user())
            .await
            .expect("sign in");
        for _ in 0..1000 {
            let visitor = sessions.create();
            assert!(sessions.get(&visitor.id).await.expect("get").is_none());
        }
        assert_eq!(sessions.held(), Some(1));
        let second = sessions
            .sign_in(&random_token(), user())
            .await
            .expect("sign in");
        let third = sessions
            .sign_in(&random_token(), user())
            .await
            .expect("sign in");
        // `kept` used again: now `second` is the least recently used.
        assert!(sessions.get(&kept.id).await.expect("get").is_some());
        let fourth = sessions
            .sign_in(&random_token(), user())
            .await
            .expect("sign in");
        assert_eq!(sessions.held(), Some(3));
        assert!(sessions.get(&second.id).await.expect("get").is_none());
        for s in [&kept, &third, &fourth] {
            assert!(sessions.get(&s.id).await.expect("get").is_some());
        }
    }

    #[tokio::test]
    async fn csrf_tokens_must_match_exactly() {
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
