//! Inspecting and settling a queue's dead letters: summarise, replay onto the queue, purge.
//! Every action can be a dry run, and anything not acted on goes back where it was.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::transport::{DeadLetter, Transport, TransportError};

/// Bytes of a message body shown in a summary sample.
const SAMPLE_BYTES: usize = 200;
const SAMPLES: usize = 10;

/// What `GET /admin/dead-letters` reports.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Summary {
    pub queue: String,
    /// Dead letters seen (at most the requested limit).
    pub total: usize,
    pub by_reason: BTreeMap<String, usize>,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Sample {
    pub reason: String,
    pub bytes: usize,
    /// The start of the body as text (invalid UTF-8 replaced).
    pub body: String,
}

/// What a replay or purge did.
#[derive(Debug, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Settled {
    pub queue: String,
    pub matched: usize,
    /// Replayed or purged; 0 on a dry run.
    pub acted: usize,
    pub dry_run: bool,
}

/// Which dead letters an action applies to.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only letters with this reason; all when `None`.
    pub reason: Option<String>,
    pub limit: usize,
    pub dry_run: bool,
}

impl Selection {
    fn matches(&self, letter: &DeadLetter) -> bool {
        self.reason.as_deref().is_none_or(|reason| reason == letter.reason)
    }
}

pub async fn summarise(transport: &dyn Transport, queue: &str, limit: usize) -> Result<Summary, TransportError> {
    let letters = transport.take_dead_letters(queue, limit).await?;
    let mut by_reason = BTreeMap::new();
    let mut samples = Vec::new();
    for letter in &letters {
        *by_reason.entry(letter.reason.clone()).or_insert(0) += 1;
        if samples.len() < SAMPLES {
            let shown = &letter.body[..letter.body.len().min(SAMPLE_BYTES)];
            samples.push(Sample {
                reason: letter.reason.clone(),
                bytes: letter.body.len(),
                body: String::from_utf8_lossy(shown).into_owned(),
            });
        }
    }
    let total = letters.len();
    put_back(letters).await?;
    Ok(Summary { queue: queue.to_owned(), total, by_reason, samples })
}

/// Publishes matching dead letters back onto `queue` and removes them from the dead letters.
pub async fn replay(transport: &dyn Transport, queue: &str, selection: &Selection) -> Result<Settled, TransportError> {
    settle(transport, queue, selection, true).await
}

/// Removes matching dead letters for good.
pub async fn purge(transport: &dyn Transport, queue: &str, selection: &Selection) -> Result<Settled, TransportError> {
    settle(transport, queue, selection, false).await
}

async fn settle(
    transport: &dyn Transport,
    queue: &str,
    selection: &Selection,
    replay: bool,
) -> Result<Settled, TransportError> {
    let letters = transport.take_dead_letters(queue, selection.limit).await?;
    let (chosen, others): (Vec<_>, Vec<_>) = letters.into_iter().partition(|letter| selection.matches(letter));
    put_back(others).await?;
    let matched = chosen.len();
    if selection.dry_run {
        put_back(chosen).await?;
        return Ok(Settled { queue: queue.to_owned(), matched, acted: 0, dry_run: true });
    }
    let mut acted = 0;
    for letter in chosen {
        // Replay publishes first, so a failure leaves the letter where it was.
        if replay {
            if let Err(err) = transport.publish(queue, letter.body.clone()).await {
                letter.acker.requeue().await?;
                return Err(err);
            }
        }
        letter.acker.ack().await?;
        acted += 1;
    }
    Ok(Settled { queue: queue.to_owned(), matched, acted, dry_run: false })
}

async fn put_back(letters: Vec<DeadLetter>) -> Result<(), TransportError> {
    for letter in letters {
        letter.acker.requeue().await?;
    }
    Ok(())
}
