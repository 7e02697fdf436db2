//! Limits across the deployment: at most `max_running` jobs RUNNING at once and at most
//! `rate` starts per period, counted over every process and host, for the jobs of one
//! operation or one queue, optionally partitioned by a concurrency key. A job subject to a
//! limit carries its key; the store admits it (it may be sent and claimed) or holds it
//! QUEUED until the limit allows.

use std::time::Duration;

/// Parts of a limit key: the rule, then the concurrency key when partitioned. Neither a
/// rule nor a key holds it (control characters are refused in keys).
pub const KEY_SEPARATOR: char = '\u{1f}';

/// At most `starts` starts in any window of `per`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub starts: u32,
    pub per: Duration,
}

/// What a job's limit allows, and the key its jobs are counted by.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// `operation:NAME` or `queue:NAME`, then [`KEY_SEPARATOR`] and the concurrency key
    /// when the limit is partitioned.
    pub key: String,
    pub max_running: Option<u32>,
    pub rate: Option<Rate>,
}

impl Limit {
    /// The key of `rule`'s limit for the jobs of `concurrency_key` (all of them: `None`).
    pub fn key_of(rule: &str, concurrency_key: Option<&str>) -> String {
        match concurrency_key {
            Some(key) => format!("{rule}{KEY_SEPARATOR}{key}"),
            None => rule.to_owned(),
        }
    }

    /// A stored key as (rule, concurrency key).
    pub fn split(key: &str) -> (&str, Option<&str>) {
        match key.split_once(KEY_SEPARATOR) {
            Some((rule, key)) => (rule, Some(key)),
            None => (key, None),
        }
    }
}

/// The limits of a deployment, by rule (`operation:NAME`, `queue:NAME`): what each allows.
#[derive(Debug, Clone, Default)]
pub struct LimitRules {
    rules: std::collections::HashMap<String, (Option<u32>, Option<Rate>)>,
}

impl LimitRules {
    pub fn with(mut self, rule: String, max_running: Option<u32>, rate: Option<Rate>) -> Self {
        self.rules.insert(rule, (max_running, rate));
        self
    }

    /// The limit a stored key is counted under, as configured now; `None` for a rule no
    /// longer configured (its held jobs are then admitted: nothing limits them).
    pub fn limit(&self, key: &str) -> Option<Limit> {
        let (rule, _) = Limit::split(key);
        let &(max_running, rate) = self.rules.get(rule)?;
        Some(Limit { key: key.to_owned(), max_running, rate })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Limit;

    #[test]
    fn keys_split_back_into_rule_and_partition() {
        let key = Limit::key_of("operation:room:analysis:Count", Some("tenant:7"));
        assert_eq!(Limit::split(&key), ("operation:room:analysis:Count", Some("tenant:7")));
        assert_eq!(Limit::split(&Limit::key_of("queue:default", None)), ("queue:default", None));
    }
}
