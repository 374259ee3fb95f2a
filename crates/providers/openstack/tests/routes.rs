//! `OpenStackRoutes` against the real test cloud (Neutron and Nova of Zed, see
//! `openstack-fixture`): routes on the shared `router1`, each test with its own cluster name,
//! servers and pod CIDRs, asserting only about its own routes (the router is shared by every
//! test, so its route list is never counted whole).
//!
//! Neutron's `max_routes` is 30 per router (the test cloud keeps the default): a test holds at
//! most 3 routes at a time and removes them before it ends.

use std::{
    collections::BTreeSet,
    hash::{DefaultHasher, Hash, Hasher},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use openstack_fixture::{TestCloud, User};
use provider::{AddressType, NodeAddress, ProviderError, Route, Routes, dry_run};
use provider_openstack::{
    client::{Client, Service},
    nodes::ProviderIdScheme,
    routes::{
        ConditionalWrite, OpenStackRoutes,
        plan::{ExtraRoute, Router, ownership_tag},
    },
};
use serde_json::{Value, json};

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

fn scheme() -> ProviderIdScheme {
    ProviderIdScheme {
        region: cloud().info.region.clone(),
        regional: false,
    }
}

fn router_id() -> String {
    cloud().info.ids.router1.clone()
}

async fn routes(client: &Client) -> OpenStackRoutes {
    OpenStackRoutes::discover(client.clone(), router_id(), scheme())
        .await
        .expect("discover")
}

/// A server booted as the CCM's user on `private`, with its port and addresses.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    name: String,
    ipv4: String,
    ipv6: Option<String>,
    port_id: String,
}

async fn boot(client: &Client, prefix: &str) -> Node {
    let cloud = cloud();
    let name = cloud.unique_name(prefix);
    let id = cloud.boot_server(client, &name, "m1.tiny", "private").await;
    let ports: Value = client
        .get(Service::Network, "/ports")
        .query(&[("device_id", id.as_str())])
        .send_json()
        .await
        .expect("the server's ports");
    let port = &ports["ports"][0];
    let ipv4 = port["fixed_ips"]
        .as_array()
        .expect("fixed_ips")
        .iter()
        .filter_map(|ip| ip["ip_address"].as_str())
        .find(|ip| !ip.contains(':'))
        .expect("an IPv4 address")
        .to_owned();
    let ipv6 = port["fixed_ips"]
        .as_array()
        .expect("fixed_ips")
        .iter()
        .filter_map(|ip| ip["ip_address"].as_str())
        .find(|ip| ip.contains(':'))
        .map(str::to_owned);
    Node {
        id,
        name,
        ipv4,
        ipv6,
        port_id: port["id"].as_str().expect("port id").to_owned(),
    }
}

/// The route the route controller asks for: the node's name, providerID and InternalIP.
fn route_to(node: &Node, cidr: &str) -> Route {
    Route {
        name: String::new(),
        target_node: node.name.clone(),
        destination_cidr: cidr.to_owned(),
        blackhole: false,
        target_node_addresses: vec![
            NodeAddress::new(AddressType::Hostname, node.name.clone()),
            NodeAddress::new(AddressType::InternalIP, node.ipv4.clone()),
        ]
        .into_iter()
        .chain(
            node.ipv6
                .iter()
                .map(|ip| NodeAddress::new(AddressType::InternalIP, ip.clone())),
        )
        .collect(),
        target_provider_id: format!("openstack:///{}", node.id),
    }
}

/// Pod CIDRs of a cluster: `10.<100..199>.<4k+i>.0/24` from its name, so that tests running at
/// the same time use different destinations (they would not clash anyway: nexthops differ).
fn cidr(cluster: &str, i: u8) -> String {
    let mut h = DefaultHasher::new();
    cluster.hash(&mut h);
    let h = h.finish();
    format!("10.{}.{}.0/24", 100 + h % 100, (h >> 8) % 60 * 4 + u64::from(i))
}

async fn router(client: &Client) -> Router {
    let body: Value = client
        .get(Service::Network, &format!("/routers/{}", router_id()))
        .send_json()
        .await
        .expect("router GET");
    serde_json::from_value(body["router"].clone()).expect("router view")
}

