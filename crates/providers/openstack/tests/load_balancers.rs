//! `OpenStackLoadBalancers` against the real test cloud's Octavia (amphora provider, no-op
//! drivers) and Neutron: whose a load balancer is. Each test has its own cluster name and
//! Service, and takes Octavia's turn (`TestCloud::octavia_turn`) while it makes load balancers.
//!
//! Every wait is a sync repeated while the provider answers RETRY_AFTER, after the delay it
//! names, up to a deadline.

use std::time::{Duration, Instant};

use openstack_fixture::{TestCloud, User, lb};
use provider::{
    ExternalTrafficPolicy, LoadBalancerStatus, LoadBalancers, Protocol, ProviderError, ServicePort,
    ServiceSpec,
};
use provider_openstack::{
    client::{Client, Service},
    cloud_config::LoadBalancerSettings,
    load_balancers::{OpenStackLoadBalancers, ownership},
};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(90);
const ID_A: &str = "0a000000-0000-4000-8000-00000000000a";
const ID_B: &str = "0b000000-0000-4000-8000-00000000000b";

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

async fn load_balancers(client: &Client) -> OpenStackLoadBalancers {
    load_balancers_managing_security_groups(client, false).await
}

async fn load_balancers_managing_security_groups(client: &Client, manage: bool) -> OpenStackLoadBalancers {
    let settings = LoadBalancerSettings {
        manage_security_groups: manage,
        ..lb::settings(cloud())
    };
    lb::provider(cloud(), client, settings)
        .await
        .expect("the provider's load balancers")
}

fn service(cluster_id: &str) -> ServiceSpec {
    lb::service(cloud(), "default", 1, cluster_id)
}

/// Ensures on no node until the provider stops answering RETRY_AFTER; its last answer.
async fn ensure(
    lbs: &OpenStackLoadBalancers,
    cluster: &str,
    svc: &ServiceSpec,
) -> provider::Result<LoadBalancerStatus> {
    lb::ensure(lbs, cluster, svc, &[], DEADLINE).await
}

async fn delete(lbs: &OpenStackLoadBalancers, cluster: &str, svc: &ServiceSpec) {
    lb::delete(lbs, cluster, svc, DEADLINE).await.expect("deleted");
}

