//! Device credentials: every barrier and display proves which device it is with its own key,
//! sent in the `X-Device-Key` header (the original's device endpoints were open to anyone,
//! spec §9 item 5). A key is 64 hex digits, in one of two kinds:
//!
//! - **Derived** (every device until it is issued one): HMAC-SHA256 of `barrier:<id>` or
//!   `display:<id>` under the operator's device secret. Nothing stored: the service recomputes
//!   it and compares in constant time; the operator hands it out with `pms device key`, and a
//!   device added later has one at once. Rotating the secret re-keys every such device.
//! - **Issued** (`rotateDeviceKey`): 32 random bytes, shown once to the park manager who asked.
//!   The device's row keeps only the key's SHA-256; from then on only that key works for it (its
//!   derived key no longer does), and issuing again replaces it. No other device is touched.
//!
//! Revoking a device outright is switching it off (`DISABLED`).

use ring::digest;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

use crate::model::DeviceType;

/// The header a device sends its key in.
pub const DEVICE_KEY_HEADER: &str = "x-device-key";
/// Shortest device secret accepted.
pub const MIN_SECRET_BYTES: usize = 32;

/// Derives and checks device keys.
#[derive(Clone)]
pub struct DeviceKeys {
    key: hmac::Key,
}

impl std::fmt::Debug for DeviceKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceKeys(..)")
    }
}

/// The device secret is too short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the device secret is {0} bytes; use at least {MIN_SECRET_BYTES}")]
pub struct WeakSecret(pub usize);

impl DeviceKeys {
    /// Keys under `secret`.
    ///
    /// # Errors
    /// [`WeakSecret`] below [`MIN_SECRET_BYTES`].
    pub fn new(secret: &[u8]) -> Result<Self, WeakSecret> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(WeakSecret(secret.len()));
        }
        Ok(Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        })
    }

    /// The key of device `id` of `kind`.
    pub fn key_for(&self, kind: DeviceType, id: i64) -> String {
        hex(hmac::sign(&self.key, message(kind, id).as_bytes()).as_ref())
    }

    /// Whether `presented` is the key of device `id` of `kind` (constant time): the key issued
    /// to it when `issued` (its SHA-256, hex) is given, else its derived key.
    pub fn verify(&self, kind: DeviceType, id: i64, presented: &str, issued: Option<&str>) -> bool {
        let Some(bytes) = unhex(presented.trim()) else {
            return false;
        };
        match issued {
            Some(hash) => bool::from(hash_of(&bytes).as_bytes().ct_eq(hash.as_bytes())),
            None => hmac::verify(&self.key, message(kind, id).as_bytes(), &bytes).is_ok(),
        }
    }
}

/// A key issued to one device: the key, to be shown once, and what is stored of it.
#[derive(Clone)]
pub struct IssuedKey {
    /// The key, 64 hex digits.
    pub key: String,
    /// Its SHA-256, hex: what the device's row keeps.
    pub hash: String,
}

impl std::fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedKey")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

/// The system's random source failed: no key can be issued now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the system's random source failed")]
pub struct NoRandomness;

impl IssuedKey {
    /// A new random key.
    ///
    /// # Errors
    /// [`NoRandomness`] when the system's random source fails.
    pub fn new() -> Result<Self, NoRandomness> {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| NoRandomness)?;
        Ok(Self {
            key: hex(&bytes),
            hash: hash_of(&bytes),
        })
    }
}

/// SHA-256 of a key's bytes, hex.
fn hash_of(key: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, key).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a derived key signs: `barrier:<id>` or `display:<id>`.
fn message(kind: DeviceType, id: i64) -> String {
    let label = match kind {
        DeviceType::Barrier => "barrier",
        DeviceType::Display => "display",
    };
    format!("{label}:{id}")
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_per_device_and_kind() {
        let keys = DeviceKeys::new(&[7u8; 32]).expect("secret");
        let b1 = keys.key_for(DeviceType::Barrier, 1);
        assert_eq!(b1.len(), 64);
        assert!(keys.verify(DeviceType::Barrier, 1, &b1, None));
        assert!(
            !keys.verify(DeviceType::Barrier, 2, &b1, None),
            "another barrier"
        );
        assert!(
            !keys.verify(DeviceType::Display, 1, &b1, None),
            "a display of the same id"
        );
        assert!(!keys.verify(DeviceType::Barrier, 1, &b1[..63], None));
        assert!(!keys.verify(DeviceType::Barrier, 1, "zz", None));
        let other = DeviceKeys::new(&[8u8; 32]).expect("secret");
        assert!(
            !other.verify(DeviceType::Barrier, 1, &b1, None),
            "another secret"
        );
        assert_eq!(DeviceKeys::new(b"short").unwrap_err(), WeakSecret(5));
    }

    #[test]
    fn an_issued_key_replaces_the_derived_one() {
        let keys = DeviceKeys::new(&[7u8; 32]).expect("secret");
        let derived = keys.key_for(DeviceType::Barrier, 1);
        let issued = IssuedKey::new().expect("random");
        assert_eq!((issued.key.len(), issued.hash.len()), (64, 64));
        assert_ne!(issued.key, issued.hash, "the row keeps no key");
        let on_file = Some(issued.hash.as_str());
        assert!(keys.verify(DeviceType::Barrier, 1, &issued.key, on_file));
        assert!(keys.verify(
            DeviceType::Barrier,
            1,
            &format!(" {} ", issued.key),
            on_file
        ));
        assert!(
            !keys.verify(DeviceType::Barrier, 1, &derived, on_file),
            "the derived key"
        );
        let again = IssuedKey::new().expect("random");
        assert_ne!(again.key, issued.key);
        assert!(
            !keys.verify(DeviceType::Barrier, 1, &issued.key, Some(&again.hash)),
            "the key issued before"
        );
        assert!(!format!("{issued:?}").contains(&issued.key), "never logged");
    }
}
