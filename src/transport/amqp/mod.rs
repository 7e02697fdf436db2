//! The production transport: RabbitMQ through lapin.
//!
//! Queues are durable and messages persistent; every publish waits for the broker's confirm
//! and is retried (reconnecting) until confirmed or out of attempts. Each queue `Q` is
//! declared as `PREFIX.Q.prio`, a priority queue (`x-max-priority` 10: a job's level 0 is
//! the broker's priority 9), with a dead-letter queue `PREFIX.Q.dead` and a wait queue
//! `PREFIX.Q.prio.wait`. `PREFIX.Q` and `PREFIX.Q.wait`, the queues of versions before
//! priorities (a queue's arguments cannot change once declared), are consumed too where
//! they exist while `drain_legacy_queues` is on, so their messages are not lost; once
//! empty they can be deleted. lapin runs on a small
//! runtime of its own, so the connection does not depend on whichever actix thread called.
//! After a broker restart the next call reconnects; consumers whose subscription ended are
//! restarted by their supervisor and subscribe again. A subscription and the settling of
//! its deliveries are in `subscription`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::{mpsc, Mutex};
use tracing::{info, warn};

mod subscription;

use self::subscription::{AmqpAcker, AmqpSubscription, ChannelGuard, Subscribed};
use super::settings::AmqpSettings;
use super::{DeadLetter, Subscription, Transport, TransportError};

/// Header naming why a message was dead-lettered.
const REASON_HEADER: &str = "x-yardmaster-reason";
/// AMQP delivery mode for messages written to disk.
const PERSISTENT: u8 = 2;
/// First pause between publish attempts; doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The suffix of a queue's priority queue on the broker.
const PRIORITY_SUFFIX: &str = ".prio";
/// The broker's priorities per queue (`x-max-priority`): one per level.
const BROKER_LEVELS: u8 = super::LAST_PRIORITY + 1;

/// Message properties beyond the defaults.
#[derive(Clone, Default)]
struct Extra {
    /// Why it was dead-lettered (the reason header).
    reason: Option<String>,
    /// Milliseconds until it expires (out of a wait queue, back into its queue).
    expiration: Option<String>,
    /// The job's level, 0 first; the broker counts the other way (9 first).
    priority: u8,
}

/// One connection with a confirming publisher channel, and the queues declared on it.
#[derive(Clone)]
struct Link {
    connection: Arc<Connection>,
    publisher: Channel,
    declared: Arc<std::sync::Mutex<HashSet<String>>>,
}

impl Link {
    fn is_usable(&self) -> bool {
        self.connection.status().connected() && self.publisher.status().connected()
    }
}

pub struct AmqpTransport {
    settings: AmqpSettings,
    /// Owns lapin's I/O; `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    link: Arc<Mutex<Option<Link>>>,
}

impl AmqpTransport {
    pub fn new(settings: AmqpSettings) -> Result<Self, TransportError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("yardmaster-amqp")
            .enable_all()
            .build()
            .map_err(|err| TransportError::Unavailable(format!("cannot start the AMQP runtime: {err}")))?;
        let handle = runtime.handle().clone();
        Ok(AmqpTransport { settings, runtime: Some(runtime), handle, link: Arc::new(Mutex::new(None)) })
    }

    /// The broker's name for a queue: its priority queue.
    pub fn broker_queue(&self, queue: &str) -> String {
        format!("{}{queue}{PRIORITY_SUFFIX}", self.settings.queue_prefix)
    }

    /// The broker's name for a job queue's dead letters.
    pub fn dead_letter_queue(&self, queue: &str) -> String {
        format!("{}{queue}.dead", self.settings.queue_prefix)
    }

    /// Runs a lapin future on the transport's own runtime.
    async fn on_runtime<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = Result<T, TransportError>> + Send + 'static,
    ) -> Result<T, TransportError> {
        self.handle.spawn(work).await.map_err(|err| TransportError::Unavailable(format!("AMQP task failed: {err}")))?
    }

    fn connector(&self) -> Connector {
        Connector {
            url: self.settings.url.clone(),
            prefix: self.settings.queue_prefix.clone(),
            drain_legacy: self.settings.drain_legacy_queues,
            connect_timeout: Duration::from_secs(self.settings.connect_timeout_seconds),
            confirm_timeout: Duration::from_secs(self.settings.confirm_timeout_seconds),
            link: self.link.clone(),
        }
    }

    /// Publishes to a broker queue, retrying with backoff until confirmed.
    async fn publish_confirmed(
        &self,
        queue: &str,
        routing_key: String,
        body: Vec<u8>,
        extra: Extra,
    ) -> Result<(), TransportError> {
        let mut pause = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let connector = self.connector();
            let (queue_name, key, payload, extra) =
                (queue.to_owned(), routing_key.clone(), body.clone(), extra.clone());
            let result =
                self.on_runtime(async move { connector.publish_once(&queue_name, &key, &payload, &extra).await }).await;
            match result {
                Ok(()) => return Ok(()),
                Err(err) if attempt >= self.settings.publish_attempts => return Err(err),
                Err(err) => {
                    warn!(queue, attempt, error = %err, "publish not confirmed; retrying");
                    self.connector().reset().await;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_BACKOFF);
                    attempt += 1;
                }
            }
        }
    }
}

