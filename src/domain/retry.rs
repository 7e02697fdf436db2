//! Retry policy: which failures are retried, how often, and after what delay
//! (exponential backoff with jitter, capped).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Error classes never retried: retrying cannot help.
pub const NEVER_RETRIED: [&str; 3] = ["UnknownOperation", "InvalidPayload", "WorkerShutdown"];

/// How a job's failures are retried. `max_retries` lives on the job row; the rest here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, sea_orm::FromJsonQueryResult)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Delay before the first retry; doubles with each further failure. At most
    /// `cap_seconds`.
    #[schema(minimum = 0, maximum = 86400)]
    pub base_seconds: f64,
    /// Longest delay between attempts.
    #[schema(minimum = 0, maximum = 86400)]
    pub cap_seconds: f64,
    /// Only these error classes are retried; empty means every class not excluded.
    pub retry_on: Vec<String>,
    /// Error classes never retried.
    pub no_retry_on: Vec<String>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { base_seconds: 1.0, cap_seconds: 300.0, retry_on: Vec::new(), no_retry_on: Vec::new() }
    }
}

impl RetryPolicy {
    pub fn validate(&self) -> Result<(), String> {
        let valid = |seconds: f64| seconds.is_finite() && (0.0..=86_400.0).contains(&seconds);
        if !valid(self.base_seconds) || !valid(self.cap_seconds) {
            return Err("retry base_seconds and cap_seconds must be between 0 and 86400".into());
        }
        if self.cap_seconds < self.base_seconds {
            return Err("retry cap_seconds must be at least base_seconds".into());
        }
        Ok(())
    }

    pub fn retries_class(&self, class: &str) -> bool {
        let listed = |list: &[String]| list.iter().any(|entry| entry == class);
        !NEVER_RETRIED.contains(&class)
            && !listed(&self.no_retry_on)
            && (self.retry_on.is_empty() || listed(&self.retry_on))
    }

    /// The delay before the next attempt after failure number `failure` (1 for the first)
    /// of class `class`, or `None` when the job must fail for good. `jitter` in [0, 1)
    /// spreads retries: the delay lies between half and all of the exponential step.
    pub fn next_delay(&self, max_retries: i32, failure: i32, class: &str, jitter: f64) -> Option<Duration> {
        if failure > max_retries || !self.retries_class(class) {
            return None;
        }
        let exponent = (failure - 1).clamp(0, 30);
        let step = (self.base_seconds * 2f64.powi(exponent)).min(self.cap_seconds);
        let delay = step / 2.0 + step / 2.0 * jitter.clamp(0.0, 1.0);
        Some(Duration::from_secs_f64(delay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_old_rows_are_given_is_the_default() {
        let filled: RetryPolicy = serde_json::from_str(migration::DEFAULT_POLICY).unwrap();
        assert_eq!(filled, RetryPolicy::default());
    }

    fn policy() -> RetryPolicy {
        RetryPolicy { base_seconds: 2.0, cap_seconds: 10.0, ..Default::default() }
    }

    #[test]
    fn delays_grow_then_cap() {
        let delays: Vec<_> =
            (1..=5).map(|n| policy().next_delay(5, n, "Timeout", 1.0).unwrap().as_secs_f64()).collect();
        assert_eq!(delays, [2.0, 4.0, 8.0, 10.0, 10.0]);
        let low = policy().next_delay(5, 3, "Timeout", 0.0).unwrap().as_secs_f64();
        assert_eq!(low, 4.0, "jitter keeps at least half the step");
    }

    #[test]
    fn the_budget_ends_retries() {
        assert!(policy().next_delay(2, 2, "Timeout", 0.5).is_some());
        assert!(policy().next_delay(2, 3, "Timeout", 0.5).is_none());
        assert!(policy().next_delay(0, 1, "Timeout", 0.5).is_none());
    }

    #[test]
    fn classes_are_filtered() {
        let only = RetryPolicy { retry_on: vec!["Timeout".into()], ..policy() };
        assert!(only.retries_class("Timeout"));
        assert!(!only.retries_class("ValueError"));
        let except = RetryPolicy { no_retry_on: vec!["ValidationError".into()], ..policy() };
        assert!(except.retries_class("Timeout"));
        assert!(!except.retries_class("ValidationError"));
        assert!(!policy().retries_class("UnknownOperation"));
    }

    #[test]
    fn nonsense_policies_are_refused() {
        assert!(RetryPolicy { base_seconds: -1.0, ..policy() }.validate().is_err());
        assert!(RetryPolicy { base_seconds: 5.0, cap_seconds: 1.0, ..policy() }.validate().is_err());
        assert!(policy().validate().is_ok());
    }
}
