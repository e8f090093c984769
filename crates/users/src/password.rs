//! Password hashing with argon2id. Owns the parameters, the PHC-string format stored in the
//! database, and keeping the hashing work off the async threads within a fixed memory budget:
//! at most `max_parallel` hashes run at once, each in an argon2 work area of `m_cost` that is
//! allocated once and reused (never freed and allocated again per hash, which glibc's arenas
//! kept: 100 sign-ups took `pms up` from 58 MB to 1.07 GB), and at most
//! [`QUEUE_PER_JOB`] × `max_parallel` more wait; beyond that a request is refused at once
//! ([`PasswordError::Busy`], a 503 with `Retry-After`) rather than queued without bound.
//! It never logs or returns a password.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use argon2::password_hash::{Output, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use tokio::sync::Semaphore;

/// Default memory cost in KiB (the OWASP recommendation for argon2id).
pub const DEFAULT_M_COST_KIB: u32 = 19_456;
/// Default number of passes.
pub const DEFAULT_T_COST: u32 = 2;
/// Default lanes.
pub const DEFAULT_P_COST: u32 = 1;
/// Hashes that may wait per one running: past `QUEUE_PER_JOB × max_parallel` waiting, a request
/// is refused with [`PasswordError::Busy`]. At ~20 hashes a second per core, the last in line
/// waits under two seconds.
pub const QUEUE_PER_JOB: usize = 32;
/// Seconds a refused request is told to wait (`Retry-After`).
pub const BUSY_RETRY_AFTER_S: u64 = 1;

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
    /// As many hashes as allowed are running and waiting: try again shortly.
    #[error("too many passwords being checked at once")]
    Busy,
}

/// Hashes and checks passwords. Cheap to clone.
#[derive(Clone)]
pub struct Passwords {
    argon: Arc<Argon2<'static>>,
    /// Checked against when the e-mail is unknown, so that case costs what a wrong password does.
    decoy: Arc<str>,
    jobs: Arc<Semaphore>,
    /// Requests holding or waiting for a job.
    admitted: Arc<AtomicUsize>,
    /// Most requests holding or waiting for a job.
    admit: usize,
    areas: Arc<WorkAreas>,
}

impl std::fmt::Debug for Passwords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passwords").finish_non_exhaustive()
    }
}

/// argon2's work areas, one per running hash, kept for the next one: the service's hashing
/// memory stays at `max_parallel` × `m_cost` whatever the load.
#[derive(Default)]
struct WorkAreas {
    spare: Mutex<Vec<Vec<Block>>>,
    /// Areas ever allocated (for tests: never more than the jobs that ran at once).
    allocated: AtomicUsize,
}

impl WorkAreas {
    /// A spare area of at least `blocks` blocks, or a new one.
    fn take(&self, blocks: usize) -> Vec<Block> {
        let spare = self.spare.lock().map_or(None, |mut s| {
            s.iter()
                .position(|a| a.len() >= blocks)
                .map(|i| s.swap_remove(i))
        });
        spare.unwrap_or_else(|| {
            self.allocated.fetch_add(1, Ordering::Relaxed);
            vec![Block::default(); blocks]
        })
    }

    fn put_back(&self, area: Vec<Block>) {
        if let Ok(mut spare) = self.spare.lock() {
            spare.push(area);
        }
    }
}

