//! Scale-out without an extra component: the work is split into a fixed number of shards, each
//! owned by one replica at a time through a `coordination.k8s.io/v1` Lease of its own, with the
//! semantics of leader election ([`crate::leader`]).
//!
//! - A key (a Service's UID) belongs to shard `fnv1a(key) % count`: stable across replicas,
//!   restarts and versions.
//! - Each replica also renews a *member* Lease; the live members (their lease renewed within
//!   its duration, on this replica's clock) split the shards evenly: sorted by identity, each
//!   takes `count / members` and the first `count % members` one more.
//! - A replica above its share drains the excess: it starts no new work on those shards, waits
//!   for the work in flight to finish, stops acting, and only then releases the lease. A replica
//!   below its share takes free shards at once and a dead replica's shards once their lease
//!   went unrenewed for a whole lease duration.
//! - A replica acts on a shard only while the shard's lease is fresh ([`Leadership`] per shard:
//!   until the start of its last successful renewal plus the renew deadline, shorter than the
//!   lease duration others wait). So two replicas never act on one shard at once, including a
//!   paused or partitioned one, whose cloud calls are abandoned when its fence runs out
//!   ([`Leadership::lost`]).
//!
//! Why here: the sharding libraries for Kubernetes controllers (timebertt's
//! kubernetes-controller-sharding) need a sharder Deployment and a webhook that label objects;
//! this needs nothing but Leases, which every cluster has.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::future::join_all;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams, Preconditions},
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::leader::{self, LeaderElectionArgs, Leadership, Observed};

/// Label on every Lease of a shard group, so one LIST reads the whole group.
pub const GROUP_LABEL: &str = "ccm.cloudgateway.dev/shard-group";

/// The shard of `key`: 64-bit FNV-1a, which (unlike std's hashers) is specified and so stable
/// across Rust versions: every replica, old or new, puts a key in the same shard.
pub fn shard_of(key: &str, count: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(count.max(1))).unwrap_or(0)
}

/// How many shards `me` should own when `members` (every live member, `me` included) share
/// `count`: an even split, the first `count % members` (by identity) taking one more.
pub fn share_of(me: &str, members: &BTreeSet<String>, count: u32) -> u32 {
    let n = u32::try_from(members.len().max(1)).unwrap_or(u32::MAX);
    let rank = members.iter().position(|m| m == me).unwrap_or(members.len());
    let rank = u32::try_from(rank).unwrap_or(u32::MAX);
    count / n + u32::from(rank < count % n)
}

/// A shard's lease as one round sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardView {
    /// Current holder; empty when free or when no lease exists yet.
    pub holder: String,
    /// Unrenewed for a whole lease duration, on this replica's clock.
    pub expired: bool,
}

impl ShardView {
    fn takeable_by(&self, me: &str) -> bool {
        self.holder.is_empty() || self.expired || self.holder == me
    }
}

/// What a replica does with the shards in one round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoundPlan {
    /// Shards to take (free, expired, or ours from before a restart).
    pub acquire: Vec<u32>,
    /// Held shards to start draining (above our share).
    pub drain: Vec<u32>,
    /// Draining shards to keep after all (our share grew back).
    pub undrain: Vec<u32>,
}

/// Decides a round: `held` are the shards this replica holds, `draining` those of them it is
/// giving up. Pure; every replica computing it from the same view reaches a split where each
/// shard has one owner.
pub fn plan_round(
    me: &str,
    members: &BTreeSet<String>,
    shards: &[ShardView],
    held: &BTreeSet<u32>,
    draining: &BTreeSet<u32>,
) -> RoundPlan {
    let count = u32::try_from(shards.len()).unwrap_or(u32::MAX);
    let share = share_of(me, members, count) as usize;
    let keeping: Vec<u32> = held.difference(draining).copied().collect();
    let mut plan = RoundPlan::default();
    if keeping.len() > share {
        // Give up the highest-numbered: every replica agrees on nothing here but its own set.
        plan.drain = keeping[share..].to_vec();
        return plan;
    }
    let mut missing = share - keeping.len();
    // Keep what is being drained before taking anything new: no handover needed.
    for &shard in draining.iter().take(missing) {
        plan.undrain.push(shard);
    }
    missing -= plan.undrain.len();
    // Take free or expired shards, each replica in its own order (rendezvous), so that two
    // replicas short of shards at once mostly ask for different ones.
    let mut candidates: Vec<u32> = (0..count)
        .filter(|s| !held.contains(s) && shards[*s as usize].takeable_by(me))
        .collect();
    candidates.sort_by_key(|s| std::cmp::Reverse(shard_of(&format!("{me}/{s}"), u32::MAX)));
    plan.acquire = candidates.into_iter().take(missing).collect();
    plan
}