impl Drop for AmqpTransport {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Everything a lapin task needs, cloned onto the transport's runtime.
struct Connector {
    url: String,
    prefix: String,
    /// `drain_legacy_queues`.
    drain_legacy: bool,
    connect_timeout: Duration,
    confirm_timeout: Duration,
    link: Arc<Mutex<Option<Link>>>,
}

impl Connector {
    /// The current link, connecting (and enabling confirms) when there is none or it broke.
    async fn link(&self) -> Result<Link, TransportError> {
        let mut current = self.link.lock().await;
        if let Some(link) = current.as_ref().filter(|link| link.is_usable()) {
            return Ok(link.clone());
        }
        let connect = Connection::connect(&self.url, ConnectionProperties::default());
        let connection = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| unavailable("connect timed out"))?
            .map_err(|err| unavailable(format!("connect: {err}")))?;
        let publisher = connection.create_channel().await.map_err(amqp_error)?;
        publisher.confirm_select(ConfirmSelectOptions::default()).await.map_err(amqp_error)?;
        info!("connected to the AMQP broker");
        let link = Link { connection: Arc::new(connection), publisher, declared: Default::default() };
        *current = Some(link.clone());
        Ok(link)
    }

    /// Forgets the link so the next call reconnects, if it is broken. A healthy link is kept:
    /// one slow confirm must not tear down the connection every consumer shares.
    async fn reset(&self) {
        let mut current = self.link.lock().await;
        if current.as_ref().is_some_and(|link| !link.is_usable()) {
            if let Some(link) = current.take() {
                let _ = link.connection.close(200, "reconnecting".into()).await;
            }
        }
    }

