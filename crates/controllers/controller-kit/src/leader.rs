//! Leader election through a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! A candidate takes the lease when it is free or its holder has not renewed it for a whole
//! lease duration, as observed on the candidate's own clock (never by comparing clocks of two
//! machines). The leader renews every retry period; if it cannot renew within the renew
//! deadline (shorter than the lease duration), it stops its work before anyone else may take
//! over, so two replicas never act at once. Writes use the Lease's resourceVersion, so of two
//! candidates racing for a free lease only one wins.
//!
//! Why not `kube-lease-manager`: every write and every cloud call here is fenced by the moment
//! the lease stops being known fresh (the start of the last renewal plus the renew deadline),
//! handed out as a [`Leadership`] that writers check and cloud calls race against; it keeps
//! that to itself. The shards ([`crate::shards`]) reuse this elector once per shard.

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

/// Whether this replica may write now: a handle shared by the elector, which extends it on every
/// renewal, and by every writer, which checks it right before each write. Cheap to clone; each
/// controller (or test) owns its own, so several can live in one process.
#[derive(Clone, Debug)]
pub struct Leadership {
    /// `None` without leader election (always allowed); else until when this replica may act:
    /// the start of its last successful renewal plus the renew deadline. Others cannot take the
    /// lease before a whole lease duration (longer) has passed.
    until: Option<Arc<Mutex<Option<std::time::Instant>>>>,
    /// `leader_election_master_status`: 1 while leading.
    gauge: Gauge,
}

impl Leadership {
    /// No leader election: this replica may always act.
    pub fn unconditional() -> Self {
        Self {
            until: None,
            gauge: Gauge::default(),
        }
    }

    /// Under leader election: may not act until [`Leadership::lead_until`] says so.
    pub fn elected() -> Self {
        Self {
            until: Some(Arc::new(Mutex::new(None))),
            gauge: Gauge::default(),
        }
    }

    /// Whether this replica may write now. Checked right before every write, so a replica that
    /// was paused (and lost its lease meanwhile) never acts before noticing.
    pub fn may_act(&self) -> bool {
        match &self.until {
            None => true,
            Some(until) => until
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some_and(|until| std::time::Instant::now() < until),
        }
    }

    /// Lets this replica act until `until` (`None`: stop now). The elector calls it; a test may
    /// too, to play a leader whose lease runs out.
    pub fn lead_until(&self, until: Option<std::time::Instant>) {
        if let Some(cell) = &self.until {
            *cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = until;
        }
        self.gauge.set(i64::from(until.is_some()));
    }

    /// The `leader_election_master_status` gauge, to register in the controller's metrics.
    pub fn gauge(&self) -> Gauge {
        self.gauge.clone()
    }

    /// Completes once this replica may no longer act: a cloud call raced against it is
    /// abandoned (its gRPC stream cancelled) when the lease could be taken over, however long
    /// the call itself may take. Never completes without leader election.
    pub async fn lost(&self) {
        let Some(cell) = &self.until else {
            return std::future::pending().await;
        };
        loop {
            let until = *cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match until {
                Some(until) if std::time::Instant::now() < until => {
                    // Renewals push `until` later; look again when the current one passes.
                    tokio::time::sleep_until(until.into()).await;
                }
                _ => return,
            }
        }
    }
}

/// The longest lease duration a Lease can say (`leaseDurationSeconds` is an int32).
pub const MAX_LEASE_DURATION: Duration = Duration::from_secs(i32::MAX as u64);

