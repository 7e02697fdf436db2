//! The embedded transport: one unbounded in-memory channel per queue, no broker.
//!
//! Messages do not survive the process; at start-up every QUEUED job is marked unpublished
//! and the dispatch sweep re-sends it, so nothing committed is lost. A delayed message
//! waits on a timer task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::{Acker, DeadLetter, Delivery, Subscription, Transport, TransportError};

type Channel = (async_channel::Sender<Vec<u8>>, async_channel::Receiver<Vec<u8>>);
type DeadLetters = Arc<Mutex<HashMap<String, Vec<(Vec<u8>, String)>>>>;

/// Queues held in this process. Clones share the same queues.
#[derive(Clone, Default)]
pub struct InProcessTransport {
    queues: Arc<Mutex<HashMap<String, Channel>>>,
    dead: DeadLetters,
    /// Open subscriptions per queue.
    subscribers: Subscribers,
}

type Subscribers = Arc<Mutex<HashMap<String, u32>>>;

fn count_subscriber(subscribers: &Subscribers, queue: &str, change: i64) {
    let mut subscribers = subscribers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let count = subscribers.entry(queue.to_owned()).or_default();
    *count = u32::try_from((i64::from(*count) + change).max(0)).unwrap_or(u32::MAX);
}

impl InProcessTransport {
    pub fn new() -> Self {
        Self::default()
    }

    fn channel(&self, queue: &str) -> Channel {
        let mut queues = self.queues.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        queues.entry(queue.to_owned()).or_insert_with(async_channel::unbounded).clone()
    }

    /// Messages waiting in `queue`, for tests and diagnostics.
    pub fn depth(&self, queue: &str) -> usize {
        self.channel(queue).1.len()
    }
}

fn push_dead(dead: &DeadLetters, queue: &str, body: Vec<u8>, reason: String) {
    let mut dead = dead.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    dead.entry(queue.to_owned()).or_default().push((body, reason));
}

#[async_trait]
impl Transport for InProcessTransport {
    async fn publish(&self, queue: &str, body: Vec<u8>) -> Result<(), TransportError> {
        let (sender, _) = self.channel(queue);
        sender.send(body).await.map_err(|_| TransportError::Closed)
    }

    async fn publish_after(&self, queue: &str, body: Vec<u8>, delay: Duration) -> Result<(), TransportError> {
        let (sender, _) = self.channel(queue);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = sender.send(body).await;
        });
        Ok(())
    }

    async fn subscribe(&self, queue: &str, _prefetch: u16) -> Result<Box<dyn Subscription>, TransportError> {
        let (sender, receiver) = self.channel(queue);
        count_subscriber(&self.subscribers, queue, 1);
        let (subscribers, queue) = (self.subscribers.clone(), queue.to_owned());
        Ok(Box::new(InProcessSubscription { sender, receiver, subscribers, queue }))
    }

    async fn dead_letter(&self, queue: &str, body: Vec<u8>, reason: &str) -> Result<(), TransportError> {
        push_dead(&self.dead, queue, body, reason.to_owned());
        Ok(())
    }

    async fn take_dead_letters(&self, queue: &str, max: usize) -> Result<Vec<DeadLetter>, TransportError> {
        let taken: Vec<_> = {
            let mut dead = self.dead.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let letters = dead.entry(queue.to_owned()).or_default();
            letters.drain(..max.min(letters.len())).collect()
        };
        let letters = taken.into_iter().map(|(body, reason)| {
            let acker = ReturnToDead {
                dead: self.dead.clone(),
                queue: queue.to_owned(),
                body: body.clone(),
                reason: reason.clone(),
            };
            DeadLetter { body, reason, acker: Box::new(acker) }
        });
        Ok(letters.collect())
    }

    async fn consumers(&self, queue: &str) -> Result<Option<u32>, TransportError> {
        let subscribers = self.subscribers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(Some(subscribers.get(queue).copied().unwrap_or(0)))
    }

    async fn check_ready(&self) -> Result<(), TransportError> {
        Ok(())
    }

    fn is_durable(&self) -> bool {
        false
    }

    fn kind(&self) -> &'static str {
        "in_process"
    }
}