    /// Declares `PREFIX.queue.prio` (a priority queue, dead-lettering to `PREFIX.queue.dead`)
    /// and its wait queue `PREFIX.queue.prio.wait` (whose expired messages go to the
    /// priority queue) once per connection.
    async fn declare(&self, link: &Link, channel: &Channel, queue: &str) -> Result<(), TransportError> {
        let main = format!("{}{queue}{PRIORITY_SUFFIX}", self.prefix);
        if link.declared.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(&main) {
            return Ok(());
        }
        let dead = format!("{}{queue}.dead", self.prefix);
        channel
            .queue_declare(dead.as_str().into(), QueueDeclareOptions::durable(), FieldTable::default())
            .await
            .map_err(amqp_error)?;
        let mut arguments = FieldTable::default();
        arguments.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
        arguments.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(dead.as_str().into()));
        arguments.insert("x-max-priority".into(), AMQPValue::ShortShortUInt(BROKER_LEVELS - 1));
        channel
            .queue_declare(main.as_str().into(), QueueDeclareOptions::durable(), arguments)
            .await
            .map_err(amqp_error)?;
        let wait = format!("{main}.wait");
        let mut back = FieldTable::default();
        back.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
        back.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(main.as_str().into()));
        channel.queue_declare(wait.as_str().into(), QueueDeclareOptions::durable(), back).await.map_err(amqp_error)?;
        link.declared.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(main);
        Ok(())
    }

    /// Whether `name` exists on the broker: a passive declare, on a channel of its own (a
    /// passive declare of a missing queue closes its channel).
    async fn exists(&self, link: &Link, name: &str) -> Result<bool, TransportError> {
        let channel = link.connection.create_channel().await.map_err(amqp_error)?;
        let options = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        let declared = channel.queue_declare(name.into(), options, FieldTable::default()).await;
        let _ = channel.close(200, "looked".into()).await;
        Ok(declared.is_ok())
    }

    async fn publish_once(
        &self,
        queue: &str,
        routing_key: &str,
        body: &[u8],
        extra: &Extra,
    ) -> Result<(), TransportError> {
        let link = self.link().await?;
        self.declare(&link, &link.publisher, queue).await?;
        let broker_priority = BROKER_LEVELS - 1 - extra.priority.min(BROKER_LEVELS - 1);
        let mut properties = BasicProperties::default().with_delivery_mode(PERSISTENT).with_priority(broker_priority);
        if let Some(expiration) = &extra.expiration {
            properties = properties.with_expiration(expiration.as_str().into());
        }
        let reason = extra.reason.as_deref();
        if let Some(reason) = reason {
            let mut headers = FieldTable::default();
            headers.insert(REASON_HEADER.into(), AMQPValue::LongString(reason.into()));
            properties = properties.with_headers(headers);
        }
        let options = BasicPublishOptions { mandatory: true, ..Default::default() };
        let confirm = link
            .publisher
            .basic_publish("".into(), routing_key.into(), options, body, properties)
            .await
            .map_err(amqp_error)?;
        let confirmation = tokio::time::timeout(self.confirm_timeout, confirm)
            .await
            .map_err(|_| unavailable("publish confirm timed out"))?
            .map_err(amqp_error)?;
        if !confirmation.is_ack() {
            return Err(unavailable("the broker refused the message (nack)"));
        }
        if confirmation.take_message().is_some() {
            return Err(unavailable(format!("no queue bound to {routing_key}; message returned")));
        }
        Ok(())
    }

    async fn subscribe(&self, queue: &str, prefetch: u16) -> Result<Subscribed, TransportError> {
        let link = self.link().await?;
        let channel = link.connection.create_channel().await.map_err(amqp_error)?;
        channel.basic_qos(prefetch.max(1), BasicQosOptions::default()).await.map_err(amqp_error)?;
        self.declare(&link, &channel, queue).await?;
        let (sender, receiver) = mpsc::channel(usize::from(prefetch.max(1)));
        let name = format!("{}{queue}{PRIORITY_SUFFIX}", self.prefix);
        let mut names = vec![name];
        // The queue of a version before priorities, while it exists: drained, not lost.
        let legacy = format!("{}{queue}", self.prefix);
        if self.drain_legacy && self.exists(&link, &legacy).await? {
            info!(queue = %legacy, "consuming a queue of an earlier version until it is deleted");
            names.push(legacy);
        }
        let mut consumers = Vec::new();
        for name in names {
            let options = BasicConsumeOptions::default();
            let consumer = channel
                .basic_consume(name.as_str().into(), "".into(), options, FieldTable::default())
                .await
                .map_err(amqp_error)?;
            consumers.push((name, consumer));
        }
        let tags = consumers.iter().map(|(_, consumer)| consumer.tag()).collect();
        let forwarders = consumers.into_iter().map(|(name, mut consumer)| {
            let sender = sender.clone();
            async move {
                while let Some(delivery) = consumer.next().await {
                    match delivery {
                        Ok(delivery) => {
                            // Given up meanwhile: this one goes back to its queue.
                            if let Err(mpsc::error::SendError(delivery)) = sender.send(delivery).await {
                                let _ =
                                    delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await;
                            }
                        }
                        Err(err) => {
                            warn!(queue = %name, error = %err, "consumer stream failed");
                            break;
                        }
                    }
                }
            }
        });
        let forwarders: Vec<_> = forwarders.map(Box::pin).collect();
        // The first stream to end (a failure, or the subscription given up) ends them all:
        // the consumer's supervisor subscribes again if it still wants to.
        tokio::spawn(futures_util::future::select_all(forwarders));
        Ok(Subscribed { receiver, channel, tags })
    }

    /// The consumer count of `PREFIX.queue`, from a passive declare on a channel of its own
    /// (a passive declare of a missing queue closes its channel).
    async fn consumer_count(&self, queue: &str) -> Result<u32, TransportError> {
        let link = self.link().await?;
        let channel = link.connection.create_channel().await.map_err(amqp_error)?;
        self.declare(&link, &channel, queue).await?;
        let name = format!("{}{queue}{PRIORITY_SUFFIX}", self.prefix);
        let options = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        let declared = channel.queue_declare(name.as_str().into(), options, FieldTable::default()).await;
        let _ = channel.close(200, "counted".into()).await;
        Ok(declared.map_err(amqp_error)?.consumer_count())
    }

    async fn take_dead(
        &self,
        queue: &str,
        max: usize,
    ) -> Result<(Channel, Vec<lapin::message::Delivery>), TransportError> {
        let link = self.link().await?;
        let channel = link.connection.create_channel().await.map_err(amqp_error)?;
        self.declare(&link, &channel, queue).await?;
        let dead = format!("{}{queue}.dead", self.prefix);
        let mut taken = Vec::new();
        while taken.len() < max {
            let got = channel.basic_get(dead.as_str().into(), BasicGetOptions::default()).await.map_err(amqp_error)?;
            match got {
                Some(message) => taken.push(message.delivery),
                None => break,
            }
        }
        Ok((channel, taken))
    }
}