/// Leader-election flags (upstream names and defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct LeaderElectionArgs {
    /// Run only while holding the lease (needed when more than one replica runs).
    #[arg(long = "leader-elect", default_value_t = true, action = clap::ArgAction::Set)]
    pub enabled: bool,
    /// How long a lease stays valid after its last renewal.
    #[arg(long = "leader-elect-lease-duration", default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    #[arg(long = "leader-elect-renew-deadline", default_value = "10s", value_parser = humantime::parse_duration)]
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    #[arg(long = "leader-elect-retry-period", default_value = "2s", value_parser = humantime::parse_duration)]
    pub retry_period: Duration,
    /// Lease name; defaults to the controller's name.
    #[arg(long = "leader-elect-resource-name")]
    pub resource_name: Option<String>,
    /// Lease namespace.
    #[arg(long = "leader-elect-resource-namespace", default_value = "kube-system")]
    pub resource_namespace: String,
    /// This replica's identity in the lease; defaults to `<hostname>_<random uuid>`.
    #[arg(long = "leader-elect-identity")]
    pub identity: Option<String>,
}

impl LeaderElectionArgs {
    /// Checks the durations' order, as client-go does.
    pub fn validate(&self) -> Result<(), String> {
        // A Lease holds its duration in int32 seconds; beyond that the flag would not be what
        // the other replicas read (and instants this far out overflow).
        if self.lease_duration > MAX_LEASE_DURATION {
            return Err(format!(
                "--leader-elect-lease-duration must be at most {}s (a Lease's leaseDurationSeconds is an int32)",
                MAX_LEASE_DURATION.as_secs()
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(
                "--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline".into(),
            );
        }
        // In seconds as floats: a huge retry period must not overflow the check itself.
        if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * 1.2 {
            return Err(
                "--leader-elect-renew-deadline must be greater than 1.2 × --leader-elect-retry-period".into(),
            );
        }
        if self.retry_period.is_zero() {
            return Err("--leader-elect-retry-period must be positive".into());
        }
        Ok(())
    }
}

/// Why leadership ended other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Could not renew within the renew deadline; the work was stopped.
    #[error("lost the leader lease {0}: could not renew it within the renew deadline")]
    LostLease(String),
    /// The flags are inconsistent.
    #[error("invalid leader election settings: {0}")]
    Invalid(String),
}

/// What a candidate should do with the lease it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No lease exists: create it holding it.
    Create,
    /// Take it over (free, expired, or already ours after a restart).
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds a valid lease.
    Wait,
}

/// The parts of a lease the decision depends on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// Current holder; empty when released.
    pub holder: String,
    /// The holder's renew time as written (only compared for change, never against our clock).
    pub renew_time: Option<String>,
    /// The lease duration the holder declared.
    pub lease_duration: Duration,
}

/// Decides from the lease as seen now, and when we last saw it change (our clock).
pub fn decide(
    lease: Option<&Observed>,
    me: &str,
    last_change_seen_at: Instant,
    now: Instant,
    we_lead: bool,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    if lease.holder == me {
        return if we_lead {
            Decision::Renew
        } else {
            Decision::Acquire
        };
    }
    let expired = now.saturating_duration_since(last_change_seen_at) > lease.lease_duration;
    if lease.holder.is_empty() || expired {
        Decision::Acquire
    } else {
        Decision::Wait
    }
}

pub(crate) fn observe(lease: &Lease) -> Observed {
    let spec = lease.spec.clone().unwrap_or_default();
    Observed {
        holder: spec.holder_identity.unwrap_or_default(),
        renew_time: spec.renew_time.map(|t| t.0.to_string()),
        lease_duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
    }
}

