//! Leader election against fake-apiserver: a conflict on renewal is re-read and retried until
//! the renew deadline (as client-go), and renewals never wait behind the controller's own
//! client-side rate limit.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use controller_kit::{
    kube_client::{self, KubeArgs},
    leader::{LeaderElectionArgs, Leadership, run_as_leader},
};
use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use test_support::intercept::{self, Intercept};

fn election(name: &str) -> LeaderElectionArgs {
    LeaderElectionArgs {
        enabled: true,
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
        resource_name: Some(name.into()),
        resource_namespace: "default".into(),
        identity: Some("me".into()),
    }
}

#[tokio::test]
async fn a_conflict_on_renewal_is_retried_and_the_lease_kept() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let renewals = Arc::new(AtomicU32::new(0));
    let seen = renewals.clone();
    // The first two renewals lose a race with another writer of the Lease.
    let (client, log) = intercept::client(&server, move |method, path| {
        if method == Method::PUT && path.ends_with("/leases/lease") && seen.fetch_add(1, Ordering::SeqCst) < 2
        {
            intercept::status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        } else {
            Intercept::Pass
        }
    });
    let leadership = Leadership::elected();
    // Deadlines far beyond what the test waits, so a slow machine cannot end the leadership.
    let args = LeaderElectionArgs {
        lease_duration: Duration::from_secs(30),
        renew_deadline: Duration::from_secs(20),
        ..election("lease")
    };
    let election = run_as_leader(
        client,
        &args,
        "lease",
        &leadership,
        std::future::pending(),
        std::future::pending(),
    );
    // Until two renewals went through after the two conflicts.
    let renewed = async {
        let deadline = Instant::now() + Duration::from_secs(15);
        while renewals.load(Ordering::SeqCst) < 4 {
            assert!(
                Instant::now() < deadline,
                "conflicts, then renewals that went through"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        result = election => panic!("leadership ended: {result:?}"),
        () = renewed => {}
    }
    assert_eq!(
        log.matching(&Method::PUT, "/leases/lease").len() as u32,
        renewals.load(Ordering::SeqCst)
    );
    assert!(leadership.may_act(), "still the leader");
    let lease: Api<Lease> = Api::namespaced(server.client().unwrap(), "default");
    let holder = lease.get("lease").await.unwrap().spec.unwrap().holder_identity;
    assert_eq!(holder.as_deref(), Some("me"));
}

#[tokio::test]
async fn renewals_do_not_wait_behind_the_controllers_rate_limit() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let args = KubeArgs {
        kubeconfig: Some(kubeconfig),
        qps: Some(2.0),
        burst: 1,
    };
    let clients = kube_client::clients(&args).await.unwrap();
    // Four requests at 2/s with a burst of one take at least 1.5 s on the limited client (a
    // lower bound: no machine is too fast for it).
    let started = Instant::now();
    let leases: Api<Lease> = Api::namespaced(clients.limited.clone(), "default");
    for _ in 0..4 {
        leases.get_opt("lease").await.unwrap();
    }
    assert!(started.elapsed() >= Duration::from_millis(1400));
    // Twenty more queue on it: 10 s of its budget.
    let limited: Vec<_> = (0..20)
        .map(|_| {
            let leases: Api<Lease> = Api::namespaced(clients.limited.clone(), "default");
            tokio::spawn(async move { leases.get_opt("lease").await.map(|_| ()) })
        })
        .collect();
    // The elector's four go through meanwhile: answered while the limited client's queue still
    // waits (behind it they would take 10 s), whatever the machine's speed short of that.
    let leases: Api<Lease> = Api::namespaced(clients.elector.clone(), "default");
    for _ in 0..4 {
        leases.get_opt("lease").await.unwrap();
    }
    let still_waiting = limited.iter().filter(|t| !t.is_finished()).count();
    assert!(
        still_waiting > 0,
        "the elector's requests waited behind the limited client's"
    );
    for t in &limited {
        t.abort();
    }
}

/// Leadership is a handle, not process state: two candidates in one process never lead at
/// once, and when the leader steps down the other takes over.
#[tokio::test]
async fn two_candidates_in_one_process_never_lead_at_once() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let candidate = |identity: &str| {
        let args = LeaderElectionArgs {
            identity: Some(identity.into()),
            ..election("shared")
        };
        let leadership = Leadership::elected();
        let stop = tokio_util::sync::CancellationToken::new();
        let client = server.client().unwrap();
        let task = {
            let (leadership, stop) = (leadership.clone(), stop.clone());
            tokio::spawn(async move {
                run_as_leader(
                    client,
                    &args,
                    "shared",
                    &leadership,
                    std::future::pending(),
                    stop.cancelled_owned(),
                )
                .await
            })
        };
        (leadership, stop, task)
    };
    let (a, stop_a, task_a) = candidate("a");
    let (b, stop_b, task_b) = candidate("b");

    let deadline = Instant::now() + Duration::from_secs(10);
    let first_leader = loop {
        assert!(!(a.may_act() && b.may_act()), "both lead at once");
        match (a.may_act(), b.may_act()) {
            (true, false) => break "a",
            (false, true) => break "b",
            _ => {}
        }
        assert!(Instant::now() < deadline, "nobody became leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The leader steps down (shutdown releases the lease); the standby takes over.
    let (leader_stop, leader_task, standby) = match first_leader {
        "a" => (stop_a, task_a, b.clone()),
        _ => (stop_b, task_b, a.clone()),
    };
    leader_stop.cancel();
    leader_task.await.unwrap().unwrap();
    while !standby.may_act() {
        assert!(!(a.may_act() && b.may_act()), "both lead at once");
        assert!(Instant::now() < deadline, "the standby never took over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
