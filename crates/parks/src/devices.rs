//! Device credentials: every barrier and display proves which device it is with its own key,
//! sent in the `X-Device-Key` header (the original's device endpoints were open to anyone,
//! spec §9 item 5).
//!
//! A device's key is HMAC-SHA256 of `barrier:<id>` or `display:<id>` under the operator's device
//! secret, as 64 hex digits. The service stores no keys: it recomputes one and compares in
//! constant time. The operator hands each device its key (`pms device key`); `pms up` keeps the
//! secret in its data directory. Why derived rather than stored: nothing to seed, nothing to
//! leak from the database, and a device added later has a key at once. The cost: one secret
//! for all devices, so revoking one device is switching it off (`DISABLED`), and rotating the
//! secret re-keys every device.

use ring::hmac;

/// The header a device sends its key in.
pub const DEVICE_KEY_HEADER: &str = "x-device-key";
/// Shortest device secret accepted.
pub const MIN_SECRET_BYTES: usize = 32;

/// What kind of device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A barrier with a plate reader.
    Barrier,
    /// A display by a barrier.
    Display,
}

impl DeviceKind {
    fn label(self) -> &'static str {
        match self {
            Self::Barrier => "barrier",
            Self::Display => "display",
        }
    }
}

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
    pub fn key_for(&self, kind: DeviceKind, id: i64) -> String {
        let tag = hmac::sign(&self.key, message(kind, id).as_bytes());
        tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `presented` is the key of device `id` of `kind` (constant time).
    pub fn verify(&self, kind: DeviceKind, id: i64, presented: &str) -> bool {
        let Some(tag) = unhex(presented.trim()) else {
            return false;
        };
        hmac::verify(&self.key, message(kind, id).as_bytes(), &tag).is_ok()
    }
}

fn message(kind: DeviceKind, id: i64) -> String {
    format!("{}:{id}", kind.label())
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
        let b1 = keys.key_for(DeviceKind::Barrier, 1);
        assert_eq!(b1.len(), 64);
        assert!(keys.verify(DeviceKind::Barrier, 1, &b1));
        assert!(!keys.verify(DeviceKind::Barrier, 2, &b1), "another barrier");
        assert!(
            !keys.verify(DeviceKind::Display, 1, &b1),
            "a display of the same id"
        );
        assert!(!keys.verify(DeviceKind::Barrier, 1, &b1[..63]));
        assert!(!keys.verify(DeviceKind::Barrier, 1, "zz"));
        let other = DeviceKeys::new(&[8u8; 32]).expect("secret");
        assert!(!other.verify(DeviceKind::Barrier, 1, &b1), "another secret");
        assert_eq!(DeviceKeys::new(b"short").unwrap_err(), WeakSecret(5));
    }
}
