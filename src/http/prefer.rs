//! The `Prefer` request header (RFC 7240): the preferences this API honours. A preference
//! it does not know, or one it cannot read, is ignored, as the RFC asks.

use std::time::Duration;

use actix_web::http::header::HeaderMap;

/// `wait=N`: how long the client is willing to wait for the answer.
pub fn wait(headers: &HeaderMap) -> Option<Duration> {
    let preferences = headers.get_all("prefer").filter_map(|value| value.to_str().ok());
    let tokens = preferences.flat_map(|value| value.split(','));
    tokens
        .filter_map(|token| {
            // A preference may carry parameters after ';'; `wait` has none of its own.
            let preference = token.split(';').next()?.trim();
            let (name, value) = preference.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let seconds: u64 = value.trim().trim_matches('"').parse().ok()?;
            Some(Duration::from_secs(seconds))
        })
        .next()
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

    use super::*;

    fn prefer(values: &[&str]) -> Option<u64> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(HeaderName::from_static("prefer"), HeaderValue::from_str(value).unwrap());
        }
        wait(&headers).map(|wait| wait.as_secs())
    }

    #[test]
    fn wait_is_read_wherever_it_stands_and_anything_else_is_ignored() {
        assert_eq!(prefer(&["wait=10"]), Some(10));
        assert_eq!(prefer(&["respond-async, wait=5"]), Some(5));
        assert_eq!(prefer(&["return=minimal", "WAIT = 7"]), Some(7));
        assert_eq!(prefer(&["wait=\"3\""]), Some(3));
        for ignored in [&["wait=abc"][..], &["wait=-1"], &["wait"], &["respond-async"], &[], &["wait=1e3"]] {
            assert_eq!(prefer(ignored), None, "{ignored:?}");
        }
        assert_eq!(prefer(&["wait=99999999999999999999"]), None, "out of range");
    }
}