struct InProcessSubscription {
    sender: async_channel::Sender<Vec<u8>>,
    receiver: async_channel::Receiver<Vec<u8>>,
    subscribers: Subscribers,
    queue: String,
}

impl Drop for InProcessSubscription {
    fn drop(&mut self) {
        count_subscriber(&self.subscribers, &self.queue, -1);
    }
}

#[async_trait]
impl Subscription for InProcessSubscription {
    async fn next(&mut self) -> Option<Delivery> {
        let body = self.receiver.recv().await.ok()?;
        let acker = Box::new(InProcessAcker { sender: self.sender.clone(), body: Some(body.clone()) });
        Some(Delivery { body, acker })
    }
}

/// Ack forgets the message; requeue puts it at the back of the queue, and so does dropping
/// it unsettled (its handler panicked), as a broker would.
struct InProcessAcker {
    sender: async_channel::Sender<Vec<u8>>,
    /// The message until it is settled.
    body: Option<Vec<u8>>,
}

#[async_trait]
impl Acker for InProcessAcker {
    async fn ack(mut self: Box<Self>) -> Result<(), TransportError> {
        self.body = None;
        Ok(())
    }

    async fn requeue(mut self: Box<Self>) -> Result<(), TransportError> {
        let body = self.body.take().unwrap_or_default();
        self.sender.send(body).await.map_err(|_| TransportError::Closed)
    }
}

impl Drop for InProcessAcker {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            // The channel is unbounded: this never waits.
            let _ = self.sender.try_send(body);
        }
    }
}

/// Settles a taken dead letter: ack drops it, requeue returns it to the dead letters.
struct ReturnToDead {
    dead: DeadLetters,
    queue: String,
    body: Vec<u8>,
    reason: String,
}

#[async_trait]
impl Acker for ReturnToDead {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        Ok(())
    }

    async fn requeue(self: Box<Self>) -> Result<(), TransportError> {
        push_dead(&self.dead, &self.queue, self.body, self.reason);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn a_requeued_message_comes_back() {
        let transport = InProcessTransport::new();
        let mut subscription = transport.subscribe("q", 1).await.ok().unwrap();
        transport.publish("q", b"one".to_vec()).await.ok().unwrap();
        let first = subscription.next().await.unwrap();
        assert_eq!(first.body, b"one");
        first.acker.requeue().await.ok().unwrap();
        let again = subscription.next().await.unwrap();
        assert_eq!(again.body, b"one");
        again.acker.ack().await.ok().unwrap();
        assert_eq!(transport.depth("q"), 0);
    }

    #[actix_rt::test]
    async fn a_delivery_dropped_unsettled_comes_back() {
        let transport = InProcessTransport::new();
        let mut subscription = transport.subscribe("q", 1).await.ok().unwrap();
        transport.publish("q", b"one".to_vec()).await.ok().unwrap();
        drop(subscription.next().await.unwrap());
        let again = subscription.next().await.unwrap();
        assert_eq!(again.body, b"one");
        again.acker.ack().await.ok().unwrap();
        assert_eq!(transport.depth("q"), 0);
    }

    #[actix_rt::test]
    async fn dead_letters_are_kept_until_acked() {
        let transport = InProcessTransport::new();
        transport.dead_letter("q", b"junk".to_vec(), "not_a_job_id").await.ok().unwrap();
        let taken = transport.take_dead_letters("q", 10).await.ok().unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].reason, "not_a_job_id");
        for letter in taken {
            letter.acker.requeue().await.ok().unwrap();
        }
        let again = transport.take_dead_letters("q", 10).await.ok().unwrap();
        assert_eq!(again.len(), 1);
        for letter in again {
            letter.acker.ack().await.ok().unwrap();
        }
        assert!(transport.take_dead_letters("q", 10).await.ok().unwrap().is_empty());
    }
}
