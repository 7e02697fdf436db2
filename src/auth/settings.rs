//! The `[auth]` settings: the token cache, the bootstrap token, and the `Secret` that keeps
//! a value out of every log.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// Seconds a verified token is trusted without reading its row again (a revocation made
    /// by another process counts within this; one through this process's API at once).
    pub cache_seconds: u64,
    /// An admin token `serve` stores at start if it is not stored yet, for automated
    /// deployments (`YARDMASTER__AUTH__BOOTSTRAP_TOKEN`; `yardmaster token new` makes one).
    /// Without it, the first `serve` on a store with no token makes one and prints it once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<Secret>,
}

/// A value that must never be printed: `Debug` shows `[redacted]`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The value itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings { cache_seconds: 2, bootstrap_token: None }
    }
}
