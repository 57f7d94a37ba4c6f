//! SHA-256 digests in URL-safe base64: the hashed parts of names, fingerprints of policy files
//! and kernel states, ids. A leaf: every layer may use it.

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

/// URL-safe base64 (no padding) of the SHA-256 of `text`.
pub fn hash(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}
