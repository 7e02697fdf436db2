//! The embedded transport: one in-memory line per queue, no broker.
//!
//! A line hands out what waits at the first priority level first, and at one level in the
//! order it came, as a RabbitMQ priority queue does. Messages do not survive the process;
//! at start-up every QUEUED job is marked unpublished and the dispatch sweep re-sends it, so
//! nothing committed is lost. A delayed message waits on a timer task.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{Acker, DeadLetter, Delivery, Subscription, Transport, TransportError, LAST_PRIORITY};

type DeadLetters = Arc<Mutex<HashMap<String, Vec<(Vec<u8>, String)>>>>;

/// A message waiting in a line: ordered by level, then by arrival.
struct Waiting {
    priority: u8,
    arrival: u64,
    body: Vec<u8>,
}

impl Waiting {
    fn rank(&self) -> Reverse<(u8, u64)> {
        Reverse((self.priority, self.arrival))
    }
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Waiting {}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

/// One queue's messages, and the bell its receivers wait on.
#[derive(Default)]
struct Line {
    waiting: Mutex<(BinaryHeap<Waiting>, u64)>,
    ready: Notify,
}

impl Line {
    fn push(&self, body: Vec<u8>, priority: u8) {
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let arrival = waiting.1;
            waiting.1 += 1;
            waiting.0.push(Waiting { priority: priority.min(LAST_PRIORITY), arrival, body });
        }
        self.ready.notify_one();
    }

    fn pop(&self) -> Option<Waiting> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).0.pop()
    }

    fn len(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).0.len()
    }

    /// The next message, waiting for one. A receiver woken but dropped before it took one
    /// passes its wake-up on (tokio's `Notified`), so no message waits with a receiver idle.
    async fn take(&self) -> Waiting {
        loop {
            let rung = self.ready.notified();
            tokio::pin!(rung);
            rung.as_mut().enable();
            if let Some(next) = self.pop() {
                // Others may wait while more is queued.
                if self.len() > 0 {
                    self.ready.notify_one();
                }
                return next;
            }
            rung.await;
        }
    }
}

/// Queues held in this process. Clones share the same queues.
#[derive(Clone, Default)]
pub struct InProcessTransport {
    queues: Arc<Mutex<HashMap<String, Arc<Line>>>>,
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

    fn line(&self, queue: &str) -> Arc<Line> {
        let mut queues = self.queues.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        queues.entry(queue.to_owned()).or_default().clone()
    }

    /// Messages waiting in `queue`, for tests and diagnostics.
    pub fn depth(&self, queue: &str) -> usize {
        self.line(queue).len()
    }
}

fn push_dead(dead: &DeadLetters, queue: &str, body: Vec<u8>, reason: String) {
    let mut dead = dead.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    dead.entry(queue.to_owned()).or_default().push((body, reason));
}

#[async_trait]
impl Transport for InProcessTransport {
    async fn publish_at(&self, queue: &str, body: Vec<u8>, priority: u8) -> Result<(), TransportError> {
        self.line(queue).push(body, priority);
        Ok(())
    }

    async fn publish_after(&self, queue: &str, body: Vec<u8>, delay: Duration) -> Result<(), TransportError> {
        let line = self.line(queue);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            line.push(body, 0);
        });
        Ok(())
    }

    async fn subscribe(&self, queue: &str, _prefetch: u16) -> Result<Box<dyn Subscription>, TransportError> {
        let line = self.line(queue);
        count_subscriber(&self.subscribers, queue, 1);
        let (subscribers, queue) = (self.subscribers.clone(), queue.to_owned());
        Ok(Box::new(InProcessSubscription { line, subscribers, queue }))
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
    line: Arc<Line>,
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
        let Waiting { priority, body, .. } = self.line.take().await;
        let acker = Box::new(InProcessAcker { line: self.line.clone(), priority, body: Some(body.clone()) });
        Some(Delivery { body, acker })
    }
}

/// Ack forgets the message; requeue puts it at the back of its level, and so does dropping
/// it unsettled (its handler panicked), as a broker would.
struct InProcessAcker {
    line: Arc<Line>,
    priority: u8,
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
        self.line.push(body, self.priority);
        Ok(())
    }
}

impl Drop for InProcessAcker {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            self.line.push(body, self.priority);
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
    async fn a_line_hands_out_the_first_level_first_and_each_level_in_order() {
        let transport = InProcessTransport::new();
        for (body, priority) in [("low-1", 9), ("mid", 4), ("low-2", 9), ("high-1", 0), ("high-2", 0)] {
            transport.publish_at("q", body.as_bytes().to_vec(), priority).await.ok().unwrap();
        }
        let mut subscription = transport.subscribe("q", 1).await.ok().unwrap();
        let mut order = Vec::new();
        for _ in 0..5 {
            let delivery = subscription.next().await.unwrap();
            order.push(String::from_utf8(delivery.body.clone()).unwrap());
            if order.len() == 1 {
                // Given back, it goes behind the others of its level.
                delivery.acker.requeue().await.ok().unwrap();
                order.pop();
                let again = subscription.next().await.unwrap();
                order.push(String::from_utf8(again.body.clone()).unwrap());
                again.acker.ack().await.ok().unwrap();
                continue;
            }
            delivery.acker.ack().await.ok().unwrap();
        }
        assert_eq!(order, ["high-2", "high-1", "mid", "low-1", "low-2"]);
    }

    #[actix_rt::test]
    async fn a_waiting_receiver_is_woken_by_a_publish() {
        let transport = InProcessTransport::new();
        let mut subscription = transport.subscribe("q", 1).await.ok().unwrap();
        let publisher = transport.clone();
        let sent = tokio::spawn(async move { publisher.publish_at("q", b"late".to_vec(), 3).await.ok() });
        let delivery = subscription.next().await.unwrap();
        assert_eq!(delivery.body, b"late");
        assert!(sent.await.unwrap().is_some());
        delivery.acker.ack().await.ok().unwrap();
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
