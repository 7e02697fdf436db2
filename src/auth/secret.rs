//! The token format: `ym_` + the token's id (32 hex digits, public: it finds the row) + `_` +
//! 256 random bits (base64url). Only the SHA-256 digest of the secret part is ever stored,
//! and a presented secret is compared with it in constant time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use uuid::Uuid;

const PREFIX: &str = "ym_";
const SECRET_BYTES: usize = 32;
/// Characters of a secret's base64url (no padding) text.
const SECRET_CHARS: usize = 43;

/// A token as a client presents it, split into its parts; nothing verified yet.
#[derive(Clone)]
pub struct Presented {
    pub id: Uuid,
    secret: String,
}

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presented").field("id", &self.id).field("secret", &"[redacted]").finish()
    }
}

/// A newly made token: the text, shown once, and the digest, stored.
pub struct Issued {
    pub id: Uuid,
    pub text: String,
    pub digest: String,
}

/// Makes a token with a fresh id and 256 bits from the operating system's generator.
pub fn issue() -> Result<Issued, getrandom::Error> {
    issue_as(Uuid::new_v4())
}

/// Makes a token with id `id` (the first admin token's, which decides who made it) and 256
/// bits from the operating system's generator.
pub fn issue_as(id: Uuid) -> Result<Issued, getrandom::Error> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes)?;
    let secret = URL_SAFE_NO_PAD.encode(bytes);
    let digest = digest(&secret);
    Ok(Issued { id, text: format!("{PREFIX}{}_{secret}", id.simple()), digest })
}

/// Splits a token's text; `None` when it is not of the form [`issue`] makes.
pub fn parse(text: &str) -> Option<Presented> {
    let rest = text.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    if id.len() != 32 || secret.len() != SECRET_CHARS {
        return None;
    }
    let id = Uuid::try_parse(id).ok()?;
    let decoded = URL_SAFE_NO_PAD.decode(secret).ok()?;
    (decoded.len() == SECRET_BYTES).then(|| Presented { id, secret: secret.to_owned() })
}

impl Presented {
    /// Whether this token's secret is the one whose digest was stored (constant time).
    pub fn matches(&self, stored_digest: &str) -> bool {
        digest(&self.secret).as_bytes().ct_eq(stored_digest.as_bytes()).into()
    }

    /// The digest to store for this token (registering a token made elsewhere).
    pub fn digest(&self) -> String {
        digest(&self.secret)
    }
}

fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_parse_and_match_only_their_digest() {
        let issued = issue().unwrap();
        assert_eq!(issued.text.len(), PREFIX.len() + 32 + 1 + SECRET_CHARS);
        let presented = parse(&issued.text).unwrap();
        assert_eq!(presented.id, issued.id);
        assert!(presented.matches(&issued.digest));
        let other = issue().unwrap();
        assert!(!presented.matches(&other.digest));
        assert!(!format!("{presented:?}").contains(&issued.text[36..]));
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let good = issue().unwrap().text;
        let cut = &good[..good.len() - 1];
        let swapped = good.replacen("ym_", "xx_", 1);
        let bad_id = format!("ym_{}_{}", "z".repeat(32), &good[36..]);
        for bad in ["", "ym_", "Bearer", cut, &swapped, &bad_id, &format!("{good}x"), "ym_\0"] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }
}
