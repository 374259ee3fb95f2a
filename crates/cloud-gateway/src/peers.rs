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

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

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
    /// HTTP/1.1 to the peers' side ports, connections kept between probes.
    client: Client<HttpConnector, Empty<Bytes>>,
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
            client: Client::builder(TokioExecutor::new()).build_http(),
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
        let answers = futures::future::join_all(addresses.into_iter().map(|a| self.who_is(a))).await;
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
        self.config
            .interval
            .saturating_mul(2)
            .saturating_add(PROBE_TIMEOUT)
    }
}

/// A random number (std's hasher keys are random per process).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish()
}

impl Membership {
    /// The instance id a peer's `/peer` answers; `None` when it does not answer in time, or
    /// answers something other than an id.
    async fn who_is(&self, addr: SocketAddr) -> Option<String> {
        let uri: http::Uri = format!("http://{addr}/peer").parse().ok()?;
        let probe = async {
            let response = self.client.get(uri).await.ok()?;
            if response.status() != http::StatusCode::OK {
                return None;
            }
            let body = Limited::new(response.into_body(), MAX_ID_BYTES)
                .collect()
                .await
                .ok()?;
            let id = String::from_utf8(body.to_bytes().to_vec()).ok()?;
            Some(id.trim().to_owned()).filter(|id| !id.is_empty())
        };
        tokio::time::timeout(PROBE_TIMEOUT, probe).await.ok().flatten()
    }
}

/// Longest `/peer` answer taken: an instance id is 32 hex digits.
const MAX_ID_BYTES: usize = 64;