/// Runs `work` only while this replica holds the lease `name`, keeping `leadership` up to date.
///
/// Without `--leader-elect` the work runs at once. Returns when `shutdown` completes (the lease
/// is released so a standby takes over at once) or, with an error, when the lease is lost.
///
/// `client` should be one that no controller traffic waits behind (no client-side QPS limit):
/// a renewal stuck behind a busy controller's own requests would cost the lease.
pub async fn run_as_leader<W>(
    client: Client,
    args: &LeaderElectionArgs,
    default_name: &str,
    leadership: &Leadership,
    work: W,
    shutdown: impl Future<Output = ()>,
) -> Result<(), LeaderError>
where
    W: Future<Output = ()> + Send + 'static,
{
    tokio::pin!(shutdown);
    if !args.enabled {
        leadership.lead_until(None);
        tokio::select! {
            () = work => {}
            () = &mut shutdown => {}
        }
        return Ok(());
    }
    args.validate().map_err(LeaderError::Invalid)?;
    let name = args
        .resource_name
        .clone()
        .unwrap_or_else(|| default_name.to_owned());
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let api: Api<Lease> = Api::namespaced(client, &args.resource_namespace);
    let mut elector = Elector {
        api,
        name,
        identity,
        args: args.clone(),
        seen: None,
        leading: false,
    };

    // Campaign.
    loop {
        let attempt = std::time::Instant::now();
        match elector.try_acquire_or_renew().await {
            Ok(Round::Held) => {
                leadership.lead_until(Some(attempt + args.renew_deadline));
                break;
            }
            Ok(Round::HeldByOther | Round::Conflict) => {}
            Err(err) => {
                tracing::warn!(lease = %elector.name, error = %err, "cannot read or write the leader lease")
            }
        }
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = tokio::time::sleep(jittered(args.retry_period)) => {}
        }
    }
    tracing::info!(lease = %elector.name, identity = %elector.identity, "became leader");

    // Lead: do the work and renew; stop the work when someone else holds the lease, or when no
    // renewal succeeded for the renew deadline (client-go: every failed attempt, a conflict
    // included, is retried each retry period until then).
    let work = tokio::spawn(work);
    let abort = work.abort_handle();
    let mut last_renewed = Instant::now();
    let outcome = loop {
        tokio::select! {
            () = &mut shutdown => break Ok(()),
            () = tokio::time::sleep(args.retry_period) => {}
        }
        let attempt = std::time::Instant::now();
        let renew = tokio::time::timeout(args.renew_deadline, elector.try_acquire_or_renew()).await;
        match renew {
            Ok(Ok(Round::Held)) => {
                last_renewed = Instant::now();
                leadership.lead_until(Some(attempt + args.renew_deadline));
            }
            Ok(Ok(Round::HeldByOther)) => break Err(LeaderError::LostLease(elector.name.clone())),
            Ok(Ok(Round::Conflict)) => {
                tracing::info!(lease = %elector.name, "the leader lease changed while renewing; reading it again")
            }
            Ok(Err(err)) => {
                tracing::warn!(lease = %elector.name, error = %err, "cannot renew the leader lease")
            }
            Err(_) => tracing::warn!(lease = %elector.name, "renewing the leader lease timed out"),
        }
        if last_renewed.elapsed() >= args.renew_deadline {
            break Err(LeaderError::LostLease(elector.name.clone()));
        }
    };
    leadership.lead_until(None);
    abort.abort();
    if outcome.is_ok() {
        elector.release().await;
    }
    outcome
}

/// The result of one attempt to take or keep the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// We hold it now.
    Held,
    /// Someone else holds a valid lease.
    HeldByOther,
    /// Our write lost a race (409): read the lease again and decide anew.
    Conflict,
}

struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    args: LeaderElectionArgs,
    /// The lease as last seen, and when we saw it change.
    seen: Option<(Observed, Instant)>,
    leading: bool,
}

