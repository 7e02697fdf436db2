//! Verifying a bearer token on every request without a database round trip on the hot path:
//! a verified token's identity is kept for `auth.cache_seconds`, its secret still checked
//! against the stored digest each time. A revocation through this process's API forgets the
//! token at once; one made elsewhere (the CLI, another API process) counts within
//! `cache_seconds`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::caller::Caller;
use super::secret::{self, Presented};
use super::tokens::{self, TokenError};

/// Tokens remembered at most; past it the entries of unknown, revoked and expired tokens go
/// first (a flood of made-up ids can neither grow the cache without bound nor push the real
/// tokens out).
const MAX_CACHED: usize = 10_000;

/// Why a request was not authenticated.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    #[error("no bearer token: send Authorization: Bearer TOKEN")]
    Missing,
    #[error("the Authorization header is not a bearer token of this server")]
    Malformed,
    #[error("the token is unknown or revoked")]
    Refused,
    #[error(transparent)]
    Store(#[from] TokenError),
}

pub struct Authenticator {
    db: DatabaseConnection,
    ttl: Duration,
    cache: RwLock<HashMap<Uuid, Cached>>,
    /// Benchmarks only: every request is this caller, no token read (the baseline that
    /// prices the token check).
    trusted: Option<Caller>,
}

/// What the store said of a token id, and as of when.
struct Cached {
    /// The stored digest and the caller it stands for; `None`: unknown or revoked.
    verified: Option<(String, Caller)>,
    /// When the read that found it began (a revocation here counts as a read): an older
    /// read never replaces a newer answer.
    fetched: Instant,
}

impl Authenticator {
    pub fn new(db: DatabaseConnection, ttl: Duration) -> Arc<Self> {
        Arc::new(Authenticator { db, ttl, cache: RwLock::new(HashMap::new()), trusted: None })
    }

    /// Takes every request for `caller` without reading a token: the baseline a benchmark
    /// measures the token check against. Never reachable from configuration.
    #[doc(hidden)]
    pub fn trusting(db: DatabaseConnection, caller: Caller) -> Arc<Self> {
        Arc::new(Authenticator { db, ttl: Duration::ZERO, cache: RwLock::new(HashMap::new()), trusted: Some(caller) })
    }

    /// The caller an `Authorization` header value stands for.
    pub async fn authenticate(&self, header: Option<&[u8]>) -> Result<Caller, Rejected> {
        if let Some(caller) = &self.trusted {
            return Ok(caller.clone());
        }
        let header = header.ok_or(Rejected::Missing)?;
        let text = std::str::from_utf8(header).map_err(|_| Rejected::Malformed)?;
        let (scheme, token) = text.split_once(' ').ok_or(Rejected::Malformed)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(Rejected::Malformed);
        }
        self.verify(token.trim()).await
    }

    /// The caller a token's text stands for (a bearer token's, or the dashboard's session).
    pub async fn verify(&self, token: &str) -> Result<Caller, Rejected> {
        if let Some(caller) = &self.trusted {
            return Ok(caller.clone());
        }
        let presented = secret::parse(token).ok_or(Rejected::Malformed)?;
        if let Some(answer) = self.cached(&presented) {
            return answer;
        }
        // The row is cached whatever the presented secret: a wrong guess at a known id must
        // not lock its owner out.
        let started = Instant::now();
        let verified = tokens::active(&self.db, presented.id).await?;
        let verified = verified.map(|(digest, identity)| (digest, Caller::new(identity)));
        let answer = match &verified {
            Some((digest, caller)) if presented.matches(digest) => Ok(caller.clone()),
            _ => Err(Rejected::Refused),
        };
        self.remember(presented.id, Cached { verified, fetched: started });
        answer
    }

    /// Refuses a token from now on (it was revoked here): a read of its row that began
    /// before cannot bring it back.
    pub fn forget(&self, id: Uuid) {
        let mut cache = self.cache.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.insert(id, Cached { verified: None, fetched: Instant::now() });
    }

    fn cached(&self, presented: &Presented) -> Option<Result<Caller, Rejected>> {
        let cache = self.cache.read().ok()?;
        let entry = cache.get(&presented.id).filter(|entry| entry.fetched.elapsed() < self.ttl)?;
        Some(match &entry.verified {
            Some((digest, caller)) if presented.matches(digest) => Ok(caller.clone()),
            _ => Err(Rejected::Refused),
        })
    }

    fn remember(&self, id: Uuid, entry: Cached) {
        let mut cache = self.cache.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if cache.get(&id).is_some_and(|known| known.fetched >= entry.fetched) {
            return;
        }
        if cache.len() >= MAX_CACHED {
            let ttl = self.ttl;
            cache.retain(|_, cached| cached.verified.is_some() && cached.fetched.elapsed() < ttl);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(id, entry);
    }
}