#[async_trait]
impl Transport for AmqpTransport {
    async fn publish_at(&self, queue: &str, body: Vec<u8>, priority: u8) -> Result<(), TransportError> {
        self.publish_confirmed(queue, self.broker_queue(queue), body, Extra { priority, ..Extra::default() }).await
    }

    async fn publish_after(&self, queue: &str, body: Vec<u8>, delay: Duration) -> Result<(), TransportError> {
        let wait = format!("{}.wait", self.broker_queue(queue));
        let expiration = Some(delay.as_millis().max(1).to_string());
        self.publish_confirmed(queue, wait, body, Extra { expiration, ..Extra::default() }).await
    }

    async fn subscribe(&self, queue: &str, prefetch: u16) -> Result<Box<dyn Subscription>, TransportError> {
        let connector = self.connector();
        let queue = queue.to_owned();
        let Subscribed { receiver, channel, tags } =
            self.on_runtime(async move { connector.subscribe(&queue, prefetch).await }).await?;
        let handle = self.handle.clone();
        let guard = Arc::new(ChannelGuard { channel: Some(channel.clone()), handle: handle.clone() });
        Ok(Box::new(AmqpSubscription { receiver, handle, guard, channel, tags }))
    }

    async fn dead_letter(&self, queue: &str, body: Vec<u8>, reason: &str) -> Result<(), TransportError> {
        let extra = Extra { reason: Some(reason.to_owned()), ..Extra::default() };
        self.publish_confirmed(queue, self.dead_letter_queue(queue), body, extra).await
    }

    async fn take_dead_letters(&self, queue: &str, max: usize) -> Result<Vec<DeadLetter>, TransportError> {
        let connector = self.connector();
        let queue = queue.to_owned();
        let (channel, deliveries) = self.on_runtime(async move { connector.take_dead(&queue, max).await }).await?;
        let guard = Arc::new(ChannelGuard { channel: Some(channel), handle: self.handle.clone() });
        let letters = deliveries.into_iter().map(|delivery| {
            let reason = reason_of(&delivery);
            let acker = AmqpAcker::new(delivery.acker, self.handle.clone(), Some(guard.clone()));
            DeadLetter { body: delivery.data, reason, acker: Box::new(acker) }
        });
        Ok(letters.collect())
    }

    async fn consumers(&self, queue: &str) -> Result<Option<u32>, TransportError> {
        let (connector, queue) = (self.connector(), queue.to_owned());
        self.on_runtime(async move { connector.consumer_count(&queue).await.map(Some) }).await
    }

    async fn check_ready(&self) -> Result<(), TransportError> {
        let connector = self.connector();
        self.on_runtime(async move { connector.link().await.map(drop) }).await
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "amqp"
    }
}

fn reason_of(delivery: &lapin::message::Delivery) -> String {
    let reason = delivery.properties.headers().as_ref().and_then(|headers| match headers.inner().get(REASON_HEADER) {
        Some(AMQPValue::LongString(reason)) => Some(reason.to_string()),
        _ => None,
    });
    // Messages the broker dead-lettered itself (rejected without requeue) carry no header.
    reason.unwrap_or_else(|| "rejected".to_owned())
}

pub(super) fn unavailable(message: impl Into<String>) -> TransportError {
    TransportError::Unavailable(message.into())
}

pub(super) fn amqp_error(err: lapin::Error) -> TransportError {
    TransportError::Unavailable(err.to_string())
}