/// How a replica came to act on a shard again: its keys are to be reconciled, since syncs
/// asked for while it could not act were refused and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gained {
    /// Taken over (free, expired, or ours from before a restart): another replica may have
    /// changed the cloud since, so what was synced is to be forgotten.
    Acquired,
    /// Held all along, but not acted on for a while: a drain called off (the share grew back
    /// before the work in flight ended) or a fence that lapsed and was renewed in time.
    Resumed,
}

/// Labels of `<prefix>_shard_handovers_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandoverLabels {
    /// `acquired`, `released` (drained and given up) or `lost` (taken over or unrenewable).
    pub event: &'static str,
}

#[derive(Default)]
struct ShardState {
    draining: bool,
    in_flight: usize,
}

/// The shards of one replica: which it may act on, the work in flight on each, and the
/// metrics. Cheap to clone; owned by the controller's context (no process-wide state).
#[derive(Clone)]
pub struct Shards {
    inner: Arc<Inner>,
}

struct Inner {
    count: u32,
    fences: Vec<Leadership>,
    state: Mutex<Vec<ShardState>>,
    acquired: tokio::sync::mpsc::UnboundedSender<(u32, Gained)>,
    acquisitions: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<(u32, Gained)>>>,
    owned: Gauge,
    handovers: Family<HandoverLabels, Counter>,
}

/// Work running on a shard; dropping it lets a drain proceed.
pub struct InFlight {
    shards: Shards,
    shard: u32,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.shards.lock();
        let slot = &mut state[self.shard as usize];
        slot.in_flight = slot.in_flight.saturating_sub(1);
    }
}

impl Shards {
    /// `count` shards, none owned until [`Shards::run`] takes them.
    pub fn elected(count: u32) -> Self {
        Self::with_fences(count, |_| Leadership::elected())
    }

    /// `count` shards, all owned for good (no leader election: a single replica).
    pub fn unconditional(count: u32) -> Self {
        let shards = Self::with_fences(count, |_| Leadership::unconditional());
        shards.inner.owned.set(i64::from(count));
        shards
    }

