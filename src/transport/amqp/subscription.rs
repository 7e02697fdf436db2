//! One subscription to a queue on RabbitMQ, and the settling of what it delivers: each
//! delivery handed out holds its channel open until it is acked or given back, and one
//! dropped unsettled (its handler panicked) goes back to the queue.

use std::sync::Arc;

use async_trait::async_trait;
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicNackOptions};
use lapin::Channel;
use tokio::sync::mpsc;

use super::{amqp_error, unavailable};
use crate::transport::{Acker, Delivery, Subscription, TransportError};

/// A subscription's deliveries as they come, its channel and its consumers' tags.
pub(super) struct Subscribed {
    pub(super) receiver: mpsc::Receiver<lapin::message::Delivery>,
    pub(super) channel: Channel,
    pub(super) tags: Vec<lapin::types::ShortString>,
}

/// Deliveries of one subscription. Given up (dropped: a paused queue, a shutdown), it
/// cancels its consumers, so the broker sends it nothing more, and gives back what it was
/// sent and had not handed out; its channel closes once the last delivery handed out is
/// settled, so the runs still going ack as usual.
pub(super) struct AmqpSubscription {
    pub(super) receiver: mpsc::Receiver<lapin::message::Delivery>,
    pub(super) handle: tokio::runtime::Handle,
    /// Held by every delivery handed out, too.
    pub(super) guard: Arc<ChannelGuard>,
    pub(super) channel: Channel,
    pub(super) tags: Vec<lapin::types::ShortString>,
}

#[async_trait]
impl Subscription for AmqpSubscription {
    async fn next(&mut self) -> Option<Delivery> {
        let delivery = self.receiver.recv().await?;
        let acker = AmqpAcker::new(delivery.acker, self.handle.clone(), Some(self.guard.clone()));
        Some(Delivery { body: delivery.data, acker: Box::new(acker) })
    }
}

impl Drop for AmqpSubscription {
    fn drop(&mut self) {
        self.receiver.close();
        let mut unsent = Vec::new();
        while let Ok(delivery) = self.receiver.try_recv() {
            unsent.push(delivery);
        }
        let (channel, tags) = (self.channel.clone(), std::mem::take(&mut self.tags));
        self.handle.spawn(async move {
            for tag in tags {
                let _ = channel.basic_cancel(tag, BasicCancelOptions::default()).await;
            }
            for delivery in unsent {
                let _ = delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await;
            }
        });
    }
}

pub(super) struct AmqpAcker {
    acker: lapin::Acker,
    handle: tokio::runtime::Handle,
    /// Keeps its channel open until its message is settled.
    _channel: Option<Arc<ChannelGuard>>,
    /// Set once `ack` or `requeue` ran; a delivery dropped unsettled (its handler panicked)
    /// is given back to the queue, or it would hold a place in the window for good.
    settled: bool,
}

impl AmqpAcker {
    pub(super) fn new(acker: lapin::Acker, handle: tokio::runtime::Handle, channel: Option<Arc<ChannelGuard>>) -> Self {
        AmqpAcker { acker, handle, _channel: channel, settled: false }
    }
}

#[async_trait]
impl Acker for AmqpAcker {
    async fn ack(mut self: Box<Self>) -> Result<(), TransportError> {
        self.settled = true;
        let acker = self.acker.clone();
        let settled = self.handle.spawn(async move { acker.ack(BasicAckOptions::default()).await });
        settled.await.map_err(|err| unavailable(err.to_string()))?.map(drop).map_err(amqp_error)
    }

    async fn requeue(mut self: Box<Self>) -> Result<(), TransportError> {
        self.settled = true;
        let acker = self.acker.clone();
        let options = BasicNackOptions { requeue: true, ..Default::default() };
        let settled = self.handle.spawn(async move { acker.nack(options).await });
        settled.await.map_err(|err| unavailable(err.to_string()))?.map(drop).map_err(amqp_error)
    }
}

impl Drop for AmqpAcker {
    fn drop(&mut self) {
        if !self.settled {
            let acker = self.acker.clone();
            let options = BasicNackOptions { requeue: true, ..Default::default() };
            self.handle.spawn(async move {
                let _ = acker.nack(options).await;
            });
        }
    }
}

/// Closes a channel once nothing refers to it (its unsettled messages return to the queue):
/// a subscription's once it and every delivery it handed out are gone, a `basic_get`'s once
/// its dead letters are settled.
pub(super) struct ChannelGuard {
    pub(super) channel: Option<Channel>,
    pub(super) handle: tokio::runtime::Handle,
}

impl Drop for ChannelGuard {
    fn drop(&mut self) {
        if let Some(channel) = self.channel.take() {
            self.handle.spawn(async move {
                let _ = channel.close(200, "settled".into()).await;
            });
        }
    }
}
