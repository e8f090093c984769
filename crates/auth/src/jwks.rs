//! A JSON Web Key Set fetched over HTTP(S) and cached by `kid`.
//!
//! Keys are refreshed when older than the refresh interval (a failed refresh keeps serving the
//! last good set) and when a token names an unknown `kid` — at most once per `min_refetch`, so a
//! flood of tokens with random `kid`s cannot turn the gateway into a JWKS hammer. Only one refresh
//! runs at a time. This module owns fetching and caching; the checks on tokens live in `verify`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::verify::VerifyError;

/// Default age after which the key set is fetched again.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);
/// Default minimum gap between fetches triggered by unknown `kid`s.
pub const DEFAULT_MIN_REFETCH: Duration = Duration::from_secs(10);
/// Largest JWKS document accepted.
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// Time limit on one fetch.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A cached, refreshing key set.
pub struct Jwks {
    url: http::Uri,
    client: HttpsClient,
    refresh_every: Duration,
    min_refetch: Duration,
    state: RwLock<State>,
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    keys: HashMap<String, Entry>,
    fetched_at: Option<Instant>,
    attempted_at: Option<Instant>,
    last_error: Option<String>,
}

#[derive(Clone)]
struct Entry {
    key: Arc<DecodingKey>,
    alg: Option<Algorithm>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks").field("url", &self.url).finish()
    }
}

/// Why a JWKS cache could not be created.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The URL does not parse or is not http(s).
    #[error("bad JWKS URL {0:?}: must be an absolute http:// or https:// URL")]
    BadUrl(String),
}

impl Jwks {
    /// A cache for `url`, fetching with `tls` (trust roots chosen by the caller; no ALPN set, the
    /// connector offers http/1.1 itself).
    ///
    /// Nothing is fetched until [`Jwks::refresh`] or the first token.
    ///
    /// # Errors
    /// When the URL is not an absolute http(s) URL.
    pub fn new(
        url: &str,
        tls: rustls::ClientConfig,
        refresh_every: Duration,
        min_refetch: Duration,
    ) -> Result<Self, JwksError> {
        let uri: http::Uri = url.parse().map_err(|_| JwksError::BadUrl(url.into()))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(JwksError::BadUrl(url.into()));
        }
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            url: uri,
            client,
            refresh_every,
            min_refetch,
            state: RwLock::new(State::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The endpoint.
    pub fn url(&self) -> &http::Uri {
        &self.url
    }

    /// Fetches the key set now and replaces the cache. Returns how many keys were loaded.
    ///
    /// # Errors
    /// A description of what failed; the previous keys stay in use.
    pub async fn refresh(&self) -> Result<usize, String> {
        let _one_at_a_time = self.fetching.lock().await;
        self.refresh_locked().await
    }

    async fn refresh_locked(&self) -> Result<usize, String> {
        if let Ok(mut s) = self.state.write() {
            s.attempted_at = Some(Instant::now());
        }
        let result = tokio::time::timeout(FETCH_TIMEOUT, self.fetch())
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {FETCH_TIMEOUT:?}")));
        let mut s = self
            .state
            .write()
            .map_err(|_| "JWKS cache lock poisoned".to_string())?;
        match result {
            Ok(keys) => {
                let n = keys.len();
                s.keys = keys;
                s.fetched_at = Some(Instant::now());
                s.last_error = None;
                tracing::debug!(url = %self.url, keys = n, "JWKS refreshed");
                Ok(n)
            }
            Err(e) => {
                tracing::warn!(url = %self.url, error = %e, "JWKS refresh failed");
                s.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    async fn fetch(&self) -> Result<HashMap<String, Entry>, String> {
        let req = http::Request::get(self.url.clone())
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| format!("fetch failed: {e}"))?;
        if resp.status() != http::StatusCode::OK {
            return Err(format!("answered {}", resp.status()));
        }
        let body = Limited::new(resp.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading body: {e}"))?
            .to_bytes();
        let set: JwkSet =
            serde_json::from_slice(&body).map_err(|e| format!("not a JWK set: {e}"))?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let Some(kid) = jwk.common.key_id.clone() else {
                tracing::debug!("skipping JWK without kid");
                continue;
            };
            if matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            ) {
                continue;
            }
            let alg = match jwk.common.key_algorithm {
                None => None,
                Some(a) => match format!("{a:?}").parse::<Algorithm>() {
                    Ok(alg) => Some(alg),
                    Err(_) => continue, // an encryption algorithm: not for signatures
                },
            };
            match DecodingKey::from_jwk(jwk) {
                Ok(key) => {
                    keys.insert(
                        kid,
                        Entry {
                            key: Arc::new(key),
                            alg,
                        },
                    );
                }
                Err(e) => tracing::debug!(%kid, error = %e, "skipping unusable JWK"),
            }
        }
        Ok(keys)
    }

    /// The key for `kid`, refreshing as described in the module docs.
    pub(crate) async fn key_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<DecodingKey>, VerifyError> {
        let kid = kid.ok_or(VerifyError::UnknownKey(None))?;
        let (found, stale) = self.lookup(kid);
        let entry = match found {
            Some(e) if !stale => e,
            Some(e) => {
                // Stale: try to refresh, keep the old key if the refresh fails.
                let _ = self
                    .refresh_if_due(|s| s.fetched_at, self.refresh_every)
                    .await;
                self.lookup(kid).0.unwrap_or(e)
            }
            None => {
                // Waits for a fetch already in flight (the start-up one, say), and fetches again
                // only if the last attempt is older than `min_refetch`.
                let _ = self
                    .refresh_if_due(|s| s.attempted_at, self.min_refetch)
                    .await;
                match self.lookup(kid).0 {
                    Some(e) => e,
                    None => return Err(self.missing(kid)),
                }
            }
        };
        if entry.alg.is_some_and(|a| a != alg) {
            return Err(VerifyError::AlgorithmNotAllowed(alg));
        }
        Ok(entry.key)
    }

    /// Refreshes unless another task did so while we waited for the lock.
    async fn refresh_if_due(
        &self,
        stamp: impl Fn(&State) -> Option<Instant>,
        gap: Duration,
    ) -> Result<usize, String> {
        let _one_at_a_time = self.fetching.lock().await;
        let due = self
            .state
            .read()
            .map(|s| stamp(&s).is_none_or(|t| t.elapsed() >= gap))
            .unwrap_or(true);
        if due {
            self.refresh_locked().await
        } else {
            Ok(0)
        }
    }

    /// The cached entry for `kid` and whether the set is due for a refresh.
    fn lookup(&self, kid: &str) -> (Option<Entry>, bool) {
        let Ok(s) = self.state.read() else {
            return (None, false);
        };
        let stale = s
            .fetched_at
            .is_none_or(|t| t.elapsed() >= self.refresh_every);
        (s.keys.get(kid).cloned(), stale)
    }

    fn missing(&self, kid: &str) -> VerifyError {
        match self.state.read() {
            Ok(s) if s.fetched_at.is_none() => VerifyError::KeysUnavailable(
                s.last_error
                    .clone()
                    .unwrap_or_else(|| "never fetched".into()),
            ),
            _ => VerifyError::UnknownKey(Some(kid.to_string())),
        }
    }
}