/// `router1`'s routes to `cidr` and this cluster's tags for it.
async fn on_router(client: &Client, cluster: &str, cidr: &str) -> (Vec<ExtraRoute>, Vec<String>) {
    let r = router(client).await;
    let prefix = format!("kube-route:{cluster}:{}:", cidr.replace('/', "_"));
    (
        r.routes.into_iter().filter(|x| x.destination == cidr).collect(),
        r.tags.into_iter().filter(|t| t.starts_with(&prefix)).collect(),
    )
}

async fn pairs(client: &Client, port_id: &str) -> Vec<String> {
    let body: Value = client
        .get(Service::Network, &format!("/ports/{port_id}"))
        .send_json()
        .await
        .expect("port GET");
    body["port"]["allowed_address_pairs"]
        .as_array()
        .expect("pairs")
        .iter()
        .map(|p| p["ip_address"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn add_route_by_hand(client: &Client, route: &ExtraRoute) {
    client
        .put(
            Service::Network,
            &format!("/routers/{}/add_extraroutes", router_id()),
        )
        .json(&json!({"router": {"routes": [route]}}))
        .send_empty()
        .await
        .expect("add_extraroutes");
}

async fn remove_route_by_hand(client: &Client, route: &ExtraRoute) {
    client
        .put(
            Service::Network,
            &format!("/routers/{}/remove_extraroutes", router_id()),
        )
        .json(&json!({"router": {"routes": [route]}}))
        .send_empty()
        .await
        .expect("remove_extraroutes");
}

async fn add_tag_by_hand(client: &Client, tag: &str) {
    client
        .put(Service::Network, &format!("/routers/{}/tags/{tag}", router_id()))
        .send_empty()
        .await
        .expect("tag PUT");
}

async fn set_pairs_by_hand(client: &Client, port_id: &str, pairs: &[&str]) {
    let pairs: Vec<Value> = pairs.iter().map(|p| json!({"ip_address": p})).collect();
    client
        .put(Service::Network, &format!("/ports/{port_id}"))
        .json(&json!({"port": {"allowed_address_pairs": pairs}}))
        .send_empty()
        .await
        .expect("port PUT");
}

fn own<'a>(listed: &'a [Route], cidr: &str) -> Vec<&'a Route> {
    listed.iter().filter(|r| r.destination_cidr == cidr).collect()
}

fn network_calls(client: &Client) -> (u64, u64) {
    let counts = client.request_counts();
    let sum = |s: Service| {
        counts
            .iter()
            .filter(|((svc, _), _)| *svc == s)
            .map(|(_, n)| *n)
            .sum()
    };
    (sum(Service::Network), sum(Service::Compute))
}

/// Calls made by `f`, as (Neutron, Nova).
async fn calls<T>(client: &Client, f: impl Future<Output = T>) -> (T, (u64, u64)) {
    let before = network_calls(client);
    let out = f.await;
    let after = network_calls(client);
    (out, (after.0 - before.0, after.1 - before.1))
}

#[tokio::test]
async fn discover_learns_the_extensions_and_checks_the_router() {
    let client = cloud().client(User::Ccm).await;
    let (r, (neutron, nova)) = calls(&client, routes(&client)).await;
    let f = r.features();
    assert!(f.atomic && f.allowed_address_pairs && f.if_match, "{f:?}");
    assert_eq!((neutron, nova), (2, 0), "GET /extensions and the router GET");
    assert_eq!(r.router_id(), router_id());

    let missing = "00000000-0000-0000-0000-000000000000";
    match OpenStackRoutes::discover(client.clone(), missing.into(), scheme()).await {
        Err(ProviderError::InvalidArgument(m)) => {
            assert!(m.contains(missing) && m.contains("router-id"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        OpenStackRoutes::discover(client, " ".into(), scheme()).await,
        Err(ProviderError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn create_list_delete_and_again() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let node = boot(&client, "rt-node").await;
    let cluster = cloud.unique_name("rt-basic");
    let cidr = cidr(&cluster, 0);
    let r = routes(&client).await;
    let want = route_to(&node, &cidr);
    let extra = ExtraRoute::new(&cidr, &node.ipv4);

    // Cold create: router GET, port GET, tag PUT, add_extraroutes PUT, port PUT.
    let (created, (neutron, nova)) = calls(&client, r.create_route(&cluster, "uid-1", &want)).await;
    created.expect("create");
    assert_eq!((neutron, nova), (5, 0));
    let (on, tags) = on_router(&client, &cluster, &cidr).await;
    assert_eq!(on, vec![extra.clone()]);
    assert_eq!(tags, [ownership_tag(&cluster, &extra)]);
    assert_eq!(pairs(&client, &node.port_id).await, vec![cidr.clone()]);

    let listed = r.list_routes(&cluster).await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let l = &listed[0];
    assert_eq!(l.name, cidr);
    assert_eq!(l.destination_cidr, cidr);
    assert_eq!(l.target_node, node.name);
    assert_eq!(l.target_provider_id, format!("openstack:///{}", node.id));
    assert!(!l.blackhole);
    assert_eq!(
        l.target_node_addresses,
        [NodeAddress::new(AddressType::InternalIP, node.ipv4.clone())]
    );

    // Create again: two reads, no write; still one route, one tag, one pair.
    let (again, (neutron, nova)) = calls(&client, r.create_route(&cluster, "uid-1", &want)).await;
    again.expect("create again");
    assert_eq!((neutron, nova), (2, 0), "router GET and port GET only");
    let (on, tags) = on_router(&client, &cluster, &cidr).await;
    assert_eq!((on.len(), tags.len()), (1, 1));
    assert_eq!(pairs(&client, &node.port_id).await, vec![cidr.clone()]);

    // Delete the route as listed: route, pair, tag gone.
    let (deleted, (neutron, _)) = calls(&client, r.delete_route(&cluster, l)).await;
    deleted.expect("delete");
    assert_eq!(
        neutron, 5,
        "router GET, remove_extraroutes, port GET, port PUT, tag DELETE"
    );
    assert_eq!(on_router(&client, &cluster, &cidr).await, (vec![], vec![]));
    assert!(pairs(&client, &node.port_id).await.is_empty());
    assert!(r.list_routes(&cluster).await.unwrap().is_empty());

    // Delete again: one read, nothing to do.
    let (again, (neutron, _)) = calls(&client, r.delete_route(&cluster, l)).await;
    again.expect("delete again");
    assert_eq!(neutron, 1);
    cloud.delete_server(&client, &node.id).await;
}

#[tokio::test]
async fn list_routes_is_two_neutron_calls_in_steady_state() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let (a, b) = tokio::join!(boot(&client, "rt-count-a"), boot(&client, "rt-count-b"));
    let cluster = cloud.unique_name("rt-count");
    let writer = routes(&client).await;
    for (i, node) in [&a, &b].into_iter().enumerate() {
        writer
            .create_route(&cluster, "uid", &route_to(node, &cidr(&cluster, i as u8)))
            .await
            .expect("create");
    }

    // A new instance knows no server names: one Nova list for the two.
    let r = routes(&client).await;
    let (listed, cold) = calls(&client, r.list_routes(&cluster)).await;
    let listed = listed.expect("cold list");
    assert_eq!(cold, (2, 1), "router GET, one port list; one Nova list");
    let names: BTreeSet<&str> = listed.iter().map(|r| r.target_node.as_str()).collect();
    assert_eq!(names, BTreeSet::from([a.name.as_str(), b.name.as_str()]));

    for _ in 0..3 {
        let (listed, steady) = calls(&client, r.list_routes(&cluster)).await;
        assert_eq!(listed.expect("list").len(), 2);
        assert_eq!(steady, (2, 0), "router GET and one port list for both nexthops");
    }

    // A cluster with no route: the router GET alone.
    let (none, (neutron, nova)) = calls(&client, r.list_routes(&cloud.unique_name("rt-empty"))).await;
    assert!(none.unwrap().is_empty());
    assert_eq!((neutron, nova), (1, 0));

    for l in r.list_routes(&cluster).await.unwrap() {
        r.delete_route(&cluster, &l).await.expect("delete");
    }
    assert!(r.list_routes(&cluster).await.unwrap().is_empty());
    tokio::join!(
        cloud.delete_server(&client, &a.id),
        cloud.delete_server(&client, &b.id)
    );
}

/// OCCM #3128: two clusters on one router with overlapping cluster CIDRs.
#[tokio::test]
async fn two_clusters_with_the_same_destination_keep_their_own() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let (n1, n2) = tokio::join!(boot(&client, "rt-two-1"), boot(&client, "rt-two-2"));
    let (ca, cb) = (cloud.unique_name("rt-two-a"), cloud.unique_name("rt-two-b"));
    let shared_cidr = cidr(&ca, 0);
    let r = routes(&client).await;

    // Same destination, each cluster's own node.
    r.create_route(&ca, "uid-a", &route_to(&n1, &shared_cidr))
        .await
        .expect("a");
    r.create_route(&cb, "uid-b", &route_to(&n2, &shared_cidr))
        .await
        .expect("b");
    let la = r.list_routes(&ca).await.unwrap();
    let lb = r.list_routes(&cb).await.unwrap();
    assert_eq!(la.len(), 1, "{la:?}");
    assert_eq!(lb.len(), 1, "{lb:?}");
    assert_eq!(la[0].target_node, n1.name);
    assert_eq!(lb[0].target_node, n2.name);

    r.delete_route(&ca, &la[0]).await.expect("delete a");
    assert!(r.list_routes(&ca).await.unwrap().is_empty());
    assert_eq!(r.list_routes(&cb).await.unwrap(), lb, "b's route untouched");
    let (on, tags) = on_router(&client, &cb, &shared_cidr).await;
    assert_eq!(on, [ExtraRoute::new(&shared_cidr, &n2.ipv4)]);
    assert_eq!(tags.len(), 1);
    assert_eq!(pairs(&client, &n2.port_id).await, vec![shared_cidr.clone()]);
    assert!(pairs(&client, &n1.port_id).await.is_empty());

    // The very same route (same node) wanted by both: one route, one pair, two tags; each
    // delete takes only its tag until the last one.
    r.create_route(&ca, "uid-a", &route_to(&n2, &shared_cidr))
        .await
        .expect("a on n2");
    let (on, _) = on_router(&client, &cb, &shared_cidr).await;
    assert_eq!(on.len(), 1);
    assert_eq!(on_router(&client, &ca, &shared_cidr).await.1.len(), 1);
    let la = r.list_routes(&ca).await.unwrap();
    assert_eq!(la.len(), 1);
    r.delete_route(&ca, &la[0]).await.expect("delete a's share");
    assert_eq!(
        r.list_routes(&cb).await.unwrap(),
        lb,
        "b's route survives a's delete"
    );
    assert_eq!(pairs(&client, &n2.port_id).await, vec![shared_cidr.clone()]);
    assert!(on_router(&client, &ca, &shared_cidr).await.1.is_empty());

    r.delete_route(&cb, &lb[0]).await.expect("delete b");
    assert_eq!(on_router(&client, &cb, &shared_cidr).await, (vec![], vec![]));
    assert!(pairs(&client, &n2.port_id).await.is_empty());
    tokio::join!(
        cloud.delete_server(&client, &n1.id),
        cloud.delete_server(&client, &n2.id)
    );
}

/// A route OCCM (or an operator) made, untagged: never listed, never deleted; a create of the
/// same route adopts it.
#[tokio::test]
async fn an_untagged_route_is_never_listed_and_a_create_adopts_it() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let node = boot(&client, "rt-adopt").await;
    let cluster = cloud.unique_name("rt-adopt");
    let cidr = cidr(&cluster, 1);
    let extra = ExtraRoute::new(&cidr, &node.ipv4);
    add_route_by_hand(&client, &extra).await;
    let r = routes(&client).await;

    assert!(own(&r.list_routes(&cluster).await.unwrap(), &cidr).is_empty());
    // Even a delete naming it leaves it alone: it is not ours.
    r.delete_route(&cluster, &route_to(&node, &cidr))
        .await
        .expect("delete");
    assert_eq!(on_router(&client, &cluster, &cidr).await.0, vec![extra.clone()]);

    r.create_route(&cluster, "uid", &route_to(&node, &cidr))
        .await
        .expect("adopt");
    let (on, tags) = on_router(&client, &cluster, &cidr).await;
    assert_eq!(on, vec![extra.clone()], "no duplicate route");
    assert_eq!(tags, [ownership_tag(&cluster, &extra)]);
    assert_eq!(pairs(&client, &node.port_id).await, vec![cidr.clone()]);
    let listed = r.list_routes(&cluster).await.unwrap();
    assert_eq!(listed.len(), 1);

    r.delete_route(&cluster, &listed[0]).await.expect("delete");
    assert_eq!(on_router(&client, &cluster, &cidr).await, (vec![], vec![]));
    cloud.delete_server(&client, &node.id).await;
}

#[tokio::test]
async fn a_deleted_servers_route_is_a_blackhole_and_is_deleted() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let node = boot(&client, "rt-gone").await;
    let cluster = cloud.unique_name("rt-gone");
    let cidr = cidr(&cluster, 2);
    let r = routes(&client).await;
    r.create_route(&cluster, "uid", &route_to(&node, &cidr))
        .await
        .expect("create");
    assert!(!r.list_routes(&cluster).await.unwrap()[0].blackhole);

    cloud.delete_server(&client, &node.id).await;
    let listed = r.list_routes(&cluster).await.unwrap();
    assert_eq!(listed.len(), 1);
    let l = &listed[0];
    assert!(l.blackhole, "{l:?}");
    assert_eq!(
        l.target_node, node.ipv4,
        "OCCM names a blackhole's target by its nexthop"
    );
    assert_eq!(l.target_provider_id, "");

    r.delete_route(&cluster, l).await.expect("delete the blackhole");
    assert_eq!(on_router(&client, &cluster, &cidr).await, (vec![], vec![]));
    assert!(r.list_routes(&cluster).await.unwrap().is_empty());
}

/// Each partial state a crash can leave, and how list, create and delete converge from it.
#[tokio::test]
async fn partial_states_converge() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let node = boot(&client, "rt-crash").await;
    let cluster = cloud.unique_name("rt-crash");
    let cidr = cidr(&cluster, 3);
    let extra = ExtraRoute::new(&cidr, &node.ipv4);
    let tag = ownership_tag(&cluster, &extra);
    let want = route_to(&node, &cidr);
    let r = routes(&client).await;
    let complete = |label: &'static str| {
        let (client, cluster, cidr, extra, tag, port) = (
            client.clone(),
            cluster.clone(),
            cidr.clone(),
            extra.clone(),
            tag.clone(),
            node.port_id.clone(),
        );
        async move {
            assert_eq!(
                on_router(&client, &cluster, &cidr).await,
                (vec![extra], vec![tag]),
                "{label}"
            );
            assert_eq!(pairs(&client, &port).await, [cidr], "{label}");
        }
    };
    let gone = |label: &'static str| {
        let (client, cluster, cidr, port) = (
            client.clone(),
            cluster.clone(),
            cidr.clone(),
            node.port_id.clone(),
        );
        async move {
            assert_eq!(
                on_router(&client, &cluster, &cidr).await,
                (vec![], vec![]),
                "{label}"
            );
            assert!(pairs(&client, &port).await.is_empty(), "{label}");
        }
    };

    // 1. A create stopped after the tag: not listed, and the list removes the stale tag.
    add_tag_by_hand(&client, &tag).await;
    assert!(r.list_routes(&cluster).await.unwrap().is_empty());
    gone("tag only, after a list").await;
    //    ... or the create is retried and completes it.
    add_tag_by_hand(&client, &tag).await;
    r.create_route(&cluster, "uid", &want)
        .await
        .expect("retried create");
    complete("tag only, then create").await;
    //    ... or a delete for it comes: it removes the tag.
    remove_route_by_hand(&client, &extra).await;
    set_pairs_by_hand(&client, &node.port_id, &[]).await;
    r.delete_route(&cluster, &want)
        .await
        .expect("delete of a tag only");
    gone("tag only, then delete").await;

    // 2. A create stopped after the route (no pair): listed; a create adds the pair.
    r.create_route(&cluster, "uid", &want).await.unwrap();
    set_pairs_by_hand(&client, &node.port_id, &[]).await;
    let listed = r.list_routes(&cluster).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].blackhole);
    r.create_route(&cluster, "uid", &want)
        .await
        .expect("create adds the pair");
    complete("route without pair, then create").await;
    //    ... and a delete from there removes all.
    set_pairs_by_hand(&client, &node.port_id, &[]).await;
    r.delete_route(&cluster, &listed[0])
        .await
        .expect("delete without pair");
    gone("route without pair, then delete").await;

    // 3. A delete stopped after the route (pair and tag left): the list finishes it.
    r.create_route(&cluster, "uid", &want).await.unwrap();
    remove_route_by_hand(&client, &extra).await;
    assert!(r.list_routes(&cluster).await.unwrap().is_empty());
    gone("pair and tag left, after a list").await;

    // 4. A delete stopped after the pair (tag left): the list removes the tag.
    r.create_route(&cluster, "uid", &want).await.unwrap();
    remove_route_by_hand(&client, &extra).await;
    set_pairs_by_hand(&client, &node.port_id, &[]).await;
    assert!(r.list_routes(&cluster).await.unwrap().is_empty());
    gone("tag left, after a list").await;

    cloud.delete_server(&client, &node.id).await;
}