impl Elector {
    fn seconds(d: Duration) -> i32 {
        i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One round: whether we hold the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<Round, kube::Error> {
        let now = Instant::now();
        let current = self.api.get_opt(&self.name).await?;
        let observed = current.as_ref().map(observe);
        if let Some(obs) = &observed {
            match &self.seen {
                Some((prev, _)) if prev == obs => {}
                _ => self.seen = Some((obs.clone(), now)),
            }
        }
        let seen_at = self.seen.as_ref().map_or(now, |(_, at)| *at);
        let decision = decide(observed.as_ref(), &self.identity, seen_at, now, self.leading);
        let wall = Timestamp::now();
        let written = match (decision, current) {
            (Decision::Wait, _) => {
                self.leading = false;
                return Ok(Round::HeldByOther);
            }
            (Decision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(Self::seconds(self.args.lease_duration)),
                        acquire_time: Some(MicroTime(wall)),
                        renew_time: Some(MicroTime(wall)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            (Decision::Acquire | Decision::Renew, Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                    spec.acquire_time = Some(MicroTime(wall));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    spec.holder_identity = Some(self.identity.clone());
                }
                spec.lease_duration_seconds = Some(Self::seconds(self.args.lease_duration));
                spec.renew_time = Some(MicroTime(wall));
                // metadata.resourceVersion is kept: a concurrent writer makes this a 409.
                self.api.replace(&self.name, &PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(lease) => {
                self.seen = Some((observe(&lease), Instant::now()));
                self.leading = true;
                Ok(Round::Held)
            }
            // Someone else wrote first; look again next round. A leader stays the leader until
            // it sees another holder or its renew deadline passes.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Round::Conflict),
            Err(err) => Err(err),
        }
    }

    /// Gives the lease up so a standby does not wait for it to expire.
    async fn release(&mut self) {
        let released = async {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else {
                return Ok(());
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                spec.lease_duration_seconds = Some(1);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
            }
            Ok::<(), kube::Error>(())
        };
        match tokio::time::timeout(Duration::from_secs(5), released).await {
            Ok(Ok(())) => tracing::info!(lease = %self.name, "released the leader lease"),
            Ok(Err(err)) => {
                tracing::warn!(lease = %self.name, error = %err, "could not release the leader lease")
            }
            Err(_) => tracing::warn!(lease = %self.name, "releasing the leader lease timed out"),
        }
    }
}

pub(crate) fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// client-go's JitterUntil with factor 1.2: up to 20% later.
pub(crate) fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + rand::random::<f64>() * 0.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str) -> Observed {
        Observed {
            holder: holder.into(),
            renew_time: Some("t".into()),
            lease_duration: Duration::from_secs(15),
        }
    }

    #[test]
    fn decisions_follow_client_go() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let cases = [
            ("no lease: create it", None, t0, t0, false, Decision::Create),
            (
                "free lease: take it",
                Some(lease("")),
                t0,
                t0,
                false,
                Decision::Acquire,
            ),
            (
                "held and fresh: wait",
                Some(lease("other")),
                t0,
                t0 + s(14),
                false,
                Decision::Wait,
            ),
            (
                "held but unchanged for a lease duration: take it",
                Some(lease("other")),
                t0,
                t0 + s(16),
                false,
                Decision::Acquire,
            ),
            (
                "ours and leading: renew",
                Some(lease("me")),
                t0,
                t0,
                true,
                Decision::Renew,
            ),
            (
                "ours from a previous run: re-acquire",
                Some(lease("me")),
                t0,
                t0,
                false,
                Decision::Acquire,
            ),
        ];
        for (what, observed, seen, now, leading, want) in cases {
            assert_eq!(
                decide(observed.as_ref(), "me", seen, now, leading),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn durations_must_nest() {
        let args = |lease: u64, renew: u64, retry: u64| LeaderElectionArgs {
            enabled: true,
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            resource_name: None,
            resource_namespace: "kube-system".into(),
            identity: None,
        };
        assert!(args(15, 10, 2).validate().is_ok());
        assert!(args(10, 10, 2).validate().is_err());
        assert!(args(15, 2, 2).validate().is_err());
        // Found by fuzzing the flags: a lease beyond int32 seconds was accepted (the Lease
        // said i32::MAX), and a huge retry period made the check itself overflow and panic.
        let too_long = i32::MAX as u64 + 1;
        assert!(args(too_long, 10, 2).validate().is_err());
        assert!(args(15, 10, u64::MAX).validate().is_err());
    }
}