impl Passwords {
    /// Builds a hasher with `params`, allowing `max_parallel` hashes at once and
    /// [`QUEUE_PER_JOB`] times as many waiting.
    ///
    /// # Errors
    /// When argon2 refuses the parameters.
    pub fn new(params: HashParams, max_parallel: usize) -> Result<Self, PasswordError> {
        let p = Params::new(params.m_cost_kib, params.t_cost, params.p_cost, None)
            .map_err(|e| PasswordError::Params(e.to_string()))?;
        let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, p);
        let areas = Arc::new(WorkAreas::default());
        let decoy = hash_with(&argon, &random_token(16), &areas)?;
        let max_parallel = max_parallel.max(1);
        Ok(Self {
            argon: Arc::new(argon),
            decoy: decoy.into(),
            jobs: Arc::new(Semaphore::new(max_parallel)),
            admitted: Arc::default(),
            admit: max_parallel * (QUEUE_PER_JOB + 1),
            areas,
        })
    }

    /// Hashes `password` into a PHC string (`$argon2id$v=19$m=…`).
    ///
    /// # Errors
    /// When hashing fails, or [`PasswordError::Busy`].
    pub async fn hash(&self, password: String) -> Result<String, PasswordError> {
        let argon = self.argon.clone();
        let areas = self.areas.clone();
        self.blocking(move || hash_with(&argon, &password, &areas))
            .await?
    }

    /// Checks `password` against `stored`; with `None` (no such user) it does the same work
    /// against a decoy and answers `false`.
    ///
    /// # Errors
    /// When the work could not run, or [`PasswordError::Busy`]. A malformed stored hash is a
    /// mismatch, not an error.
    pub async fn verify(
        &self,
        password: String,
        stored: Option<String>,
    ) -> Result<bool, PasswordError> {
        let decoy = self.decoy.clone();
        let areas = self.areas.clone();
        self.blocking(move || {
            let known = stored.is_some();
            let phc = stored.as_deref().unwrap_or(&decoy);
            let ok = PasswordHash::new(phc).is_ok_and(|h| matches(&h, &password, &areas));
            known && ok
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PasswordError> {
        let _admitted = Admitted::enter(&self.admitted, self.admit)?;
        let permit = self
            .jobs
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| PasswordError::Hash(e.to_string()))?;
        // The job holds its permit: a request given up while its hash runs frees the slot only
        // when the hash is done, so no more run at once (nor work areas exist) than allowed.
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        })
        .await
        .map_err(|e| PasswordError::Hash(e.to_string()))
    }
}

/// A request counted among those holding or waiting for a hashing job, until dropped.
struct Admitted<'a>(&'a AtomicUsize);

impl<'a> Admitted<'a> {
    fn enter(count: &'a AtomicUsize, most: usize) -> Result<Self, PasswordError> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < most).then_some(n + 1)
            })
            .map(|_| Self(count))
            .map_err(|_| PasswordError::Busy)
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `password` hashed with `argon` and a fresh salt, as a PHC string, in a reused work area.
fn hash_with(
    argon: &Argon2<'_>,
    password: &str,
    areas: &WorkAreas,
) -> Result<String, PasswordError> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
    let params = argon.params().clone();
    let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
    let mut salt_bytes = [0u8; 64];
    let raw_salt = salt
        .decode_b64(&mut salt_bytes)
        .map_err(|e| PasswordError::Hash(e.to_string()))?;
    compute(argon, password.as_bytes(), raw_salt, &mut out, areas)?;
    let hash = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: (&params)
            .try_into()
            .map_err(|e: argon2::password_hash::Error| PasswordError::Hash(e.to_string()))?,
        salt: Some(salt.as_salt()),
        hash: Some(Output::new(&out).map_err(|e| PasswordError::Hash(e.to_string()))?),
    };
    Ok(hash.to_string())
}

