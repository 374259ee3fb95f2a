//! Single-name reads of concurrent syncs merged into batched Describe calls.
//!
//! A node joining makes the service controller update every load balancer at once, each update
//! asking for its own load balancer (and, for an NLB, its target groups). One by one that is a
//! call per load balancer and per group; AWS describes up to [`crate::reads::MAX_NAMES`] in one.
//! So a read waits in a queue of its kind, and a batch goes out when it is full or when no call
//! of its kind is in flight; otherwise it waits for that call and takes whatever arrived
//! meanwhile (the gateway's rule for its own batches). Idle, a read goes out at once; a burst
//! goes out in full batches. A call is always made after the read was asked, so no answer is
//! older than its question.
//!
//! Hand-written: the batching crates (`dataloader` and the like) seal a batch after a fixed
//! delay, which would add that delay to every idle read; this one follows the calls in flight.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use provider::{ProviderError, Result};
use tokio::sync::{Notify, oneshot};

/// One name's answer: `None` when it does not exist.
pub type Answer<T> = Result<Option<T>>;

/// Whether a batch of `pending` reads may go now.
fn may_go(pending: usize, batch: usize, in_flight: usize) -> bool {
    pending >= batch || in_flight == 0
}

struct Waiting<T> {
    id: u64,
    name: String,
    reply: oneshot::Sender<Answer<T>>,
}

struct State<T> {
    pending: Vec<Waiting<T>>,
    in_flight: usize,
}

/// Concurrent reads of one kind, merged.
pub struct Coalescer<T> {
    batch: usize,
    state: Mutex<State<T>>,
    done: Notify,
    ids: AtomicU64,
}

impl<T> std::fmt::Debug for Coalescer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

/// Ends a call in flight, also when the caller that made it went away.
struct InFlight<'a, T>(&'a Coalescer<T>);

impl<T> Drop for InFlight<'_, T> {
    fn drop(&mut self) {
        self.0.lock().in_flight -= 1;
        self.0.done.notify_waiters();
    }
}

impl<T> Coalescer<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a waiting read does next.
enum Step<T> {
    /// Another read's call took it: wait for the answer.
    Taken,
    /// Make the call for these.
    Go(Vec<Waiting<T>>),
    /// A call of this kind is in flight and the batch is not full.
    Wait,
}

impl<T: Clone> Coalescer<T> {
    /// Batches of at most `batch` distinct names.
    pub fn new(batch: usize) -> Self {
        Self {
            batch: batch.max(1),
            state: Mutex::new(State {
                pending: Vec::new(),
                in_flight: 0,
            }),
            done: Notify::new(),
            ids: AtomicU64::new(0),
        }
    }

    /// `name`'s answer, from a call of `describe` that may carry other concurrent reads.
    /// `describe` gets distinct names and answers each (a name it leaves out is answered as a
    /// failed read).
    pub async fn read<F, Fut>(&self, name: &str, describe: F) -> Answer<T>
    where
        F: Fn(Vec<String>) -> Fut,
        Fut: Future<Output = HashMap<String, Answer<T>>>,
    {
        // A caller that went away mid-call drops the replies of its batch: those asked again.
        for _ in 0..3 {
            let id = self.ids.fetch_add(1, Ordering::Relaxed);
            let (reply, answer) = oneshot::channel();
            self.lock().pending.push(Waiting {
                id,
                name: name.to_owned(),
                reply,
            });
            loop {
                let notified = self.done.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let step = {
                    let mut s = self.lock();
                    if !s.pending.iter().any(|w| w.id == id) {
                        Step::Taken
                    } else if may_go(s.pending.len(), self.batch, s.in_flight) {
                        s.in_flight += 1;
                        let n = s.pending.len().min(self.batch);
                        Step::Go(s.pending.drain(..n).collect::<Vec<_>>())
                    } else {
                        Step::Wait
                    }
                };
                let batch = match step {
                    Step::Taken => break,
                    Step::Wait => {
                        notified.await;
                        continue;
                    }
                    Step::Go(batch) => batch,
                };
                let _in_flight = InFlight(self);
                let mut names: Vec<String> = Vec::with_capacity(batch.len());
                for w in &batch {
                    if !names.contains(&w.name) {
                        names.push(w.name.clone());
                    }
                }
                let mut answers = describe(names).await;
                for w in batch {
                    let a = answers
                        .get(&w.name)
                        .cloned()
                        .unwrap_or_else(|| Err(ProviderError::Internal(format!("{} was not read", w.name))));
                    let _ = w.reply.send(a);
                }
                answers.clear();
                // Ours may have been beyond a full batch: go round again.
            }
            if let Ok(a) = answer.await {
                return a;
            }
        }
        Err(ProviderError::Internal(format!(
            "the batched read of {name} was abandoned three times"
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, Mutex as StdMutex},
        time::Duration,
    };

    use super::*;

    #[test]
    fn a_batch_goes_when_full_or_when_nothing_is_in_flight() {
        // (pending, batch, in flight, goes)
        let rows = [
            (1, 20, 0, true),
            (1, 20, 1, false),
            (19, 20, 1, false),
            (20, 20, 1, true),
            (25, 20, 3, true),
        ];
        for (pending, batch, in_flight, want) in rows {
            assert_eq!(
                may_go(pending, batch, in_flight),
                want,
                "{pending}/{batch}/{in_flight}"
            );
        }
    }

    type Call = std::pin::Pin<Box<dyn Future<Output = HashMap<String, Answer<String>>> + Send>>;

    /// A Describe that takes a while and records the names of each call.
    fn describe(
        calls: &Arc<StdMutex<Vec<Vec<String>>>>,
        missing: &'static str,
    ) -> impl Fn(Vec<String>) -> Call + use<> {
        let calls = calls.clone();
        move |names: Vec<String>| {
            calls.lock().unwrap().push(names.clone());
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                names
                    .into_iter()
                    .map(|n| {
                        let a = (n != missing).then(|| format!("{n}.dns"));
                        (n, Ok(a))
                    })
                    .collect()
            })
        }
    }