/// Without `extraroute-atomic` the whole list is written with `If-Match`: a writer coming in
/// between makes Neutron answer 412, and the write is read and tried again, up to
/// `WRITE_ATTEMPTS`, then RetryAfter. The port's pairs the same.
#[tokio::test]
async fn full_list_writes_retry_on_a_stale_revision() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let other = cloud.client(User::Ccm).await;
    let node = boot(&client, "rt-ifmatch").await;
    let cluster = cloud.unique_name("rt-ifmatch");
    let (c0, c1) = (cidr(&cluster, 0), cidr(&cluster, 1));

    // Bump the router (a tag of its own) or the port (its description) before the first
    // `bumps` conditional writes.
    let make = |bumps: usize| {
        let (other, port) = (other.clone(), node.port_id.clone());
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let hook = move |w: ConditionalWrite| {
            let (other, port, counter) = (other.clone(), port.clone(), counter.clone());
            async move {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                if n >= bumps {
                    return;
                }
                let result = match w {
                    ConditionalWrite::RouterRoutes => {
                        other
                            .put(Service::Network, &format!("/routers/{}", router_id()))
                            .json(&json!({"router": {"description": format!("if-match bump {n}")}}))
                            .send_empty()
                            .await
                    }
                    ConditionalWrite::PortPairs => {
                        other
                            .put(Service::Network, &format!("/ports/{port}"))
                            .json(&json!({"port": {"description": format!("if-match bump {n}")}}))
                            .send_empty()
                            .await
                    }
                };
                result.expect("bump");
            }
        };
        (hook, seen)
    };

    let (hook, seen) = make(2);
    let r = routes(&client)
        .await
        .with_full_list_writes()
        .before_conditional_write(hook);
    assert!(!r.features().atomic);
    let before = client.request_counts();
    r.create_route(&cluster, "uid", &route_to(&node, &c0))
        .await
        .expect("create after two 412s");
    let after = client.request_counts();
    let puts = |c: &std::collections::BTreeMap<(Service, String), u64>| {
        c.get(&(Service::Network, "PUT".to_owned())).copied().unwrap_or(0)
    };
    // tag PUT + 3 route-list PUTs (two refused) + 1 port PUT; the port write found no bump left.
    assert_eq!(puts(&after) - puts(&before), 5);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        4,
        "3 route-list writes and 1 pair write"
    );
    let (on, tags) = on_router(&client, &cluster, &c0).await;
    assert_eq!(on, [ExtraRoute::new(&c0, &node.ipv4)]);
    assert_eq!(tags.len(), 1);
    assert_eq!(pairs(&client, &node.port_id).await, vec![c0.clone()]);

    // The pair write retried too (route already there: only the pair is written).
    let (hook, seen) = make(1);
    let r2 = routes(&client)
        .await
        .with_full_list_writes()
        .before_conditional_write(hook);
    set_pairs_by_hand(&client, &node.port_id, &[]).await;
    r2.create_route(&cluster, "uid", &route_to(&node, &c0))
        .await
        .expect("pair after a 412");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert_eq!(pairs(&client, &node.port_id).await, vec![c0.clone()]);

    // Always a writer in between: RetryAfter, the route not added (its tag is stale, the next
    // list removes it).
    let (hook, seen) = make(usize::MAX);
    let r3 = routes(&client)
        .await
        .with_full_list_writes()
        .before_conditional_write(hook);
    match r3.create_route(&cluster, "uid", &route_to(&node, &c1)).await {
        Err(ProviderError::RetryAfter { message, .. }) => assert!(message.contains("changed"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        provider_openstack::routes::WRITE_ATTEMPTS
    );
    assert!(on_router(&client, &cluster, &c1).await.0.is_empty());
    assert_eq!(r.list_routes(&cluster).await.unwrap().len(), 1);
    assert!(
        on_router(&client, &cluster, &c1).await.1.is_empty(),
        "stale tag removed"
    );

    // Deletion through the full list.
    let listed = r.list_routes(&cluster).await.unwrap();
    r.delete_route(&cluster, &listed[0]).await.expect("delete");
    assert_eq!(on_router(&client, &cluster, &c0).await, (vec![], vec![]));
    assert!(pairs(&client, &node.port_id).await.is_empty());
    cloud.delete_server(&client, &node.id).await;
}

#[tokio::test]
async fn dry_run_records_the_writes_and_makes_none() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let node = boot(&client, "rt-dry").await;
    let cluster = cloud.unique_name("rt-dry");
    let cidr = cidr(&cluster, 0);
    let r = routes(&client).await;
    let want = route_to(&node, &cidr);

    let (result, woulds) = dry_run::scope(r.create_route(&cluster, "uid", &want)).await;
    result.expect("dry create");
    let calls: Vec<&str> = woulds.iter().map(|w| w.call.as_str()).collect();
    assert_eq!(
        calls,
        [
            "router.add_tag",
            "router.add_extraroutes",
            "port.update_allowed_address_pairs"
        ]
    );
    assert_eq!(woulds[0].target, router_id());
    assert_eq!(woulds[2].target, node.port_id);
    assert_eq!(on_router(&client, &cluster, &cidr).await, (vec![], vec![]));
    assert!(pairs(&client, &node.port_id).await.is_empty());

    r.create_route(&cluster, "uid", &want).await.expect("create");
    let listed = r.list_routes(&cluster).await.unwrap();
    // A create of what exists would write nothing.
    let (_, woulds) = dry_run::scope(r.create_route(&cluster, "uid", &want)).await;
    assert!(woulds.is_empty(), "{woulds:?}");
    let (result, woulds) = dry_run::scope(r.delete_route(&cluster, &listed[0])).await;
    result.expect("dry delete");
    let calls: Vec<&str> = woulds.iter().map(|w| w.call.as_str()).collect();
    assert_eq!(
        calls,
        [
            "router.remove_extraroutes",
            "port.update_allowed_address_pairs",
            "router.remove_tag"
        ]
    );
    assert_eq!(r.list_routes(&cluster).await.unwrap(), listed, "nothing deleted");

    r.delete_route(&cluster, &listed[0]).await.expect("delete");
    assert_eq!(on_router(&client, &cluster, &cidr).await, (vec![], vec![]));
    cloud.delete_server(&client, &node.id).await;
}

