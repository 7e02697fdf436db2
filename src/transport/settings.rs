//! The `[transport]` settings: in process or RabbitMQ, and the broker's connection and
//! publishing rules.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportSettings {
    pub kind: TransportKind,
    pub amqp: AmqpSettings,
}

/// RabbitMQ, used when `transport.kind = "amqp"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpSettings {
    /// `amqp://HOST:5672/%2f`; user and password default to the broker's guest account.
    pub url: String,
    /// Prepended to queue names on the broker: queue `default` is `yardmaster.default`.
    pub queue_prefix: String,
    pub connect_timeout_seconds: u64,
    /// How long a publish waits for the broker's confirm before it is retried.
    pub confirm_timeout_seconds: u64,
    /// Tries per publish (reconnecting between them) before the job is left to the sweep.
    pub publish_attempts: u32,
    /// A claimed run still going after this long has its delivery acknowledged (the job's
    /// row and lease hold it from then on): keep it under the broker's `consumer_timeout`
    /// (30 minutes by default), which closes the channel of a delivery held longer.
    pub ack_running_after_ms: u64,
    /// Also consume `PREFIX.Q`, the plain queue of versions before priorities, where it
    /// exists, so the messages left there run (docs/flow.md: moving a RabbitMQ deployment
    /// over). Off once those queues are deleted: looking for a missing queue closes a
    /// channel, which the AMQP client logs as an error at every subscription.
    #[serde(default)]
    pub drain_legacy_queues: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// In-memory queues inside this process (embedded default).
    InProcess,
    /// RabbitMQ: many processes on many hosts.
    Amqp,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            kind: TransportKind::InProcess,
            amqp: AmqpSettings {
                url: "amqp://127.0.0.1:5672/%2f".into(),
                queue_prefix: "yardmaster.".into(),
                connect_timeout_seconds: 5,
                confirm_timeout_seconds: 10,
                publish_attempts: 5,
                ack_running_after_ms: 15 * 60 * 1000,
                drain_legacy_queues: false,
            },
        }
    }
}

impl TransportSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.amqp.publish_attempts >= 1, "transport.amqp.publish_attempts must be at least 1");
        anyhow::ensure!(self.amqp.ack_running_after_ms >= 1, "transport.amqp.ack_running_after_ms must be at least 1");
        Ok(())
    }
}