    #[tokio::test]
    async fn a_burst_goes_in_full_batches_after_the_first_read_and_each_gets_its_own_answer() {
        let c = Arc::new(Coalescer::<String>::new(20));
        let calls = Arc::new(StdMutex::new(Vec::new()));
        let reads = (0..61).map(|i| {
            let c = c.clone();
            let d = describe(&calls, "lb7");
            async move { (i, c.read(&format!("lb{i}"), d).await) }
        });
        for (i, answer) in futures::future::join_all(reads).await {
            let want = (i != 7).then(|| format!("lb{i}.dns"));
            assert_eq!(answer.unwrap(), want, "lb{i}");
        }
        let sizes: Vec<usize> = calls.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 61);
        assert_eq!(sizes[0], 1, "idle: the first read goes at once");
        assert!(sizes.len() <= 5, "in batches, not one by one: {sizes:?}");
    }

    #[tokio::test]
    async fn one_name_asked_twice_at_once_is_described_once_and_a_lone_read_waits_for_nobody() {
        let c = Arc::new(Coalescer::<String>::new(20));
        let calls = Arc::new(StdMutex::new(Vec::new()));
        // One call in flight, so the next two wait together.
        let first = c.read("lb0", describe(&calls, ""));
        let a = c.read("lb1", describe(&calls, ""));
        let b = c.read("lb1", describe(&calls, ""));
        let (x, y, z) = tokio::join!(first, a, b);
        assert_eq!(x.unwrap().as_deref(), Some("lb0.dns"));
        assert_eq!(y.unwrap(), z.unwrap());
        assert_eq!(
            *calls.lock().unwrap(),
            vec![vec!["lb0".to_owned()], vec!["lb1".to_owned()]]
        );

        let started = std::time::Instant::now();
        c.read("lb2", describe(&calls, "")).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_call_failing_fails_its_reads_and_a_name_left_out_fails_alone() {
        let c = Coalescer::<String>::new(20);
        let failing = |_: Vec<String>| async {
            HashMap::from([("a".to_owned(), Err(ProviderError::Unavailable("down".into())))])
        };
        assert!(matches!(
            c.read("a", failing).await,
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            c.read("b", failing).await,
            Err(ProviderError::Internal(_))
        ));
    }

    #[tokio::test]
    async fn a_reader_that_goes_away_mid_call_does_not_strand_the_others() {
        let c = Arc::new(Coalescer::<String>::new(20));
        let calls = Arc::new(StdMutex::new(Vec::new()));
        let slow = {
            let c = c.clone();
            let d = describe(&calls, "");
            tokio::spawn(async move { c.read("gone", d).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let waiting = {
            let c = c.clone();
            let d = describe(&calls, "");
            tokio::spawn(async move { c.read("stays", d).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        slow.abort();
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("not stranded")
            .unwrap();
        assert_eq!(answer.unwrap().as_deref(), Some("stays.dns"));
    }
}