/// An IPv6 pod CIDR via the node's IPv6 address: the tag carries the address's colons as one
/// path segment, the pair is the v6 CIDR.
#[tokio::test]
async fn an_ipv6_route_works_as_an_ipv4_one() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let node = boot(&client, "rt-v6").await;
    let Some(ipv6) = node.ipv6.clone() else {
        eprintln!("the test cloud has no IPv6 subnet on private: nothing to test");
        cloud.delete_server(&client, &node.id).await;
        return;
    };
    let cluster = cloud.unique_name("rt-v6");
    let v4 = cidr(&cluster, 0);
    let v6 = format!(
        "fd00:99:{:x}::/64",
        v4.split('.').nth(2).unwrap().parse::<u16>().unwrap()
    );
    let r = routes(&client).await;
    r.create_route(&cluster, "uid", &route_to(&node, &v6))
        .await
        .expect("create v6");
    r.create_route(&cluster, "uid", &route_to(&node, &v4))
        .await
        .expect("create v4");
    let (on, tags) = on_router(&client, &cluster, &v6).await;
    assert_eq!(on, vec![ExtraRoute::new(&v6, &ipv6)]);
    assert_eq!(tags.len(), 1);
    let mut got = pairs(&client, &node.port_id).await;
    got.sort();
    let mut want = vec![v4.clone(), v6.clone()];
    want.sort();
    assert_eq!(got, want);

    let mut listed = r.list_routes(&cluster).await.unwrap();
    listed.sort_by(|a, b| a.destination_cidr.cmp(&b.destination_cidr));
    assert_eq!(listed.len(), 2, "{listed:?}");
    for l in &listed {
        assert_eq!(l.target_node, node.name);
        assert!(!l.blackhole);
    }
    let l6 = listed.iter().find(|l| l.destination_cidr == v6).unwrap();
    assert_eq!(
        l6.target_node_addresses,
        [NodeAddress::new(AddressType::InternalIP, ipv6.clone())]
    );

    r.delete_route(&cluster, l6).await.expect("delete v6");
    assert_eq!(on_router(&client, &cluster, &v6).await, (vec![], vec![]));
    assert_eq!(pairs(&client, &node.port_id).await, vec![v4.clone()]);
    let rest = r.list_routes(&cluster).await.unwrap();
    assert_eq!(rest.len(), 1);
    r.delete_route(&cluster, &rest[0]).await.expect("delete v4");
    assert!(pairs(&client, &node.port_id).await.is_empty());
    cloud.delete_server(&client, &node.id).await;
}

