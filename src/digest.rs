//! SHA-256 digests in URL-safe base64: the hashed parts of names, fingerprints of policy files
//! and kernel states, ids. A leaf: every layer may use it.

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

/// URL-safe base64 (no padding) of the SHA-256 of `text`.
pub fn hash(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

/// 128-bit fingerprints of values, for the caches that skip work whose input is unchanged:
/// two SipHash-1-3 hashers with random keys of this process side by side. Equal fingerprints
/// stand for equal values (a false match takes one chance in 2^128 per pair compared, and the
/// keys are secret, so input cannot be crafted to collide); fingerprints are not comparable
/// between processes or between two `Fingerprinter`s.
#[derive(Clone, Debug)]
pub struct Fingerprinter {
    keys: [std::hash::RandomState; 2],
}

impl Default for Fingerprinter {
    fn default() -> Self {
        Fingerprinter {
            keys: [std::hash::RandomState::new(), std::hash::RandomState::new()],
        }
    }
}

impl Fingerprinter {
    /// The fingerprint of `value`.
    pub fn of<T: std::hash::Hash + ?Sized>(&self, value: &T) -> u128 {
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut pair = Pair(self.keys[0].build_hasher(), self.keys[1].build_hasher());
        value.hash(&mut pair);
        (u128::from(pair.0.finish()) << 64) | u128::from(pair.1.finish())
    }
}

/// Two hashers fed the same bytes.
struct Pair(std::hash::DefaultHasher, std::hash::DefaultHasher);

impl std::hash::Hasher for Pair {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
        self.1.write(bytes);
    }

    fn finish(&self) -> u64 {
        self.0.finish() ^ self.1.finish()
    }
}