    fn with_fences(count: u32, fence: impl Fn(u32) -> Leadership) -> Self {
        let count = count.max(1);
        let (acquired, acquisitions) = tokio::sync::mpsc::unbounded_channel();
        Self {
            inner: Arc::new(Inner {
                count,
                fences: (0..count).map(fence).collect(),
                state: Mutex::new((0..count).map(|_| ShardState::default()).collect()),
                acquired,
                acquisitions: Mutex::new(Some(acquisitions)),
                owned: Gauge::default(),
                handovers: Family::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ShardState>> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many shards there are.
    pub fn count(&self) -> u32 {
        self.inner.count
    }

    /// The shard of `key`.
    pub fn shard_of(&self, key: &str) -> u32 {
        shard_of(key, self.inner.count)
    }

    /// The fence of `shard`: whether this replica may act on it now.
    pub fn fence(&self, shard: u32) -> &Leadership {
        &self.inner.fences[shard as usize]
    }

    /// Starts work on `shard` if this replica owns it and is not giving it up; `None` otherwise
    /// (another replica does the work).
    pub fn begin(&self, shard: u32) -> Option<InFlight> {
        let mut state = self.lock();
        let slot = state.get_mut(shard as usize)?;
        if slot.draining || !self.inner.fences[shard as usize].may_act() {
            return None;
        }
        slot.in_flight += 1;
        Some(InFlight {
            shards: self.clone(),
            shard,
        })
    }

    /// Whether this replica may act on `shard` now and is not giving it up.
    pub fn owns(&self, shard: u32) -> bool {
        let state = self.lock();
        state
            .get(shard as usize)
            .is_some_and(|s| !s.draining && self.inner.fences[shard as usize].may_act())
    }

    /// The shards this replica comes to act on from now on (taken over, or acted on again after
    /// a pause), each time, so that the controller reconciles their keys (the first caller gets
    /// the stream).
    pub fn acquisitions(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<(u32, Gained)>> {
        self.inner
            .acquisitions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The number of shards owned, for `<prefix>_shards_owned`.
    pub fn owned_gauge(&self) -> Gauge {
        self.inner.owned.clone()
    }

    /// Handovers by event, for `<prefix>_shard_handovers_total`.
    pub fn handovers(&self) -> Family<HandoverLabels, Counter> {
        self.inner.handovers.clone()
    }

    fn set_draining(&self, shard: u32, draining: bool) {
        self.lock()[shard as usize].draining = draining;
    }

    fn is_draining(&self, shard: u32) -> bool {
        self.lock()[shard as usize].draining
    }

    fn in_flight(&self, shard: u32) -> usize {
        self.lock()[shard as usize].in_flight
    }

    fn handover(&self, event: &'static str) {
        self.inner
            .handovers
            .get_or_create(&HandoverLabels { event })
            .inc();
    }

    /// Takes, keeps and gives up shards of `group` (Leases in `args.resource_namespace`) until
    /// `release` is cancelled, then stops acting on every shard and releases them all. Cancel
    /// `release` only once the work in flight is done (after the controller's graceful shutdown).
    ///
    /// `client` should be one no controller traffic waits behind, as for leader election.
    pub async fn run(
        &self,
        client: Client,
        args: &LeaderElectionArgs,
        group: &str,
        release: CancellationToken,
    ) {
        let identity = args.identity.clone().unwrap_or_else(leader::default_identity);
        let mut member = Member {
            api: Api::namespaced(client, &args.resource_namespace),
            group: group.to_owned(),
            identity,
            args: args.clone(),
            seen: HashMap::new(),
            held: BTreeSet::new(),
        };
        tracing::info!(group, identity = %member.identity, shards = self.count(), "sharing the work by shard leases");
        loop {
            if let Err(err) = member.round(self).await {
                tracing::warn!(group, error = %err, "cannot read or write the shard leases");
            }
            tokio::select! {
                () = release.cancelled() => break,
                () = tokio::time::sleep(leader::jittered(args.retry_period)) => {}
            }
        }
        member.release_all(self).await;
    }
}

/// One replica's view and leases.
struct Member {
    api: Api<Lease>,
    group: String,
    identity: String,
    args: LeaderElectionArgs,
    /// Every lease of the group as last seen, and when this replica saw it change.
    seen: HashMap<String, (Observed, Instant)>,
    /// Shards whose lease this replica holds (renewed, or still being renewed).
    held: BTreeSet<u32>,
}

impl Member {
    fn shard_lease_name(&self, shard: u32) -> String {
        format!("{}-shard-{shard}", self.group)
    }

    fn member_lease_name(&self) -> String {
        format!(
            "{}-member-{:016x}",
            self.group,
            u64::from(shard_of(&self.identity, u32::MAX))
        )
    }

    fn expired(&self, name: &str, now: Instant) -> bool {
        self.seen
            .get(name)
            .is_some_and(|(obs, since)| now.saturating_duration_since(*since) > obs.lease_duration)
    }

    async fn round(&mut self, shards: &Shards) -> Result<(), kube::Error> {
        let attempt = std::time::Instant::now();
        let now = Instant::now();
        let selector = format!("{GROUP_LABEL}={}", self.group);
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        let by_name: BTreeMap<String, Lease> = leases
            .into_iter()
            .filter_map(|l| Some((l.metadata.name.clone()?, l)))
            .collect();
        self.seen.retain(|name, _| by_name.contains_key(name));
        for (name, lease) in &by_name {
            let observed = leader::observe(lease);
            match self.seen.get(name) {
                Some((prev, _)) if *prev == observed => {}
                _ => {
                    self.seen.insert(name.clone(), (observed, now));
                }
            }
        }

        // Our membership first, so the others count us in their next round.
        let member_name = self.member_lease_name();
        let _ = self
            .write(by_name.get(&member_name).cloned(), &member_name, true)
            .await;
        let member_prefix = format!("{}-member-", self.group);
        let mut members: BTreeSet<String> = by_name
            .iter()
            .filter(|(name, _)| name.starts_with(&member_prefix) && !self.expired(name, now))
            .filter_map(|(_, l)| l.spec.as_ref()?.holder_identity.clone())
            .collect();
        members.insert(self.identity.clone());
        self.collect_dead_members(&by_name, &member_prefix, now).await;

        let views: Vec<ShardView> = (0..shards.count())
            .map(|s| {
                let name = self.shard_lease_name(s);
                ShardView {
                    holder: by_name
                        .get(&name)
                        .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
                        .unwrap_or_default(),
                    expired: self.expired(&name, now),
                }
            })
            .collect();

        // The held shards acted on before this round: one acted on again after it (a drain
        // called off, a lapsed fence renewed) has its keys reconciled, as syncs asked for
        // meanwhile were refused and dropped.
        let acting_before: BTreeSet<u32> = self.held.iter().copied().filter(|s| shards.owns(*s)).collect();

        // Shards another replica took from us (we were cut off for a whole lease duration).
        let lost: Vec<u32> = self
            .held
            .iter()
            .copied()
            .filter(|s| {
                let holder = &views[*s as usize].holder;
                !holder.is_empty() && *holder != self.identity
            })
            .collect();
        for shard in lost {
            self.drop_shard(shards, shard, "lost");
        }

        let draining: BTreeSet<u32> = self
            .held
            .iter()
            .copied()
            .filter(|s| shards.is_draining(*s))
            .collect();
        let plan = plan_round(&self.identity, &members, &views, &self.held, &draining);
        for &shard in &plan.drain {
            tracing::info!(group = %self.group, shard, "draining shard: above this replica's share");
            shards.set_draining(shard, true);
        }
        for &shard in &plan.undrain {
            shards.set_draining(shard, false);
        }

        // Renew what we hold and take what the plan says, all at once.
        let mut wanted: Vec<(u32, bool)> = self.held.iter().map(|s| (*s, false)).collect();
        wanted.extend(plan.acquire.iter().map(|s| (*s, true)));
        let names: Vec<String> = wanted
            .iter()
            .map(|&(shard, _)| self.shard_lease_name(shard))
            .collect();
        let writes = names
            .iter()
            .map(|name| self.write(by_name.get(name).cloned(), name, false));
        let results = join_all(writes).await;
        for ((shard, new), result) in wanted.into_iter().zip(results) {
            match result {
                Ok(()) => {
                    shards
                        .fence(shard)
                        .lead_until(Some(attempt + self.args.renew_deadline));
                    if new && self.held.insert(shard) {
                        tracing::info!(group = %self.group, shard, "acquired shard");
                        shards.handover("acquired");
                        let _ = shards.inner.acquired.send((shard, Gained::Acquired));
                    } else if !new && !acting_before.contains(&shard) && shards.owns(shard) {
                        tracing::info!(group = %self.group, shard, "acting on shard again");
                        let _ = shards.inner.acquired.send((shard, Gained::Resumed));
                    }
                }
                Err(WriteOutcome::Conflict) => {}
                Err(WriteOutcome::Failed(err)) => {
                    tracing::warn!(group = %self.group, shard, error = %err, "cannot write the shard lease");
                }
            }
        }

        // Give up drained shards once nothing runs on them: stop acting first, then release.
        for shard in self.held.clone() {
            if shards.is_draining(shard) && shards.in_flight(shard) == 0 {
                self.release(shards, shard).await;
            }
        }
        shards
            .inner
            .owned
            .set(i64::try_from(self.held.len()).unwrap_or(i64::MAX));
        Ok(())
    }

    /// Stops acting on `shard` and forgets it (it is no longer ours to release).
    fn drop_shard(&mut self, shards: &Shards, shard: u32, event: &'static str) {
        shards.fence(shard).lead_until(None);
        shards.set_draining(shard, false);
        if self.held.remove(&shard) {
            tracing::warn!(group = %self.group, shard, "shard {event}");
            shards.handover(event);
        }
    }

    /// Creates, renews or takes `name` for this replica, guarded by the resourceVersion read.
    async fn write(&self, current: Option<Lease>, name: &str, member: bool) -> Result<(), WriteOutcome> {
        let wall = MicroTime(Timestamp::now());
        let seconds = i32::try_from(self.args.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        labels: Some([(GROUP_LABEL.to_owned(), self.group.clone())].into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(wall.clone()),
                        renew_time: Some(wall),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                    if member {
                        // A member lease is ours alone (named after our identity).
                        spec.lease_transitions = Some(0);
                    } else {
                        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    }
                    spec.acquire_time = Some(wall.clone());
                    spec.holder_identity = Some(self.identity.clone());
                }
                spec.lease_duration_seconds = Some(seconds);
                spec.renew_time = Some(wall);
                self.api.replace(name, &PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Err(WriteOutcome::Conflict),
            Err(err) => Err(WriteOutcome::Failed(err)),
        }
    }

    /// Gives `shard` up: stops acting on it, then frees its lease for another replica.
    async fn release(&mut self, shards: &Shards, shard: u32) {
        shards.fence(shard).lead_until(None);
        shards.set_draining(shard, false);
        self.held.remove(&shard);
        shards.handover("released");
        let name = self.shard_lease_name(shard);
        let freed = async {
            let mut lease = self.api.get(&name).await?;
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                spec.lease_duration_seconds = Some(1);
                self.api.replace(&name, &PostParams::default(), &lease).await?;
            }
            Ok::<(), kube::Error>(())
        };
        match tokio::time::timeout(Duration::from_secs(5), freed).await {
            Ok(Ok(())) => tracing::info!(group = %self.group, shard, "released shard"),
            Ok(Err(err)) => {
                tracing::warn!(group = %self.group, shard, error = %err, "could not release the shard lease; it expires")
            }
            Err(_) => {
                tracing::warn!(group = %self.group, shard, "releasing the shard lease timed out; it expires")
            }
        }
    }

    /// At shutdown: stop acting everywhere, free every shard and leave the group.
    async fn release_all(&mut self, shards: &Shards) {
        for shard in self.held.clone() {
            self.release(shards, shard).await;
        }
        shards.inner.owned.set(0);
        let name = self.member_lease_name();
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.api.delete(&name, &DeleteParams::default()),
        )
        .await;
    }

    /// Deletes member leases unrenewed for four lease durations (replicas that crashed), each
    /// guarded by the version seen, so a member that comes back keeps its lease.
    async fn collect_dead_members(&self, by_name: &BTreeMap<String, Lease>, prefix: &str, now: Instant) {
        for (name, lease) in by_name.iter().filter(|(n, _)| n.starts_with(prefix)) {
            let Some((observed, since)) = self.seen.get(name) else {
                continue;
            };
            if now.saturating_duration_since(*since) <= observed.lease_duration * 4 {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: lease.metadata.uid.clone(),
                    resource_version: lease.metadata.resource_version.clone(),
                }),
                ..Default::default()
            };
            if self.api.delete(name, &params).await.is_ok() {
                tracing::info!(group = %self.group, lease = %name, "deleted the member lease of a replica gone for good");
            }
        }
    }
}

enum WriteOutcome {
    Conflict,
    Failed(kube::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn set(shards: &[u32]) -> BTreeSet<u32> {
        shards.iter().copied().collect()
    }

    fn views(holders: &[&str]) -> Vec<ShardView> {
        holders
            .iter()
            .map(|h| ShardView {
                holder: h.trim_end_matches('!').to_owned(),
                expired: h.ends_with('!'),
            })
            .collect()
    }

    #[test]
    fn keys_land_in_stable_shards_spread_over_all_of_them() {
        // Fixed values: a change of the hash would move every Service between replicas of two
        // versions during a rolling update.
        assert_eq!(shard_of("", 16), 0xcbf2_9ce4_8422_2325_u64.rem_euclid(16) as u32);
        assert_eq!(
            shard_of("5d3c1f7e-0000-4000-8000-000000000001", 16),
            shard_of("5d3c1f7e-0000-4000-8000-000000000001", 16)
        );
        let mut seen = [0u32; 16];
        for i in 0..1600 {
            seen[shard_of(&format!("uid-{i}"), 16) as usize] += 1;
        }
        assert!(seen.iter().all(|n| (50..=150).contains(n)), "{seen:?}");
    }

    #[test]
    fn shares_split_evenly_and_add_up() {
        let cases: [(&[&str], u32, &[u32]); 5] = [
            (&["a"], 16, &[16]),
            (&["a", "b"], 16, &[8, 8]),
            (&["a", "b", "c"], 16, &[6, 5, 5]),
            (&["a", "b", "c", "d", "e"], 16, &[4, 3, 3, 3, 3]),
            (&["a", "b", "c"], 2, &[1, 1, 0]),
        ];
        for (names, count, want) in cases {
            let m = members(names);
            let got: Vec<u32> = names.iter().map(|n| share_of(n, &m, count)).collect();
            assert_eq!(got, want, "{names:?} sharing {count}");
            assert_eq!(got.iter().sum::<u32>(), count);
        }
    }

    #[test]
    fn rounds_take_give_up_and_keep_shards_like_the_table_says() {
        struct Case {
            what: &'static str,
            me: &'static str,
            members: &'static [&'static str],
            holders: &'static [&'static str],
            held: &'static [u32],
            draining: &'static [u32],
            acquire: usize,
            drain: &'static [u32],
            undrain: &'static [u32],
        }
        let cases = [
            Case {
                what: "alone: take every free shard",
                me: "a",
                members: &["a"],
                holders: &["", "", "", ""],
                held: &[],
                draining: &[],
                acquire: 4,
                drain: &[],
                undrain: &[],
            },
            Case {
                what: "a second replica joined: give up the excess, highest first",
                me: "a",
                members: &["a", "b"],
                holders: &["a", "a", "a", "a"],
                held: &[0, 1, 2, 3],
                draining: &[],
                acquire: 0,
                drain: &[2, 3],
                undrain: &[],
            },
            Case {
                what: "already draining the excess: nothing more to do",
                me: "a",
                members: &["a", "b"],
                holders: &["a", "a", "a", "a"],
                held: &[0, 1, 2, 3],
                draining: &[2, 3],
                acquire: 0,
                drain: &[],
                undrain: &[],
            },
            Case {
                what: "the newcomer takes only free shards, never held ones",
                me: "b",
                members: &["a", "b"],
                holders: &["a", "a", "", "a"],
                held: &[],
                draining: &[],
                acquire: 1,
                drain: &[],
                undrain: &[],
            },
            Case {
                what: "a dead replica's expired shards are taken",
                me: "a",
                members: &["a"],
                holders: &["a", "a", "b!", "b!"],
                held: &[0, 1],
                draining: &[],
                acquire: 2,
                drain: &[],
                undrain: &[],
            },
            Case {
                what: "the share grew back while draining: keep instead of handing over",
                me: "a",
                members: &["a"],
                holders: &["a", "a", "a", "a"],
                held: &[0, 1, 2, 3],
                draining: &[2, 3],
                acquire: 0,
                drain: &[],
                undrain: &[2, 3],
            },
            Case {
                what: "our own lease from before a restart counts as takeable",
                me: "a",
                members: &["a"],
                holders: &["a", "", "", ""],
                held: &[],
                draining: &[],
                acquire: 4,
                drain: &[],
                undrain: &[],
            },
        ];
        for case in cases {
            let plan = plan_round(
                case.me,
                &members(case.members),
                &views(case.holders),
                &set(case.held),
                &set(case.draining),
            );
            assert_eq!(plan.acquire.len(), case.acquire, "{}: {plan:?}", case.what);
            assert_eq!(plan.drain, case.drain, "{}", case.what);
            assert_eq!(plan.undrain, case.undrain, "{}", case.what);
            let holders = views(case.holders);
            for shard in &plan.acquire {
                let view = &holders[*shard as usize];
                assert!(
                    view.takeable_by(case.me),
                    "{}: took held shard {shard}",
                    case.what
                );
            }
        }
    }

    #[tokio::test]
    async fn work_starts_only_on_owned_undrained_shards_and_is_counted() {
        let shards = Shards::elected(4);
        assert!(shards.begin(1).is_none(), "not owned yet");
        shards
            .fence(1)
            .lead_until(Some(std::time::Instant::now() + Duration::from_secs(10)));
        let work = shards.begin(1).expect("owned");
        assert_eq!(shards.in_flight(1), 1);
        shards.set_draining(1, true);
        assert!(shards.begin(1).is_none(), "no new work on a draining shard");
        drop(work);
        assert_eq!(shards.in_flight(1), 0);
        assert!(Shards::unconditional(4).begin(3).is_some());
    }
}
