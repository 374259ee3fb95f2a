//! Shard leases against fake-apiserver: a shard that a replica keeps after all, having stopped
//! acting on it for a while, has its keys reconciled again.

use std::time::{Duration, Instant};

use controller_kit::{
    leader::LeaderElectionArgs,
    shards::{Gained, Shards, shard_of},
};
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

const GROUP: &str = "group";

fn args(identity: &str) -> LeaderElectionArgs {
    LeaderElectionArgs {
        enabled: true,
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(100),
        resource_name: Some(GROUP.into()),
        resource_namespace: "default".into(),
        identity: Some(identity.into()),
    }
}

/// Waits (at most 20 s) until `check` holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "not within 20 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The events received so far.
fn received(events: &mut UnboundedReceiver<(u32, Gained)>) -> Vec<(u32, Gained)> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

/// The member lease another replica `identity` would write, renewed now and never again.
fn member_lease(identity: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(format!(
                "{GROUP}-member-{:016x}",
                u64::from(shard_of(identity, u32::MAX))
            )),
            labels: Some([(controller_kit::shards::GROUP_LABEL.to_owned(), GROUP.to_owned())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(identity.into()),
            lease_duration_seconds: Some(2),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    }
}

/// `make chaos` (issue 29): a replica drains a shard above its share while a sync runs on it,
/// refusing every sync asked for meanwhile; the replica that joined goes away before the drain
/// ends, so the share grows back and the shard is kept. The refused syncs (a new Service, the
/// retry of a provisioning one) must be asked for again: the shard is reported as acted on
/// again. Without it, those Services were never synced.
#[tokio::test]
async fn a_shard_kept_after_a_drain_is_called_off_is_reconciled_again() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let client = server.client().unwrap();
    let shards = Shards::elected(4);
    let mut events = shards.acquisitions().unwrap();
    let release = CancellationToken::new();
    let running = {
        let (shards, client, release) = (shards.clone(), client.clone(), release.clone());
        tokio::spawn(async move { shards.run(client, &args("a"), GROUP, release).await })
    };
    until("the only replica owns every shard", || {
        (0..4).all(|s| shards.owns(s))
    })
    .await;
    let mut taken = received(&mut events);
    taken.sort_by_key(|(s, _)| *s);
    assert_eq!(taken, (0..4).map(|s| (s, Gained::Acquired)).collect::<Vec<_>>());

    // A sync runs on shard 3 when a second replica joins: shards 2 and 3 are above the share.
    let in_flight = shards.begin(3).expect("shard 3 is owned");
    Api::<Lease>::namespaced(client, "default")
        .create(&PostParams::default(), &member_lease("b"))
        .await
        .unwrap();
    until("shard 3 drains (no new work on it)", || !shards.owns(3)).await;
    assert!(shards.begin(3).is_none(), "a sync asked for now is refused");

    // The second replica never renews: once its lease expires, the share is back to 4 and
    // shard 3 is kept, never released (its sync still runs).
    until("shard 3 is acted on again", || shards.owns(3)).await;
    let mut again = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !again.contains(&(3, Gained::Resumed)) && Instant::now() < deadline {
        again.extend(received(&mut events));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        again.contains(&(3, Gained::Resumed)),
        "shard 3 must be reconciled again: {again:?}"
    );
    assert!(
        !again.contains(&(3, Gained::Acquired)),
        "it was never given up: {again:?}"
    );
    drop(in_flight);
    release.cancel();
    running.await.unwrap();
}