/// Whether `password` hashes to `stored` with `stored`'s own algorithm, version and costs
/// (compared in constant time).
fn matches(stored: &PasswordHash<'_>, password: &str, areas: &WorkAreas) -> bool {
    let (Some(salt), Some(expected)) = (stored.salt, stored.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        Algorithm::try_from(stored.algorithm),
        Params::try_from(stored),
    ) else {
        return false;
    };
    let version = stored
        .version
        .and_then(|v| Version::try_from(v).ok())
        .unwrap_or_default();
    let argon = Argon2::new(algorithm, version, params);
    let mut salt_bytes = [0u8; 64];
    let Ok(raw_salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let mut out = vec![0u8; expected.len()];
    compute(&argon, password.as_bytes(), raw_salt, &mut out, areas).is_ok()
        && Output::new(&out).is_ok_and(|o| o == expected)
}

/// argon2 of `password` and `salt` into `out`, in a work area from `areas`.
fn compute(
    argon: &Argon2<'_>,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
    areas: &WorkAreas,
) -> Result<(), PasswordError> {
    let blocks = argon.params().block_count();
    let mut area = areas.take(blocks);
    let done = argon.hash_password_into_with_memory(password, salt, out, &mut area[..blocks]);
    areas.put_back(area);
    done.map_err(|e| PasswordError::Hash(e.to_string()))
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

    /// Hashes stored before the work areas were reused (argon2's own `PasswordHasher`, with
    /// other costs too) still verify, and the new ones verify with argon2's own verifier.
    #[tokio::test]
    async fn hashes_are_the_phc_strings_argon2_writes_and_reads() {
        use argon2::password_hash::{PasswordHasher as _, PasswordVerifier as _};
        let p = Passwords::new(HashParams::cheapest(), 2).unwrap();
        let other = Argon2::new(
            Algorithm::Argon2id,
            Version::V0x13,
            Params::new(64, 2, 1, None).unwrap(),
        );
        let salt = SaltString::encode_b64(b"sixteen byte slt").unwrap();
        let theirs = other
            .hash_password(b"Old#Password1", &salt)
            .unwrap()
            .to_string();
        assert!(p
            .verify("Old#Password1".into(), Some(theirs.clone()))
            .await
            .unwrap());
        assert!(!p
            .verify("Old#Password2".into(), Some(theirs))
            .await
            .unwrap());
        let ours = p.hash("New#Password1".into()).await.unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(other.verify_password(b"New#Password1", &parsed).is_ok());
        assert!(other.verify_password(b"New#Password2", &parsed).is_err());
    }

    /// Many hashes at once run in as many work areas as run at a time, reused: the hashing
    /// memory does not grow with the load.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_burst_reuses_a_work_area_per_running_hash() {
        let params = HashParams {
            m_cost_kib: 256,
            ..HashParams::cheapest()
        };
        let p = Passwords::new(params, 2).unwrap();
        let burst = (0..40).map(|i| {
            let p = p.clone();
            tokio::spawn(async move {
                let h = p.hash(format!("Burst#{i}")).await.unwrap();
                assert!(p.verify(format!("Burst#{i}"), Some(h)).await.unwrap());
            })
        });
        for task in futures_util::future::join_all(burst).await {
            task.unwrap();
        }
        let allocated = p.areas.allocated.load(Ordering::Relaxed);
        assert!((1..=2).contains(&allocated), "{allocated} work areas");
    }

    /// Past the queue's bound a request is refused at once (503 `busy` in the handlers), and
    /// the ones admitted finish when the jobs free up.
    #[tokio::test]
    async fn past_the_queue_a_request_is_refused_at_once() {
        let p = Passwords::new(HashParams::cheapest(), 1).unwrap();
        let running = p.jobs.clone().acquire_owned().await.unwrap();
        let waiting: Vec<_> = (0..p.admit)
            .map(|i| {
                let p = p.clone();
                tokio::spawn(async move { p.hash(format!("Queued#{i}")).await })
            })
            .collect();
        while p.admitted.load(Ordering::Acquire) < p.admit {
            tokio::task::yield_now().await;
        }
        assert!(matches!(
            p.hash("One#More1".into()).await,
            Err(PasswordError::Busy)
        ));
        assert!(matches!(
            p.verify("One#More1".into(), None).await,
            Err(PasswordError::Busy)
        ));
        drop(running);
        for task in waiting {
            assert!(task.await.unwrap().is_ok());
        }
        assert_eq!(p.admitted.load(Ordering::Acquire), 0);
        assert!(p.hash("After#Burst1".into()).await.is_ok());
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
