//! Several gateway replicas (`gateway.replicas: 2`, or a rolling update that briefly runs two)
//! keep the provider's limits together: each takes 1/N of them, N being the live replicas.
//!
//! Membership needs no Kubernetes: each replica answers `GET /peer` on its HTTP side port with
//! its instance id, and probes the peers it is given (`--peers`: host:port of their HTTP ports;
//! a DNS name such as a headless Service resolves to every replica, itself included) every
//! probe interval. The live replicas are itself plus every distinct instance that answered.
//!
//! Ordering keeps the sum under the limit: a new replica answers `/peer` before it serves any
//! call and waits two probe intervals, so every peer has lowered its share first; a stopping
//! replica keeps answering `/peer` until its last call is done, so nobody raises its share
//! early. A replica that dies stops answering: the others take its share after one interval.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{metrics::Metrics, scheduler::Scheduler};

/// Where the other replicas are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// `host:port` of the replicas' HTTP side ports; names may resolve to several addresses.
    pub targets: Vec<String>,
    /// How often they are probed.
    pub interval: Duration,
}

/// This replica's view of the replicas.
pub struct Membership {
    instance: String,
    config: PeerConfig,
    live: Mutex<BTreeSet<String>>,
}

/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

impl Membership {
    /// A member named by a fresh instance id.
    pub fn new(config: PeerConfig) -> Arc<Self> {
        let instance = format!("{:016x}{:016x}", rand_u64(), rand_u64());
        Arc::new(Self {
            live: Mutex::new(BTreeSet::from([instance.clone()])),
            instance,
            config,
        })
    }

    /// What `GET /peer` answers.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The live replicas, this one included.
    pub fn live(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// One probe round: resolves the targets, asks each address who it is, and sets the
    /// scheduler's share to 1 / live replicas.
    pub async fn probe(&self, scheduler: &Scheduler, metrics: &Metrics) {
        let mut addresses = BTreeSet::new();
        for target in &self.config.targets {
            match tokio::net::lookup_host(target).await {
                Ok(found) => addresses.extend(found),
                Err(err) => tracing::debug!(target, error = %err, "cannot resolve a gateway peer"),
            }
        }
        let answers = futures::future::join_all(addresses.into_iter().map(who_is)).await;
        let mut live: BTreeSet<String> = answers.into_iter().flatten().collect();
        live.insert(self.instance.clone());
        let n = live.len();
        let changed = {
            let mut current = self
                .live
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let changed = *current != live;
            *current = live;
            changed
        };
        if changed {
            tracing::info!(
                replicas = n,
                "gateway replicas changed; taking 1/{n} of the provider limits"
            );
        }
        scheduler.set_share(1.0 / n as f64);
        metrics.replicas.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Probes every interval until dropped.
    pub async fn run(self: Arc<Self>, scheduler: Arc<Scheduler>, metrics: Arc<Metrics>) {
        loop {
            tokio::time::sleep(self.config.interval).await;
            self.probe(&scheduler, &metrics).await;
        }
    }

    /// How long a new replica waits after its first probe before serving: long enough that
    /// every peer has counted it.
    pub fn warm_up(&self) -> Duration {
        self.config.interval * 2 + PROBE_TIMEOUT
    }
}

/// A random number (std's hasher keys are random per process).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish()
}

/// The instance id a peer's `/peer` answers; `None` when it does not answer.
async fn who_is(addr: SocketAddr) -> Option<String> {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(format!("GET /peer HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        (head.split_whitespace().nth(1) == Some("200"))
            .then(|| body.trim().to_owned())
            .filter(|id| !id.is_empty() && id.len() <= 64)
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe).await.ok().flatten()
}
