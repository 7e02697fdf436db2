//! Releasing the jobs limits hold. [`LimitWatch`], an observer of the store, hears every
//! committed end of a job under a limit (and every job held anew) and hands the limit's key
//! to the [`Releaser`], which admits what the limit has room for now
//! (`DispatchBook::release`) and sends it; when a rate is what holds, it looks again the
//! moment the rate's window has room. Nothing polls to find room: a limit is looked at when
//! one of its jobs ends or is held, when its window frees, and, as a safety net for a process that
//! stopped between freeing room and releasing, every `recheck` for the limits holding jobs.
//! A limit whose last look found nothing held is looked at again for its endings no sooner
//! than [`QUIET`] later (one look then, for all of them): a limit that never binds costs a
//! few looks a second, not one per commit. A job held in this process, and every look while
//! jobs are held, goes at once; a job another process held meanwhile waits [`QUIET`] at most.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::Dispatcher;
use crate::domain::{Limit, LimitRules};
use crate::store::{Change, Observer, Released};

/// A limit to look at. `ending`: one of its jobs ended, which may wait out a quiet spell.
struct Named {
    key: String,
    ending: bool,
}

/// How long after a look that found nothing held a limit's endings wait to be looked at.
pub const QUIET: Duration = Duration::from_millis(20);

/// Hands the key of every limit one of whose jobs moved to the releaser.
pub struct LimitWatch {
    keys: mpsc::UnboundedSender<Named>,
}

impl LimitWatch {
    /// The watch, and what the releaser reads.
    pub fn new() -> (LimitWatch, Keys) {
        let (keys, receiver) = mpsc::unbounded_channel();
        (LimitWatch { keys: keys.clone() }, Keys { receiver, again: keys })
    }
}

impl Observer for LimitWatch {
    /// Room comes when a job of a limit ends; a job held anew (a submission over the
    /// limit, a retry) is looked at too, in case the room its admission counted freed
    /// before it committed. A start frees no room (a rate's window frees with time: the
    /// release that found it full comes back then).
    ///
    /// A limit is named once per call that commits (each outcome is announced on its own,
    /// group commit or not: a send on a channel and a wake of the releaser's task, which
    /// measured as nothing against a drain, `BENCHMARKS.md` 2026-12-06 (evening)).
    fn committed(&self, changes: &[Change<'_>]) {
        let mut named: Vec<(&str, bool)> = Vec::new();
        for change in changes {
            if let Change::Moved { job, .. } = change {
                let Some(key) = &job.limit_key else { continue };
                // A job waiting for its dependencies is not the limit's to admit yet.
                if job.waiting_since.is_some() && !job.status.is_terminal() {
                    continue;
                }
                let ending = match (job.held_since, job.status.is_terminal()) {
                    (Some(_), _) => false,
                    (None, true) => true,
                    (None, false) => continue,
                };
                match named.iter_mut().find(|(seen, _)| *seen == key.as_str()) {
                    // At once if any naming asks.
                    Some((_, endings_only)) => *endings_only &= ending,
                    None => named.push((key, ending)),
                }
            }
        }
        for (key, ending) in named {
            let _ = self.keys.send(Named { key: key.to_owned(), ending });
        }
    }
}

/// The keys of limits to look at, as the watch sends them.
pub struct Keys {
    receiver: mpsc::UnboundedReceiver<Named>,
    /// For the releaser's own returns (a rate's window, a failed release, a quiet spell).
    again: mpsc::UnboundedSender<Named>,
}

/// Admits held jobs as their limits allow, and sends them.
pub struct Releaser {
    dispatcher: Dispatcher,
    rules: LimitRules,
    recheck: Duration,
}

/// Jobs one release admits at most; a limit with more room is released again at once.
const RELEASE_BATCH: usize = 10_000;

impl Releaser {
    pub fn new(dispatcher: Dispatcher, rules: LimitRules, recheck: Duration) -> Self {
        Releaser { dispatcher, rules, recheck }
    }

    /// Runs for the life of the process: first every limit holding jobs now, then each as
    /// the watch names it, several named meanwhile released once.
    pub fn start(self, mut keys: Keys) {
        let again = keys.again.clone();
        let store = self.dispatcher.store.clone();
        let recheck = self.recheck;
        // With no limit configured, one look releases what an earlier configuration held.
        let periodic = !self.rules.is_empty();
        tokio::spawn(async move {
            loop {
                match store.holding().await {
                    Ok(holding) => {
                        holding.into_iter().for_each(|(key, _)| drop(again.send(Named { key, ending: false })))
                    }
                    Err(err) => warn!(error = %err, "could not read which limits hold jobs"),
                }
                if !periodic || again.is_closed() {
                    return;
                }
                tokio::time::sleep(recheck).await;
            }
        });
        tokio::spawn(async move {
            // Until when each limit found with nothing held may let its endings wait, and
            // the limits with a look already coming back for them.
            let mut quiet: HashMap<String, Instant> = HashMap::new();
            let mut deferred: HashSet<String> = HashSet::new();
            while let Some(first) = keys.receiver.recv().await {
                // Several named meanwhile, each looked at once (at once if any naming asks).
                let mut due = BTreeMap::from([(first.key, first.ending)]);
                while let Ok(named) = keys.receiver.try_recv() {
                    let ending = due.get(&named.key).is_none_or(|ending| *ending) && named.ending;
                    due.insert(named.key, ending);
                }
                for (key, ending) in due {
                    let now = Instant::now();
                    if let Some(until) = quiet.get(&key).filter(|until| ending && **until > now) {
                        if deferred.insert(key.clone()) {
                            come_back(&keys.again, &key, *until - now);
                        }
                        continue;
                    }
                    deferred.remove(&key);
                    match self.release(&key, &keys.again).await {
                        true => quiet.insert(key, Instant::now() + QUIET),
                        false => quiet.remove(&key),
                    };
                }
                if quiet.len() > 10_000 {
                    let now = Instant::now();
                    quiet.retain(|_, until| *until > now);
                }
            }
        });
    }

    /// Admits what `key`'s limit has room for and sends it; whether it held nothing.
    async fn release(&self, key: &str, again: &mpsc::UnboundedSender<Named>) -> bool {
        // A rule no longer configured limits nothing: its held jobs all go.
        let limit =
            self.rules.limit(key).unwrap_or_else(|| Limit { key: key.to_owned(), max_running: None, rate: None });
        loop {
            match self.dispatcher.store.release(&limit).await {
                Ok(Released { jobs, retry_in, nothing_held }) => {
                    if !jobs.is_empty() {
                        debug!(limit = %key, jobs = jobs.len(), "released held jobs");
                        self.dispatcher.publish_all(&jobs).await;
                    }
                    if jobs.len() >= RELEASE_BATCH {
                        continue;
                    }
                    if let Some(after) = retry_in {
                        come_back(again, key, after);
                    }
                    return nothing_held;
                }
                Err(err) => {
                    warn!(limit = %key, error = %err, "could not release held jobs; trying again in a second");
                    come_back(again, key, Duration::from_secs(1));
                    return false;
                }
            }
        }
    }
}

/// Names `key` to the releaser again after `after`, to be looked at then.
fn come_back(again: &mpsc::UnboundedSender<Named>, key: &str, after: Duration) {
    let (again, key) = (again.clone(), key.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = again.send(Named { key, ending: false });
    });
}
