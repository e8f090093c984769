//! Password hashing with argon2id. Owns the parameters, the PHC-string format stored in the
//! database, and keeping the hashing work off the async threads (a bounded number of blocking
//! jobs at a time, so a login storm queues instead of allocating `m_cost` per waiting request).
//! It never logs or returns a password.

use std::sync::Arc;

use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use tokio::sync::Semaphore;

/// Default memory cost in KiB (the OWASP recommendation for argon2id).
pub const DEFAULT_M_COST_KIB: u32 = 19_456;
/// Default number of passes.
pub const DEFAULT_T_COST: u32 = 2;
/// Default lanes.
pub const DEFAULT_P_COST: u32 = 1;

/// argon2id cost parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashParams {
    /// Memory in KiB.
    pub m_cost_kib: u32,
    /// Passes.
    pub t_cost: u32,
    /// Lanes.
    pub p_cost: u32,
}

impl Default for HashParams {
    fn default() -> Self {
        Self {
            m_cost_kib: DEFAULT_M_COST_KIB,
            t_cost: DEFAULT_T_COST,
            p_cost: DEFAULT_P_COST,
        }
    }
}

impl HashParams {
    /// The cheapest parameters argon2 allows; for tests only.
    pub const fn cheapest() -> Self {
        Self {
            m_cost_kib: 8,
            t_cost: 1,
            p_cost: 1,
        }
    }
}

/// Why hashing failed.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    /// The parameters are out of argon2's range.
    #[error("argon2 parameters: {0}")]
    Params(String),
    /// Hashing itself failed (or its task died).
    #[error("password hashing failed: {0}")]
    Hash(String),
}

/// Hashes and checks passwords. Cheap to clone.
#[derive(Clone)]
pub struct Passwords {
    argon: Arc<Argon2<'static>>,
    /// Checked against when the e-mail is unknown, so that case costs what a wrong password does.
    decoy: Arc<str>,
    jobs: Arc<Semaphore>,
}

impl std::fmt::Debug for Passwords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passwords").finish_non_exhaustive()
    }
}

impl Passwords {
    /// Builds a hasher with `params`, allowing `max_parallel` hashes at once.
    ///
    /// # Errors
    /// When argon2 refuses the parameters.
    pub fn new(params: HashParams, max_parallel: usize) -> Result<Self, PasswordError> {
        let p = Params::new(params.m_cost_kib, params.t_cost, params.p_cost, None)
            .map_err(|e| PasswordError::Params(e.to_string()))?;
        let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, p);
        let decoy = hash_with(&argon, &random_token(16))?;
        Ok(Self {
            argon: Arc::new(argon),
            decoy: decoy.into(),
            jobs: Arc::new(Semaphore::new(max_parallel.max(1))),
        })
    }

    /// Hashes `password` into a PHC string (`$argon2id$v=19$m=…`).
    ///
    /// # Errors
    /// When hashing fails.
    pub async fn hash(&self, password: String) -> Result<String, PasswordError> {
        let argon = self.argon.clone();
        self.blocking(move || hash_with(&argon, &password)).await?
    }

    /// Checks `password` against `stored`; with `None` (no such user) it does the same work
    /// against a decoy and answers `false`.
    ///
    /// # Errors
    /// When the work could not run. A malformed stored hash is a mismatch, not an error.
    pub async fn verify(
        &self,
        password: String,
        stored: Option<String>,
    ) -> Result<bool, PasswordError> {
        let argon = self.argon.clone();
        let decoy = self.decoy.clone();
        self.blocking(move || {
            let known = stored.is_some();
            let phc = stored.as_deref().unwrap_or(&decoy);
            let ok = PasswordHash::new(phc)
                .is_ok_and(|h| argon.verify_password(password.as_bytes(), &h).is_ok());
            known && ok
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PasswordError> {
        let _permit = self
            .jobs
            .acquire()
            .await
            .map_err(|e| PasswordError::Hash(e.to_string()))?;
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| PasswordError::Hash(e.to_string()))
    }
}

fn hash_with(argon: &Argon2<'_>, password: &str) -> Result<String, PasswordError> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
    argon
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// `bytes` random bytes as lower-case hex (secrets, generated passwords' raw material).
///
/// # Panics
/// If the operating system has no randomness to give: nothing safe can be done without it.
pub fn random_token(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("operating-system randomness");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_verify_and_differ_per_salt() {
        let p = Passwords::new(HashParams::cheapest(), 2).unwrap();
        let a = p.hash("123PasswordX#".into()).await.unwrap();
        let b = p.hash("123PasswordX#".into()).await.unwrap();
        assert!(a.starts_with("$argon2id$v=19$m=8,t=1,p=1$"), "{a}");
        assert_ne!(a, b, "a fresh salt per hash");
        assert!(p
            .verify("123PasswordX#".into(), Some(a.clone()))
            .await
            .unwrap());
        assert!(!p.verify("123PasswordX!".into(), Some(a)).await.unwrap());
        assert!(!p.verify("anything".into(), None).await.unwrap());
        assert!(!p
            .verify("x".into(), Some("not a phc string".into()))
            .await
            .unwrap());
    }

    #[test]
    fn bad_parameters_are_refused() {
        let params = HashParams {
            m_cost_kib: 1,
            ..HashParams::cheapest()
        };
        assert!(Passwords::new(params, 1).is_err());
    }

    #[test]
    fn random_tokens_are_hex_of_the_asked_length() {
        let t = random_token(32);
        assert_eq!(t.len(), 64);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(t, random_token(32));
    }
}