/// A Node's address that another server's port holds (another vendor's node after a gateway
/// swap, whose InternalIP a server of this cloud happens to have) is refused before anything
/// is written: no route, no tag, no address pair on that server's port. So is a providerID that
/// is not this cloud's. On the old code the route went to the other server.
#[tokio::test]
async fn a_route_is_never_sent_to_a_server_that_is_not_the_nodes() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let (node, bystander) = tokio::join!(boot(&client, "rt-own"), boot(&client, "rt-bystander"));
    let cluster = cloud.unique_name("rt-foreign");
    let r = routes(&client).await;

    // The node's providerID with the bystander's address.
    let cidr_a = cidr(&cluster, 0);
    let mut wrong_address = route_to(&node, &cidr_a);
    wrong_address.target_node_addresses =
        vec![NodeAddress::new(AddressType::InternalIP, bystander.ipv4.clone())];
    match r.create_route(&cluster, "uid-1", &wrong_address).await {
        Err(ProviderError::InvalidArgument(m)) => {
            assert!(
                m.contains(&format!("not by the node's server {}", node.id)),
                "{m}"
            );
        }
        other => panic!("another server's address must be refused: {other:?}"),
    }
    // Another vendor's providerID with an address a server of this cloud holds.
    let cidr_b = cidr(&cluster, 1);
    let mut foreign = route_to(&bystander, &cidr_b);
    foreign.target_provider_id = "simulator://sim-east-1a/i-0a1e443a2f33b7406".into();
    match r.create_route(&cluster, "uid-2", &foreign).await {
        Err(ProviderError::InvalidArgument(m)) => assert!(m.contains("not a server of this cloud"), "{m}"),
        other => panic!("another vendor's node must be refused: {other:?}"),
    }
    for cidr in [&cidr_a, &cidr_b] {
        assert_eq!(
            on_router(&client, &cluster, cidr).await,
            (vec![], vec![]),
            "{cidr}"
        );
    }
    assert!(pairs(&client, &bystander.port_id).await.is_empty());
    assert!(pairs(&client, &node.port_id).await.is_empty());

    // The node's own address still routes.
    let own = route_to(&node, &cidr_a);
    r.create_route(&cluster, "uid-1", &own)
        .await
        .expect("the node's own route");
    assert_eq!(pairs(&client, &node.port_id).await, vec![cidr_a.clone()]);
    let listed = r.list_routes(&cluster).await.expect("list");
    r.delete_route(&cluster, &listed[0]).await.expect("delete");
    assert_eq!(on_router(&client, &cluster, &cidr_a).await, (vec![], vec![]));
    cloud.delete_server(&client, &node.id).await;
    cloud.delete_server(&client, &bystander.id).await;
}