/// The load balancer named `name`, as Octavia reports it.
async fn octavia_lb(client: &Client, name: &str) -> Option<Value> {
    lb::octavia_lb(client, name).await.expect("list load balancers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clusters_load_balancer_under_the_same_cluster_name_is_never_touched() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    // One cluster name (OCCM's default would do), two clusters.
    let cluster = cloud().unique_name("shared-name");
    let (a, b) = (load_balancers(&client).await, load_balancers(&client).await);
    let svc_a = service(ID_A);
    let status = ensure(&a, &cluster, &svc_a)
        .await
        .expect("cluster A's load balancer");
    let name = a.load_balancer_name(&cluster, &svc_a);
    let lb = octavia_lb(&client, &name).await.expect("made");
    assert!(lb::tags(&lb).contains(&ownership::identity_tag(ID_A)), "{lb}");

    // The same Service (namespace, name) in cluster B: same name, so found, and refused.
    let svc_b = ServiceSpec {
        uid: cloud().unique_name("uid"),
        cluster_id: ID_B.into(),
        ..svc_a.clone()
    };
    for answer in [
        ensure(&b, &cluster, &svc_b).await.map(drop),
        b.update_load_balancer(&cluster, &svc_b, &[]).await,
    ] {
        match answer {
            Err(ProviderError::InvalidArgument(m)) => assert!(
                m.contains(&lb["id"].as_str().unwrap().to_owned())
                    && m.contains(ID_A)
                    && m.contains("left alone"),
                "{m}"
            ),
            other => panic!("cluster B got {other:?}"),
        }
    }
    assert_eq!(b.get_load_balancer(&cluster, &svc_b).await.expect("get"), None);
    // B's Service deleted: A's load balancer and floating IP stay.
    b.ensure_load_balancer_deleted(&cluster, &svc_b)
        .await
        .expect("delete is a no-op");
    assert_eq!(b.writes(), 0, "cluster B wrote nothing");
    assert_eq!(
        a.get_load_balancer(&cluster, &svc_a).await.expect("get"),
        Some(status),
        "A's load balancer and address stay"
    );

    // A's floating IP records A's identity: with A's load balancer gone by hand, deleting B's
    // Service (whose floating IP OCCM's description alone would name too) leaves it.
    let description = format!(
        "Floating IP for Kubernetes external service {}/{} from cluster {cluster}",
        svc_a.namespace, svc_a.name
    );
    let held = floating_ips(&client, "description", &description).await;
    assert_eq!(held.len(), 1);
    assert!(
        lb::tags(&held[0]).contains(&ownership::identity_tag(ID_A)),
        "{held:?}"
    );
    let start = Instant::now();
    // Asked again while Octavia still applies A's last write (409).
    while let Err(e) = client
        .delete(
            Service::LoadBalancer,
            &format!("/lbaas/loadbalancers/{}", lb["id"].as_str().unwrap()),
        )
        .query(&[("cascade", "true")])
        .send_empty()
        .await
    {
        assert!(
            e.is_conflict() && start.elapsed() < DEADLINE,
            "A's load balancer deleted by hand: {e}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    while octavia_lb(&client, &name).await.is_some() {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    b.ensure_load_balancer_deleted(&cluster, &svc_b)
        .await
        .expect("B's delete");
    assert_eq!(b.writes(), 0, "cluster B wrote nothing");
    assert_eq!(
        floating_ips(&client, "description", &description).await.len(),
        1,
        "A's floating IP stays"
    );
    delete(&a, &cluster, &svc_a).await;
    assert!(
        floating_ips(&client, "description", &description)
            .await
            .is_empty(),
        "A's own delete takes it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclaimed_load_balancer_is_taken_over_unchanged_with_no_write_and_claimed_before_a_change() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("adopt");
    // Made without an identity, as OCCM makes it.
    let occm = load_balancers(&client).await;
    let before = service("");
    let status = ensure(&occm, &cluster, &before).await.expect("made as OCCM");
    let name = occm.load_balancer_name(&cluster, &before);
    let lb = octavia_lb(&client, &name).await.expect("made");
    assert!(
        !lb::tags(&lb)
            .iter()
            .any(|t| t.starts_with(ownership::CLUSTER_ID_TAG_PREFIX)),
        "{lb}"
    );

    // Taken over unchanged: the same status, nothing written.
    let ours = load_balancers(&client).await;
    let svc = ServiceSpec {
        cluster_id: ID_A.into(),
        ..before.clone()
    };
    assert_eq!(ensure(&ours, &cluster, &svc).await.expect("taken over"), status);
    assert_eq!(ours.writes(), 0, "an unchanged takeover writes nothing");

    // A change: the first write claims the load balancer, the change follows.
    let mut changed = svc.clone();
    changed
        .annotations
        .insert("loadbalancer.openstack.org/connection-limit".into(), "100".into());
    match ours.ensure_load_balancer(&cluster, &changed, &[]).await {
        Err(ProviderError::RetryAfter { .. }) => {}
        other => panic!("a change is a write: {other:?}"),
    }
    assert_eq!(ours.writes(), 1);
    let lb = octavia_lb(&client, &name).await.expect("there");
    let claimed = lb::tags(&lb);
    assert!(
        claimed.contains(&ownership::identity_tag(ID_A)),
        "claimed first: {lb}"
    );
    assert!(claimed.contains(&name), "OCCM's tag kept: {lb}");
    assert_eq!(ensure(&ours, &cluster, &changed).await.expect("changed"), status);
    let listener_id = lb["listeners"][0]["id"].as_str().expect("a listener").to_owned();
    let listener: Value = client
        .get(Service::LoadBalancer, &format!("/lbaas/listeners/{listener_id}"))
        .send_json()
        .await
        .expect("listener");
    assert_eq!(listener["listener"]["connection_limit"], 100);

    // Now it is A's: another identity under the same name is refused.
    let other = load_balancers(&client).await;
    let theirs = ServiceSpec {
        cluster_id: ID_B.into(),
        ..changed.clone()
    };
    assert!(matches!(
        ensure(&other, &cluster, &theirs).await,
        Err(ProviderError::InvalidArgument(_))
    ));
    assert_eq!(other.writes(), 0);

    delete(&ours, &cluster, &changed).await;
    assert!(octavia_lb(&client, &name).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_sync_costs_two_calls_and_no_write_whatever_its_port_count() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("cheap");
    let lbs = load_balancers(&client).await;
    // Three ports with health monitors: OCCM reads 2 + 3P = 11 Octavia calls and 2 Neutron calls.
    let mut svc = service(ID_A);
    svc.ports = (0..3u16)
        .map(|i| ServicePort {
            name: format!("p{i}"),
            protocol: Protocol::Tcp,
            port: 80 + i,
            node_port: 30080 + i,
        })
        .collect();
    svc.annotations.insert(
        "loadbalancer.openstack.org/enable-health-monitor".into(),
        "true".into(),
    );
    let status = ensure(&lbs, &cluster, &svc).await.expect("made");
    // The converge is recorded on the load balancer as the sync answers; once Octavia has
    // applied that tag, a sync plans nothing.
    let name = lbs.load_balancer_name(&cluster, &svc);
    let start = Instant::now();
    while !octavia_lb(&client, &name).await.is_some_and(|lb| {
        lb["provisioning_status"] == "ACTIVE"
            && lb::tags(&lb).iter().any(|t| t.starts_with("cloudgateway_spec_"))
    }) {
        assert!(
            start.elapsed() < DEADLINE,
            "the converge recorded on the load balancer"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // This gateway (it remembers the converge), then another one or this one restarted (it
    // trusts the recorded fingerprint): the same status, 2 calls, no write.
    let restarted = load_balancers(&client).await;
    for (who, lbs) in [("the same gateway", &lbs), ("a restarted gateway", &restarted)] {
        let (before, writes) = (lb::calls(&client), lbs.writes());
        assert_eq!(
            ensure(lbs, &cluster, &svc).await.expect("unchanged"),
            status,
            "{who}"
        );
        assert_eq!(
            lb::calls(&client) - before,
            2,
            "{who}: the load balancer and its floating IP"
        );
        assert_eq!(lbs.writes(), writes, "{who}: no write");
    }

    // A change is not trusted: read in full, and made.
    let mut changed = svc.clone();
    changed
        .annotations
        .insert("loadbalancer.openstack.org/connection-limit".into(), "50".into());
    let before = lb::calls(&client);
    match restarted.ensure_load_balancer(&cluster, &changed, &[]).await {
        Err(ProviderError::RetryAfter { .. }) => {}
        other => panic!("a change is a write: {other:?}"),
    }
    assert!(lb::calls(&client) - before > 2, "read in full before the write");

    delete(&lbs, &cluster, &svc).await;
}

/// A node that leaves and comes back across a gateway restart is put back. The converge marker
/// covers the members and is rewritten by every converge, a node change included: had a
/// members-only change been left off the marker (saving its tag write), the restarted gateway
/// would find the marker equal to its request (the node back) and trust a load balancer that
/// still lacks the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_after_a_restart_is_read_and_put_back_not_trusted_from_the_marker() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("aba");
    let lbs = load_balancers(&client).await;
    let svc = service(ID_A);
    lb::ensure(&lbs, &cluster, &svc, &nodes(2), DEADLINE)
        .await
        .expect("made on two nodes");
    let name = lbs.load_balancer_name(&cluster, &svc);
    wait_recorded(&client, &name).await;
    lb::ensure(&lbs, &cluster, &svc, &nodes(1), DEADLINE)
        .await
        .expect("a node left");
    assert_eq!(pool_members(&client, &name).await, 1);

    let restarted = load_balancers(&client).await;
    lb::ensure(&restarted, &cluster, &svc, &nodes(2), DEADLINE)
        .await
        .expect("the node came back");
    assert_eq!(pool_members(&client, &name).await, 2, "the node put back");

    delete(&lbs, &cluster, &svc).await;
}

/// The members of the one pool of load balancer `name`.
async fn pool_members(client: &Client, name: &str) -> usize {
    let lb = octavia_lb(client, name).await.expect("the load balancer");
    let pool = lb["pools"][0]["id"].as_str().expect("a pool").to_owned();
    let members: Value = client
        .get(Service::LoadBalancer, &format!("/lbaas/pools/{pool}/members"))
        .send_json()
        .await
        .expect("members");
    members["members"].as_array().map_or(0, Vec::len)
}

/// Waits until Octavia has applied the tag that records the converge of `name`.
async fn wait_recorded(client: &Client, name: &str) {
    let start = Instant::now();
    while !octavia_lb(client, name).await.is_some_and(|lb| {
        lb["provisioning_status"] == "ACTIVE"
            && lb::tags(&lb).iter().any(|t| t.starts_with("cloudgateway_spec_"))
    }) {
        assert!(start.elapsed() < DEADLINE, "the converge of {name} recorded");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_batch_of_reads_costs_two_calls_however_many_services() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("batch");
    let lbs = load_balancers(&client).await;
    let services: Vec<ServiceSpec> = (0..3).map(|_| service(ID_A)).collect();
    let mut statuses = Vec::new();
    for svc in &services {
        statuses.push(ensure(&lbs, &cluster, svc).await.expect("made"));
    }
    for svc in &services {
        wait_recorded(&client, &lbs.load_balancer_name(&cluster, svc)).await;
    }

    // A restarted gateway reads: the three as their ensures start, one changed, one never made
    // (an ensure and a get), and a get of the first.
    let restarted = load_balancers(&client).await;
    let mut changed = services[2].clone();
    changed
        .annotations
        .insert("loadbalancer.openstack.org/connection-limit".into(), "7".into());
    let absent = service(ID_A);
    let read = |svc: &ServiceSpec, ensure: bool| provider::LoadBalancerRead {
        service: svc.clone(),
        ensure_nodes: ensure.then(Vec::new),
    };
    let reads = [
        read(&services[0], true),
        read(&services[1], true),
        read(&changed, true),
        read(&absent, true),
        read(&absent, false),
        read(&services[0], false),
    ];
    let before = lb::calls(&client);
    let answers: Vec<_> = restarted
        .read_load_balancers(&cluster, &reads)
        .await
        .expect("the batch")
        .into_iter()
        .map(|a| a.expect("each read"))
        .collect();
    assert_eq!(
        lb::calls(&client) - before,
        2,
        "one load-balancer list, one floating-IP list"
    );
    assert_eq!(restarted.writes(), 0);
    use provider::LoadBalancerObservation::{Absent, Converged, NeedsEnsure, Present};
    assert_eq!(
        answers,
        vec![
            Converged(statuses[0].clone()),
            Converged(statuses[1].clone()),
            NeedsEnsure,
            NeedsEnsure,
            Absent,
            Present(statuses[0].clone()),
        ]
    );

    for svc in &services {
        delete(&lbs, &cluster, svc).await;
    }
}

/// `n` nodes with InternalIPs on `private` (no server behind them: Octavia takes any address).
fn nodes(n: usize) -> Vec<provider::LoadBalancerNode> {
    (0..n)
        .map(|i| provider::LoadBalancerNode {
            name: format!("node-{i}"),
            provider_id: String::new(),
            addresses: vec![provider::NodeAddress {
                kind: provider::AddressType::InternalIP,
                address: format!("10.0.0.{}", 230 + i),
            }],
            labels: Default::default(),
        })
        .collect()
}

/// Load balancers named `name` and floating IPs described `description` the project has.
async fn held(client: &Client, name: &str, description: &str) -> (usize, usize) {
    let lbs: Value = client
        .get(Service::LoadBalancer, "/lbaas/loadbalancers")
        .query(&[("name", name)])
        .send_json()
        .await
        .expect("load balancers");
    let fips = floating_ips(client, "description", description).await;
    let live = lbs["loadbalancers"].as_array().map_or(0, |l| {
        l.iter()
            .filter(|lb| lb["provisioning_status"] != "DELETED")
            .count()
    });
    (live, fips.len())
}

/// The floating IPs the project has whose `key` is `value`.
async fn floating_ips(client: &Client, key: &str, value: &str) -> Vec<Value> {
    let found: Value = client
        .get(Service::Network, "/floatingips")
        .query(&[(key, value)])
        .send_json()
        .await
        .expect("floating IPs");
    found["floatingips"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_around_any_write_then_a_restart_converges_with_nothing_duplicated_or_leaked() {
    let _turn = cloud().octavia_turn().await;
    let life = Life {
        one: nodes(1),
        two: nodes(2),
        security_groups: None,
    };
    let writes = crash_around_every_write(&life).await;
    assert!(
        writes >= 5,
        "a life writes the load balancer, its floating IP, its marker, its members, and deletes: {writes}"
    );
}

/// The same with `manage-security-groups`: the group, its rules and the member ports' groups
/// are written too, and a crash around any of those writes leaves one group, on exactly the
/// members' ports, and none after the delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_managed_security_groups_a_crash_around_any_write_converges_too() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let (s1, n1) = lb::server_node(cloud(), &client, &cloud().unique_name("crash-node")).await;
    let (s2, n2) = lb::server_node(cloud(), &client, &cloud().unique_name("crash-node")).await;
    let mut both = vec![s1.clone(), s2.clone()];
    both.sort();
    let life = Life {
        one: vec![n1.clone()],
        two: vec![n1, n2],
        security_groups: Some((vec![s1.clone()], both)),
    };
    let writes = crash_around_every_write(&life).await;
    tokio::join!(
        cloud().delete_server(&client, &s1),
        cloud().delete_server(&client, &s2)
    );
    assert!(
        writes >= 10,
        "a life also writes the group, its rules and the two ports, twice: {writes}"
    );
}

/// A Service's life for the crash tests: made on the nodes `one`, a node joins (`two`), deleted.
struct Life {
    one: Vec<provider::LoadBalancerNode>,
    two: Vec<provider::LoadBalancerNode>,
    /// With `manage-security-groups`: the servers whose ports carry the group after the first
    /// ensure and after the second (sorted).
    security_groups: Option<(Vec<String>, Vec<String>)>,
}

/// Lives `life` again and again, the k-th write of the k-th life (before it reaches the cloud,
/// then once more after, losing only its answer) crashing, until a life makes fewer than k
/// writes; after each step exactly what the step asks is in the cloud. The writes of a life.
async fn crash_around_every_write(life: &Life) -> usize {
    use openstack_fixture::proxy::CloudProxy;
    let direct = cloud().client(User::Ccm).await;
    let proxy = CloudProxy::start(cloud()).await;
    let mut credentials = cloud().credentials(User::Ccm);
    credentials.auth_url = proxy.auth_url.clone();
    let through = Client::connect(&credentials)
        .await
        .expect("a client through the proxy");
    let manage = life.security_groups.is_some();

    // Each step is asked again until it is done; a crashed write (a 500) is a gateway that
    // died: the next step is asked of a new provider, which knows only what the cloud holds.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        Ensure1,
        Ensure2,
        Delete,
    }
    let mut k = 1;
    loop {
        for landed in [false, true] {
            let cluster = cloud().unique_name("crash");
            let svc = service(ID_A);
            let name = format!("kube_service_{cluster}_{}_{}", svc.namespace, svc.name);
            let description = format!(
                "Floating IP for Kubernetes external service {}/{} from cluster {cluster}",
                svc.namespace, svc.name
            );
            let group_name = format!("lb-sg-{}-{}-{}", svc.uid, svc.namespace, svc.name);
            proxy.crash_at_write(k, landed);
            let before = proxy.writes();
            let mut lbs = load_balancers_managing_security_groups(&through, manage).await;
            let mut restarts = 0;
            for step in [Step::Ensure1, Step::Ensure2, Step::Delete] {
                let at = format!("{step:?} (crash at write {k}, landed {landed})");
                let start = Instant::now();
                loop {
                    assert!(start.elapsed() < DEADLINE, "{at}");
                    let answer = match step {
                        Step::Ensure1 => lbs
                            .ensure_load_balancer(&cluster, &svc, &life.one)
                            .await
                            .map(drop),
                        Step::Ensure2 => lbs
                            .ensure_load_balancer(&cluster, &svc, &life.two)
                            .await
                            .map(drop),
                        Step::Delete => lbs.ensure_load_balancer_deleted(&cluster, &svc).await,
                    };
                    match answer {
                        Ok(()) => break,
                        // Asked again sooner than the provider says: only the test waits.
                        Err(ProviderError::RetryAfter { after, .. }) => {
                            tokio::time::sleep(after.min(Duration::from_millis(300))).await;
                        }
                        Err(ProviderError::Unavailable(_) | ProviderError::Internal(_)) => {
                            restarts += 1;
                            lbs = load_balancers_managing_security_groups(&through, manage).await;
                        }
                        Err(e) => panic!("{at}: {e}"),
                    }
                }
                let (lb_count, fip_count) = held(&direct, &name, &description).await;
                let groups = security_groups(&direct, &group_name).await;
                let carried = match groups.as_slice() {
                    [(id, _)] => carrying(&direct, id).await,
                    _ => Vec::new(),
                };
                let expected = match (step, &life.security_groups) {
                    (Step::Ensure1, Some((one, _))) => (1, 1, 1, one.clone()),
                    (Step::Ensure2, Some((_, two))) => (1, 1, 1, two.clone()),
                    (Step::Ensure1 | Step::Ensure2, None) => (1, 1, 0, Vec::new()),
                    (Step::Delete, _) => (0, 0, 0, Vec::new()),
                };
                assert_eq!(
                    (lb_count, fip_count, groups.len(), carried),
                    expected,
                    "{at}: load balancers, floating IPs, security groups, the servers carrying it"
                );
            }
            let spent = proxy.writes() - before;
            if proxy.crash_pending() {
                // The life made fewer than k writes: every write has had its crash.
                proxy.crash_at_write(usize::MAX, false);
                eprintln!("{spent} writes in a life, each crashed before and after it landed");
                return spent;
            }
            // The fingerprint's tag write answers nothing to wait for: its crash is only
            // logged, and a later sync writes it again.
            assert!(
                restarts <= 1,
                "one crash, at most one restart (write {k}, landed {landed})"
            );
        }
        k += 1;
    }
}

/// The security groups named `name`: each one's ID and its rules as (direction, protocol, port,
/// remote prefix), sorted.
async fn security_groups(client: &Client, name: &str) -> Vec<(String, Vec<(String, String, u64, String)>)> {
    let found: Value = client
        .get(Service::Network, "/security-groups")
        .query(&[("name", name)])
        .send_json()
        .await
        .expect("security groups");
    let rules = |group: &Value| {
        let mut rules: Vec<(String, String, u64, String)> = group["security_group_rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["direction"].as_str().unwrap_or_default().to_owned(),
                    r["protocol"].as_str().unwrap_or_default().to_owned(),
                    r["port_range_min"].as_u64().unwrap_or_default(),
                    r["remote_ip_prefix"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        rules.sort();
        rules
    };
    found["security_groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| Some((g["id"].as_str()?.to_owned(), rules(g))))
        .collect()
}

/// The one security group named `name`, if any ([`security_groups`]).
async fn security_group(client: &Client, name: &str) -> Option<(String, Vec<(String, String, u64, String)>)> {
    security_groups(client, name).await.into_iter().next()
}

/// The servers whose ports carry security group `id`.
async fn carrying(client: &Client, id: &str) -> Vec<String> {
    let ports: Value = client
        .get(Service::Network, "/ports")
        .query(&[("security_groups", id)])
        .send_json()
        .await
        .expect("ports");
    let mut servers: Vec<String> = ports["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["device_id"].as_str().map(str::to_owned))
        .collect();
    servers.sort();
    servers
}

/// `manage-security-groups` as OCCM manages the group (reference §3.11), with what its users
/// report fixed: the group leaves a departed node's port (OCCM #2695) and goes with the Service
/// when its load balancer is already gone (OCCM leaks it); a converged sync costs no call for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_security_group_follows_the_members_and_goes_with_the_service() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("sg");
    let (s1, n1) = lb::server_node(cloud(), &client, &cloud().unique_name("sg-node")).await;
    let (s2, n2) = lb::server_node(cloud(), &client, &cloud().unique_name("sg-node")).await;
    let lbs = load_balancers_managing_security_groups(&client, true).await;
    let mut svc = service(ID_A);
    svc.external_traffic_policy = ExternalTrafficPolicy::Local;
    svc.health_check_node_port = 32100;
    svc.ports.push(ServicePort {
        name: "dns".into(),
        protocol: Protocol::Udp,
        port: 53,
        node_port: 30053,
    });
    let group_name = format!("lb-sg-{}-{}-{}", svc.uid, svc.namespace, svc.name);
    let subnet = "10.0.0.0/24".to_owned();

    // Made on the first node: the group holds OCCM's rules (no egress), on its port only.
    lb::ensure(&lbs, &cluster, &svc, std::slice::from_ref(&n1), DEADLINE)
        .await
        .expect("made");
    let (id, rules) = security_group(&client, &group_name)
        .await
        .expect("the group made");
    let ingress =
        |protocol: &str, port: u64| ("ingress".to_owned(), protocol.to_owned(), port, subnet.clone());
    assert_eq!(
        rules,
        vec![
            ingress("tcp", 30080),
            ingress("tcp", 32100),
            ingress("udp", 30053)
        ]
    );
    assert_eq!(carrying(&client, &id).await, vec![s1.clone()]);

    // The first node leaves, the second joins: the group moves with the members.
    lb::ensure(&lbs, &cluster, &svc, std::slice::from_ref(&n2), DEADLINE)
        .await
        .expect("converged");
    assert_eq!(
        carrying(&client, &id).await,
        vec![s2.clone()],
        "off the departed node's port"
    );

    // Converged and recorded: an unchanged sync reads no security group.
    let name = lbs.load_balancer_name(&cluster, &svc);
    wait_recorded(&client, &name).await;
    let before = lb::calls(&client);
    lb::ensure(&lbs, &cluster, &svc, std::slice::from_ref(&n2), DEADLINE)
        .await
        .expect("converged");
    assert_eq!(
        lb::calls(&client) - before,
        2,
        "an unchanged sync: the load balancer and its floating IP"
    );

    // The setting turned off: the group goes (as OCCM), and comes back when turned on again.
    let off = load_balancers_managing_security_groups(&client, false).await;
    lb::ensure(&off, &cluster, &svc, std::slice::from_ref(&n2), DEADLINE)
        .await
        .expect("converged");
    assert!(
        security_group(&client, &group_name).await.is_none(),
        "deleted with the setting off"
    );
    lb::ensure(&lbs, &cluster, &svc, std::slice::from_ref(&n2), DEADLINE)
        .await
        .expect("converged");
    let (id, _) = security_group(&client, &group_name).await.expect("made again");
    assert_eq!(carrying(&client, &id).await, vec![s2.clone()]);

    // The load balancer deleted by hand, then the Service: the group still goes.
    let lb = octavia_lb(&client, &name).await.expect("the load balancer");
    let lb_id = lb["id"].as_str().expect("id").to_owned();
    wait_recorded(&client, &name).await;
    client
        .delete(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{lb_id}"))
        .query(&[("cascade", "true")])
        .send_empty()
        .await
        .expect("deleted by hand");
    delete(&lbs, &cluster, &svc).await;
    assert!(
        security_group(&client, &group_name).await.is_none(),
        "no group left"
    );
    assert!(carrying(&client, &id).await.is_empty());
    tokio::join!(
        cloud().delete_server(&client, &s1),
        cloud().delete_server(&client, &s2)
    );
}

/// Makes a subnet `name` of `public` for project ccm (through an admin client) on the first free /28 of
/// 198.18.0.0/16, tagged `tags`; returns its ID and CIDR.
async fn public_subnet(admin: &Client, name: &str, tags: &[&str]) -> (String, ipnet::Ipv4Net) {
    let start = std::process::id() % 4000;
    for step in 0..4096u32 {
        let n = (start + step) % 4096;
        let cidr = ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(0xc612_0000u32 + n * 16), 28).expect("a /28");
        let made: Result<Value, _> = admin
            .post(Service::Network, "/subnets")
            .json(&serde_json::json!({"subnet": {
                // Owned by ccm: Neutron shows a project no subnet of an external network it
                // does not own (unless shared), so OCCM's matching needs such a subnet too.
                "project_id": cloud().info.ids.project_ccm,
                "name": name, "network_id": cloud().info.ids.network_public,
                "ip_version": 4, "cidr": cidr.to_string(), "enable_dhcp": false}}))
            .send_json_field("subnet")
            .await;
        match made {
            Ok(subnet) => {
                let id = subnet["id"].as_str().expect("an id").to_owned();
                for tag in tags {
                    admin
                        .put(Service::Network, &format!("/subnets/{id}/tags/{tag}"))
                        .send_empty()
                        .await
                        .expect("tag the subnet");
                }
                return (id, cidr);
            }
            // Another run's subnet overlaps: the next /28.
            Err(e) if e.message.contains("overlap") => continue,
            Err(e) => panic!("subnet {name}: {e}"),
        }
    }
    panic!("no free /28 in 198.18.0.0/16 on public")
}

/// `floating-subnet` (a glob, a `~regex`) and `floating-subnet-tags` choose the floating IP's
/// subnet among the floating network's, as OCCM chooses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floating_subnet_is_chosen_by_name_pattern_or_tags() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let admin = cloud().admin().await;
    let cluster = cloud().unique_name("fipsub");
    let suffix = cloud().unique_name("s");
    let tag = format!("pick-{suffix}");
    let (a, cidr_a) = public_subnet(&admin, &format!("fipsub-a-{suffix}"), &[&tag]).await;
    let (b, cidr_b) = public_subnet(&admin, &format!("fipsub-b-{suffix}"), &[]).await;
    let lbs = load_balancers(&client).await;

    const PATTERN: &str = "loadbalancer.openstack.org/floating-subnet";
    const TAGS: &str = "loadbalancer.openstack.org/floating-subnet-tags";
    let cases = [
        (vec![(PATTERN, format!("fipsub-b-{suffix}"))], cidr_b),
        (vec![(PATTERN, format!("~fipsub-[a]-{suffix}"))], cidr_a),
        (vec![(TAGS, tag.clone())], cidr_a),
        // By ID, as before patterns.
        (
            vec![("loadbalancer.openstack.org/floating-subnet-id", b.clone())],
            cidr_b,
        ),
        // Both: the name narrows to this run's two, the negated tag to B.
        (
            vec![(PATTERN, format!("fipsub-*-{suffix}")), (TAGS, format!("!{tag}"))],
            cidr_b,
        ),
    ];
    let mut services = Vec::new();
    for (annotations, cidr) in &cases {
        let mut svc = service(ID_A);
        for (key, value) in annotations {
            svc.annotations.insert((*key).to_owned(), value.clone());
        }
        let status = ensure(&lbs, &cluster, &svc).await.expect("ensured");
        let address: std::net::Ipv4Addr = status.ingress[0].ip.parse().expect("an IPv4 address");
        assert!(
            cidr.contains(&address),
            "{annotations:?}: {address} is not in {cidr}"
        );
        services.push(svc);
    }
    // Nothing matches: an error naming the pattern; the load balancer is made, its address waits.
    let mut none = service(ID_A);
    none.annotations.insert(
        "loadbalancer.openstack.org/floating-subnet".into(),
        format!("fipsub-none-{suffix}"),
    );
    match ensure(&lbs, &cluster, &none).await {
        Err(ProviderError::InvalidArgument(m)) => {
            assert!(m.contains(&format!("fipsub-none-{suffix}")), "{m}")
        }
        other => panic!("no matching subnet: {other:?}"),
    }
    services.push(none);
    for svc in &services {
        delete(&lbs, &cluster, svc).await;
    }
    for subnet in [a, b] {
        admin
            .delete(Service::Network, &format!("/subnets/{subnet}"))
            .send_empty()
            .await
            .expect("delete the subnet");
    }
}

/// A Service joins another's load balancer through `load-balancer-id` (OCCM's shared load
/// balancers): its own listener and tag, the owner's floating IP; `max-shared-lb` bounds them;
/// leaving takes only what is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_shares_another_services_load_balancer_and_leaves_only_its_own() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("share");
    let lbs = load_balancers(&client).await;
    let owner = service(ID_A);
    let status = ensure(&lbs, &cluster, &owner).await.expect("the owner's");
    let name = lbs.load_balancer_name(&cluster, &owner);
    let lb_id = octavia_lb(&client, &name).await.expect("made")["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let joining = |port: u16| {
        let mut svc = service(ID_A);
        svc.ports[0].port = port;
        svc.annotations.insert(
            "loadbalancer.openstack.org/load-balancer-id".into(),
            lb_id.clone(),
        );
        svc
    };

    // Joined: the owner's address, a listener of its own, its name on the load balancer.
    let joiner = joining(8080);
    assert_eq!(ensure(&lbs, &cluster, &joiner).await.expect("joined"), status);
    let joiner_name = lbs.load_balancer_name(&cluster, &joiner);
    let lb = octavia_lb(&client, &name).await.expect("there");
    assert!(lb::tags(&lb).contains(&joiner_name), "{lb}");
    assert_eq!(lb["listeners"].as_array().map(Vec::len), Some(2), "{lb}");

    // A third Service is one too many (max-shared-lb 2), an internal one never joins.
    let third = joining(9080);
    match ensure(&lbs, &cluster, &third).await {
        Err(ProviderError::InvalidArgument(m)) => assert!(m.contains("max-shared-lb"), "{m}"),
        other => panic!("a third Service: {other:?}"),
    }
    let internal = lb::with(joining(9090), lb::INTERNAL);
    match ensure(&lbs, &cluster, &internal).await {
        Err(ProviderError::InvalidArgument(m)) => assert!(m.contains("internal"), "{m}"),
        other => panic!("an internal Service: {other:?}"),
    }

    // Leaving: its listener and tag go, the owner's stay.
    delete(&lbs, &cluster, &joiner).await;
    let lb = octavia_lb(&client, &name).await.expect("the owner's stays");
    assert!(!lb::tags(&lb).contains(&joiner_name), "{lb}");
    assert_eq!(lb["listeners"].as_array().map(Vec::len), Some(1), "{lb}");
    assert_eq!(ensure(&lbs, &cluster, &owner).await.expect("unchanged"), status);
    delete(&lbs, &cluster, &owner).await;
    assert!(octavia_lb(&client, &name).await.is_none());
}

/// The names of the members of the load balancer's first pool, sorted.
async fn member_names(client: &Client, lb: &Value) -> Vec<String> {
    let pool = lb["pools"][0]["id"].as_str().expect("a pool");
    let found: Value = client
        .get(Service::LoadBalancer, &format!("/lbaas/pools/{pool}/members"))
        .send_json()
        .await
        .expect("members");
    let mut names: Vec<String> = found["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// `provider-requires-serial-api-calls`: the load balancer made alone, then its listener, pool
/// and members one call each, named as OCCM names them; a node joining is one member create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_api_calls_build_the_load_balancer_one_object_at_a_time() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("serial");
    let settings = LoadBalancerSettings {
        provider_requires_serial_api_calls: true,
        ..lb::settings(cloud())
    };
    let lbs = lb::provider(cloud(), &client, settings).await.expect("provider");
    let svc = service(ID_A);
    lb::ensure(&lbs, &cluster, &svc, &nodes(2), DEADLINE)
        .await
        .expect("made");
    let writes = lbs.writes();
    let name = lbs.load_balancer_name(&cluster, &svc);
    let lb = octavia_lb(&client, &name).await.expect("made");
    assert_eq!(
        member_names(&client, &lb).await,
        vec!["member_node-0_10.0.0.230_30080", "member_node-1_10.0.0.231_30080"]
    );
    // Create, listener, pool, two members, the floating IP, its tag, the marker.
    assert!(writes >= 6, "one call per object: {writes} writes");
    lb::ensure(&lbs, &cluster, &svc, &nodes(3), DEADLINE)
        .await
        .expect("a third node");
    let lb = octavia_lb(&client, &name).await.expect("there");
    assert_eq!(member_names(&client, &lb).await.len(), 3);
    delete(&lbs, &cluster, &svc).await;
}

/// A load balancer Octavia leaves pending is told to the operator: once the Service has made
/// no progress for the limit (shortened here; 10 minutes by default), its sync fails naming the
/// load balancer (a Warning event), and converges once Octavia is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_octavia_leaves_pending_fails_its_sync_naming_it() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("stall");
    let lbs = load_balancers(&client)
        .await
        .with_stall_after(Duration::from_secs(2));
    let svc = service(ID_A);
    // Every Octavia write held for 8 s (the test cloud's glue), so the create stays pending.
    struct Delay(std::path::PathBuf);
    impl Drop for Delay {
        // Also when the test fails: the other tests get an Octavia without delay.
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let delay = Delay(cloud().dir.join("octavia-delay-s"));
    std::fs::write(&delay.0, "8").expect("delay Octavia");
    let start = Instant::now();
    let stalled = loop {
        match lbs.ensure_load_balancer(&cluster, &svc, &[]).await {
            Err(ProviderError::RetryAfter { .. }) => {
                assert!(start.elapsed() < DEADLINE, "never reported");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(ProviderError::Internal(m)) => break m,
            other => panic!("the pending load balancer: {other:?}"),
        }
    };
    drop(delay);
    let name = lbs.load_balancer_name(&cluster, &svc);
    assert!(
        stalled.contains("no progress") && stalled.contains(&name) && stalled.contains("PENDING_"),
        "{stalled}"
    );
    // Synced again (the service controller's backoff): converged once Octavia is done.
    let start = Instant::now();
    loop {
        match ensure(&lbs, &cluster, &svc).await {
            Ok(_) => break,
            Err(ProviderError::Internal(m)) if m.contains("no progress") => {
                assert!(start.elapsed() < DEADLINE, "never converged: {m}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("after the stall: {e}"),
        }
    }
    delete(&lbs, &cluster, &svc).await;
}

/// The listeners, pools, members and monitors of the load balancer named `name`, as Octavia
/// holds them.
async fn octavia_children(client: &Client, lb: &Value) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let get = |path: String, key: &'static str| {
        let client = client.clone();
        async move {
            let found: Value = client
                .get(Service::LoadBalancer, &path)
                .send_json()
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            found[key].as_array().cloned().unwrap_or_default()
        }
    };
    let id = lb["id"].as_str().expect("an id");
    let listeners = get(format!("/lbaas/listeners?loadbalancer_id={id}"), "listeners").await;
    let pools = get(format!("/lbaas/pools?loadbalancer_id={id}"), "pools").await;
    let mut members = Vec::new();
    for pool in &pools {
        let pool_id = pool["id"].as_str().expect("a pool id");
        members.extend(get(format!("/lbaas/pools/{pool_id}/members"), "members").await);
    }
    (listeners, pools, members)
}

/// The annotations that shape a load balancer, on the real Octavia: each lands where OCCM puts
/// it, and a load balancer built with all of them converges (a fresh gateway's full read of it
/// plans no write, so no field Octavia stores in its own form makes the sync write forever).
/// What the test cloud cannot show: traffic (no data plane, no health checks run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shaping_annotation_lands_where_occm_puts_it_and_converges() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("shape");
    let lbs = load_balancers(&client).await;
    let annotate = |svc: &mut ServiceSpec, pairs: &[(&str, &str)]| {
        for (k, v) in pairs {
            svc.annotations
                .insert(format!("loadbalancer.openstack.org/{k}"), (*v).to_owned());
        }
    };
    // External: listener, pool and monitor settings, source ranges, session affinity.
    let mut external = service(ID_A);
    annotate(
        &mut external,
        &[
            ("connection-limit", "100"),
            ("timeout-client-data", "60000"),
            ("timeout-member-connect", "6000"),
            ("timeout-member-data", "70000"),
            ("timeout-tcp-inspect", "10"),
            ("lb-method", "SOURCE_IP"),
            ("x-forwarded-for", "true"),
            ("enable-health-monitor", "true"),
            ("health-monitor-delay", "7"),
            ("health-monitor-timeout", "4"),
            ("health-monitor-max-retries", "2"),
            ("health-monitor-max-retries-down", "4"),
            ("keep-floatingip", "true"),
        ],
    );
    external.source_ranges = vec!["10.0.0.0/8".into(), "192.168.0.0/16".into()];
    external.session_affinity_client_ip = true;
    // Internal: PROXY v2, member subnet, node selector, hostname.
    let mut internal = lb::with(service(ID_A), lb::INTERNAL);
    let subnet = cloud().info.ids.subnet_private.clone();
    annotate(
        &mut internal,
        &[
            ("proxy-protocol", "v2"),
            ("member-subnet-id", &subnet),
            ("node-selector", "role=web"),
        ],
    );
    let mut on = nodes(3);
    on[1].labels.insert("role".into(), "web".into());

    let ext_status = lb::ensure(&lbs, &cluster, &external, &on, DEADLINE)
        .await
        .expect("external");
    let int_status = lb::ensure(&lbs, &cluster, &internal, &on, DEADLINE)
        .await
        .expect("internal");

    let ext = octavia_lb(&client, &lbs.load_balancer_name(&cluster, &external))
        .await
        .expect("made");
    let (listeners, pools, members) = octavia_children(&client, &ext).await;
    let l = &listeners[0];
    assert_eq!(
        (l["protocol"].as_str(), l["connection_limit"].as_i64()),
        (Some("HTTP"), Some(100)),
        "{l}"
    );
    assert_eq!(l["insert_headers"]["X-Forwarded-For"], "true", "{l}");
    assert_eq!(
        [
            &l["timeout_client_data"],
            &l["timeout_member_connect"],
            &l["timeout_member_data"],
            &l["timeout_tcp_inspect"]
        ],
        [60000, 6000, 70000, 10],
        "{l}"
    );
    let mut cidrs: Vec<&str> = l["allowed_cidrs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    cidrs.sort_unstable();
    assert_eq!(cidrs, vec!["10.0.0.0/8", "192.168.0.0/16"], "{l}");
    let p = &pools[0];
    assert_eq!(
        (
            p["protocol"].as_str(),
            p["lb_algorithm"].as_str(),
            p["session_persistence"]["type"].as_str()
        ),
        (Some("HTTP"), Some("SOURCE_IP"), Some("SOURCE_IP")),
        "{p}"
    );
    let monitor_id = p["healthmonitor_id"].as_str().expect("a monitor");
    let hm: Value = client
        .get(
            Service::LoadBalancer,
            &format!("/lbaas/healthmonitors/{monitor_id}"),
        )
        .send_json_field("healthmonitor")
        .await
        .expect("the monitor");
    assert_eq!(
        [
            &hm["delay"],
            &hm["timeout"],
            &hm["max_retries"],
            &hm["max_retries_down"]
        ],
        [7, 4, 2, 4],
        "{hm}"
    );
    assert_eq!(members.len(), 3, "every node");

    let int = octavia_lb(&client, &lbs.load_balancer_name(&cluster, &internal))
        .await
        .expect("made");
    let (_, pools, members) = octavia_children(&client, &int).await;
    assert_eq!(pools[0]["protocol"], "PROXYV2", "{}", pools[0]);
    assert_eq!(members.len(), 1, "the node with role=web only: {members:?}");
    assert_eq!(
        (members[0]["address"].as_str(), members[0]["subnet_id"].as_str()),
        (Some("10.0.0.231"), Some(subnet.as_str()))
    );
    let ingress = &int_status.ingress[0];
    assert_eq!(
        (ingress.ip.as_str(), ingress.ip_mode.as_str()),
        (int["vip_address"].as_str().unwrap_or_default(), "Proxy"),
        "internal: the VIP, PROXY: ipMode Proxy"
    );

    // A fresh gateway reads both in full (their converge markers taken off by hand) and plans
    // nothing but recording the converge again.
    for svc in [&external, &internal] {
        let name = lbs.load_balancer_name(&cluster, svc);
        wait_recorded(&client, &name).await;
        let lb = octavia_lb(&client, &name).await.expect("there");
        let unmarked: Vec<String> = lb::tags(&lb)
            .into_iter()
            .filter(|t| !t.starts_with("cloudgateway_spec_"))
            .collect();
        client
            .put(
                Service::LoadBalancer,
                &format!("/lbaas/loadbalancers/{}", lb["id"].as_str().unwrap()),
            )
            .json(&serde_json::json!({"loadbalancer": {"tags": unmarked}}))
            .send_empty()
            .await
            .expect("the marker taken off");
        let start = Instant::now();
        while octavia_lb(&client, &name)
            .await
            .is_none_or(|lb| lb["provisioning_status"] != "ACTIVE")
        {
            assert!(start.elapsed() < DEADLINE, "ACTIVE again");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let fresh = load_balancers(&client).await;
    for (svc, status) in [(&external, &ext_status), (&internal, &int_status)] {
        let (again, woulds) = provider::dry_run::scope(fresh.ensure_load_balancer(&cluster, svc, &on)).await;
        assert_eq!(&again.expect("converged"), status);
        assert!(
            woulds.iter().all(|w| w.request.contains("cloudgateway_spec_")),
            "{}: a full read plans only the converge marker: {woulds:?}",
            svc.name
        );
    }

    // keep-floatingip: the floating IP outlives the load balancer.
    let fip = ext_status.ingress[0].ip.clone();
    for svc in [&external, &internal] {
        delete(&lbs, &cluster, svc).await;
    }
    let kept = floating_ips(&client, "floating_ip_address", &fip).await;
    assert_eq!(kept.len(), 1, "keep-floatingip kept {fip}");
    client
        .delete(
            Service::Network,
            &format!("/floatingips/{}", kept[0]["id"].as_str().unwrap()),
        )
        .send_empty()
        .await
        .expect("clean up the kept floating IP");
}

/// A security-group rule sent by a sync that gave up waiting (its request timed out) lands after
/// a later sync read the group: that later sync must not record the converge, or the late rule
/// stays, trusted, until the next full read ten minutes on. Found by `make chaos`: a Service
/// edited from two ports to one kept the removed node port's rule, as the test cloud's Neutron,
/// loaded, committed rules 40–75 s after they were sent. Here without members, so that a node
/// port changes the group alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_landing_after_its_client_gave_up_is_repaired_not_trusted_away() {
    // The provider's request timeout here, and how long after it was sent the rule lands: later
    // than the timeout, within the two timeouts the provider watches a write without an answer,
    // and with 8 s between for the edit back to be read and answered (3 s was too few on a
    // loaded CI machine).
    const LATE_TIMEOUT: Duration = Duration::from_secs(10);
    const LATE_BY: Duration = Duration::from_secs(18);
    use openstack_fixture::proxy::CloudProxy;
    let _turn = cloud().octavia_turn().await;
    let direct = cloud().client(User::Ccm).await;
    let proxy = CloudProxy::start(cloud()).await;
    let mut credentials = cloud().credentials(User::Ccm);
    credentials.auth_url = proxy.auth_url.clone();
    credentials.request_timeout = LATE_TIMEOUT;
    let through = Client::connect(&credentials)
        .await
        .expect("a client through the proxy");
    let lbs = load_balancers_managing_security_groups(&through, true).await;
    let cluster = cloud().unique_name("late");
    let first = service(ID_A);
    let group_name = format!("lb-sg-{}-{}-{}", first.uid, first.namespace, first.name);
    let ingress_ports = |rules: Vec<(String, String, u64, String)>| -> Vec<u64> {
        rules
            .into_iter()
            .filter(|r| r.0 == "ingress")
            .map(|r| r.2)
            .collect()
    };
    let held_ports = || async {
        let (_, rules) = security_group(&direct, &group_name).await.expect("the group");
        ingress_ports(rules)
    };
    ensure(&lbs, &cluster, &first).await.expect("made");
    assert_eq!(held_ports().await, vec![30080]);

    // The node port changes; the rule for the new one reaches Neutron LATE_BY after it was sent,
    // past the provider's timeout: that sync fails, not knowing whether the rule will be made.
    let mut moved = first.clone();
    moved.ports[0].node_port = 30090;
    proxy.land_late("/security-group-rules", LATE_BY);
    // Before the rule is sent, so that an edit back answered within LATE_BY of it was answered
    // before the rule landed.
    let gave_up = Instant::now();
    match lbs.ensure_load_balancer(&cluster, &moved, &[]).await {
        Err(ProviderError::Unavailable(_) | ProviderError::Internal(_)) => {}
        other => panic!("the rule's write timed out, so the sync fails: {other:?}"),
    }
    assert!(!proxy.late_pending(), "the late write was the rule's");

    // Edited back before the rule lands: the group already reads as asked, and the load
    // balancer's marker is the first request's.
    assert_eq!(held_ports().await, vec![30080], "not landed yet");
    let answer = lbs.ensure_load_balancer(&cluster, &first, &[]).await;
    assert!(
        gave_up.elapsed() < LATE_BY,
        "the test is too slow to read before the rule lands"
    );
    match answer {
        Err(ProviderError::RetryAfter { message, .. }) => {
            assert!(message.contains("may still land"), "{message}");
        }
        other => panic!("a sync while a write may still land records nothing: {other:?}"),
    }
    let deadline = Instant::now() + DEADLINE;
    while held_ports().await != vec![30080, 30090] {
        assert!(Instant::now() < deadline, "the late rule never landed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure(&lbs, &cluster, &first).await.expect("converged");
    assert_eq!(
        held_ports().await,
        vec![30080],
        "the rule that landed late is removed, not trusted away"
    );
    // Cleaned up without the short timeout.
    let lbs = load_balancers_managing_security_groups(&direct, true).await;
    delete(&lbs, &cluster, &first).await;
}
