//! Acceptance tests of the simulated cloud through its public API: persistence across restarts,
//! unique load balancer IPs, the inventory's errors, and the realism knobs.

use std::{
    collections::HashSet,
    net::IpAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use provider::{
    LoadBalancerNode, LoadBalancerObservation, LoadBalancerRead, NodeRef, Protocol, Provider, ProviderError,
    Route, ServicePort, ServiceSpec,
};
use provider_simulator::{
    Capabilities, InstanceState, Knobs, LoadBalancerState, NewInstance, RateLimit, Simulator,
    SimulatorConfig, SimulatorError,
};
use token_bucket::max_in_window;

const CLUSTER: &str = "test-cluster";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn config(state_file: Option<PathBuf>, inventory: Option<PathBuf>) -> SimulatorConfig {
    SimulatorConfig {
        state_file,
        inventory,
        ..SimulatorConfig::default()
    }
}

fn in_memory() -> Arc<Simulator> {
    Simulator::open(SimulatorConfig::default()).unwrap()
}

fn service(uid: &str) -> ServiceSpec {
    ServiceSpec {
        uid: uid.into(),
        namespace: "default".into(),
        name: format!("svc-{uid}"),
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: 30080,
        }],
        ..ServiceSpec::default()
    }
}

fn lb_node(name: &str, provider_id: &str) -> LoadBalancerNode {
    LoadBalancerNode {
        name: name.into(),
        provider_id: provider_id.into(),
        ..LoadBalancerNode::default()
    }
}

fn route(target: &str, cidr: &str) -> Route {
    Route {
        name: String::new(),
        target_node: target.into(),
        destination_cidr: cidr.into(),
        blackhole: false,
        target_node_addresses: vec![],
        target_provider_id: String::new(),
    }
}

fn lbs(sim: &Simulator) -> &dyn provider::LoadBalancers {
    Provider::load_balancers(sim).expect("load balancers")
}

fn instances(sim: &Simulator) -> &dyn provider::Instances {
    Provider::instances(sim).expect("instances")
}

fn routes(sim: &Simulator) -> &dyn provider::Routes {
    Provider::routes(sim).expect("routes")
}

fn example_inventory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/simulator-inventory.yaml")
}

#[tokio::test]
async fn state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state_file = dir.path().join("state").join("cloud.json");
    let cfg = config(Some(state_file.clone()), Some(example_inventory()));

    let sim = Simulator::open(cfg.clone()).unwrap();
    let added = sim
        .add_instance(NewInstance {
            public_ip: Some("198.51.100.99".parse().unwrap()),
            labels: [("pool".to_string(), "extra".to_string())].into(),
            ..NewInstance::named("worker-9")
        })
        .unwrap();
    sim.stop_instance("i-0c0a0000000000002").unwrap();
    sim.terminate_instance("i-0c0a0000000000003").unwrap();
    let backend = lb_node("worker-1", "simulator://sim-east-1a/i-0c0a0000000000002");
    let mut released = None;
    for uid in ["u-1", "u-2", "u-3"] {
        lbs(&sim)
            .ensure_load_balancer(CLUSTER, &service(uid), std::slice::from_ref(&backend))
            .await
            .unwrap();
    }
    let requested = ServiceSpec {
        requested_ip: "203.0.113.200".into(),
        ..service("u-4")
    };
    lbs(&sim)
        .ensure_load_balancer(CLUSTER, &requested, &[])
        .await
        .unwrap();
    for lb in sim.load_balancers() {
        if lb.service_uid == "u-2" {
            released = Some(lb.ip);
        }
    }
    lbs(&sim)
        .ensure_load_balancer_deleted(CLUSTER, &service("u-2"))
        .await
        .unwrap();
    routes(&sim)
        .create_route(CLUSTER, "uid-w1", &route("worker-1", "10.244.1.0/24"))
        .await
        .unwrap();
    routes(&sim)
        .create_route(CLUSTER, "uid-w3", &route("worker-3", "10.244.3.0/24"))
        .await
        .unwrap();

    let (instances_before, lbs_before, routes_before) = (sim.instances(), sim.load_balancers(), sim.routes());
    assert_eq!(lbs_before.len(), 3);
    drop(sim);

    // A new simulator on the same file: everything is there (the inventory is not re-read).
    let sim = Simulator::open(cfg).unwrap();
    assert_eq!(sim.instances(), instances_before);
    assert_eq!(sim.load_balancers(), lbs_before, "load balancers, IPs included");
    assert_eq!(sim.routes(), routes_before);
    let found = instances(&sim)
        .lookup_instances(&[
            NodeRef::by_name("worker-9"),
            NodeRef::by_name("worker-1"),
            NodeRef::by_name("worker-2"),
        ])
        .await
        .unwrap();
    assert_eq!(
        found[0].as_ref().unwrap().metadata.provider_id,
        added.provider_id()
    );
    assert!(found[1].as_ref().unwrap().shutdown, "worker-1 stayed stopped");
    assert!(
        matches!(found[2], Err(ProviderError::InstanceNotFound(_))),
        "worker-2 stayed terminated"
    );
    let status = lbs(&sim)
        .get_load_balancer(CLUSTER, &service("u-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.ingress[0].ip, lbs_before[0].ip.to_string());
    // The allocation cursor survived too: the address released before the restart is not
    // handed out again at once.
    let fresh = lbs(&sim)
        .ensure_load_balancer(CLUSTER, &service("u-5"), &[])
        .await
        .unwrap();
    assert_ne!(Some(fresh.ingress[0].ip.parse::<IpAddr>().unwrap()), released);
    let live: HashSet<IpAddr> = sim.load_balancers().iter().map(|lb| lb.ip).collect();
    assert_eq!(live.len(), 4);
}

#[tokio::test]
async fn a_second_simulator_cannot_open_a_state_file_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(Some(dir.path().join("s.json")), None);
    let first = Simulator::open(cfg.clone()).unwrap();
    let e = Simulator::open(cfg.clone()).err().expect("the file is in use");
    assert!(
        e.to_string().contains("s.json") && e.to_string().contains("in use"),
        "{e}"
    );
    drop(first);
    Simulator::open(cfg).unwrap();
}

#[test]
fn unusable_state_files_and_inventories_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let corrupt = write(dir.path(), "corrupt.json", "{\"version\": 1, \"region\": ");
    let e = Simulator::open(config(Some(corrupt), None)).err().unwrap();
    assert_eq!(e.kind(), "state_file");
    assert!(
        e.to_string().contains("corrupt.json") && e.to_string().contains("is corrupt"),
        "{e}"
    );

    let cases = [
        // syntax
        (
            "instances:\n  - name: a\n   zone: x\n",
            3,
            "did not find expected",
        ),
        // wrong types: a bad IP, an unknown state
        (
            "instances:\n  - name: a\n    private_ip: 10.0.0.300\n",
            3,
            "invalid IP address",
        ),
        (
            "instances:\n  - name: a\n  - name: b\n    state: exploded\n",
            4,
            "unknown variant `exploded`",
        ),
        // semantic: duplicate id, duplicate name (the line of the offending entry or field)
        (
            "instances:\n  - name: a\n    id: i-0000000000000000a\n  - name: b\n    id: i-0000000000000000a\n",
            5,
            "duplicate instance id",
        ),
        (
            "instances:\n  - name: a\n  - name: b\n\n  - name: a\n",
            5,
            "duplicate instance name a",
        ),
    ];
    for (i, (text, line, fragment)) in cases.into_iter().enumerate() {
        let path = write(dir.path(), &format!("inv-{i}.yaml"), text);
        let state = dir.path().join(format!("state-{i}.json"));
        let e = Simulator::open(config(Some(state.clone()), Some(path)))
            .err()
            .expect(text);
        assert_eq!(e.kind(), "inventory", "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("inv-{i}.yaml")), "{msg}");
        assert!(msg.contains(&format!("line {line}")), "{msg}");
        assert!(msg.contains(fragment), "{msg}");
        assert!(!state.exists(), "nothing is written from a bad inventory");
        match e {
            SimulatorError::Inventory(inv) => assert_eq!(inv.line, Some(line), "{inv}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn the_example_inventory_is_valid() {
    let inv = provider_simulator::inventory::load(&example_inventory()).unwrap();
    assert_eq!(inv.region, "sim-east-1");
    assert_eq!(inv.zones.len(), 3);
    assert_eq!(inv.instances.len(), 7);
    assert_eq!(inv.load_balancer_pool.to_string(), "203.0.113.0/24");
    assert_eq!(inv.instance_subnet.to_string(), "10.0.0.0/16");
    assert_eq!(
        inv.instances
            .iter()
            .filter(|i| i.state == InstanceState::Stopped)
            .count(),
        1
    );
    assert_eq!(
        inv.instances
            .iter()
            .filter(|i| i.state == InstanceState::Terminated)
            .count(),
        1
    );
    assert!(inv.instances.iter().any(|i| !i.labels.is_empty()));
    let zones: HashSet<&str> = inv.instances.iter().map(|i| i.zone.as_str()).collect();
    assert_eq!(zones.len(), 3, "every zone has instances");
}

/// Live load balancer IPs are unique at every step of 1000 create/delete cycles in a small pool
/// (so allocation wraps around the pool many times), and a released IP is not reused at once.
/// Every change is written to the state file; the 1000 cycles skip fsync (whose cost depends on
/// the disk's load, not on the simulator), and a shorter run measures the durable path.
#[tokio::test]
async fn load_balancer_ips_stay_unique_across_1000_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let inv = write(dir.path(), "inv.yaml", "load_balancer_pool: 192.0.2.0/28\n"); // 14 addresses
    for (durable, cycles) in [(false, 1000), (true, 100)] {
        let state_file = dir.path().join(format!("state-{durable}.json"));
        let sim = Simulator::open(SimulatorConfig {
            durable_writes: durable,
            ..config(Some(state_file.clone()), Some(inv.clone()))
        })
        .unwrap();
        let started = Instant::now();
        let live_window = 5;
        let mut last_released: Option<IpAddr> = None;
        for i in 0..cycles {
            let status = lbs(&sim)
                .ensure_load_balancer(CLUSTER, &service(&format!("uid-{i}")), &[])
                .await
                .unwrap();
            let ip: IpAddr = status.ingress[0].ip.parse().unwrap();
            assert_ne!(
                Some(ip),
                last_released,
                "cycle {i}: the address just released came back"
            );
            let live: Vec<IpAddr> = sim.load_balancers().iter().map(|lb| lb.ip).collect();
            let unique: HashSet<&IpAddr> = live.iter().collect();
            assert_eq!(
                unique.len(),
                live.len(),
                "cycle {i}: two load balancers share an IP: {live:?}"
            );
            if i >= live_window {
                let old = service(&format!("uid-{}", i - live_window));
                last_released = sim
                    .load_balancers()
                    .iter()
                    .find(|lb| lb.service_uid == old.uid)
                    .map(|lb| lb.ip);
                lbs(&sim)
                    .ensure_load_balancer_deleted(CLUSTER, &old)
                    .await
                    .unwrap();
            }
        }
        // How long it took is a figure to read, not to assert: it follows the disk and the load.
        let took = started.elapsed();
        eprintln!("{cycles} load balancer create/delete cycles (durable_writes: {durable}) took {took:?}");
        assert_eq!(sim.load_balancers().len(), live_window);
        drop(sim);
        // and what is on disk agrees
        let reopened = Simulator::open(config(Some(state_file), None)).unwrap();
        assert_eq!(reopened.load_balancers().len(), live_window);
    }
}

#[tokio::test]
async fn concurrent_ensures_never_share_an_ip_or_duplicate_a_load_balancer() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..config(Some(dir.path().join("s.json")), None)
    })
    .unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let sim = sim.clone();
        // every service ensured twice at once
        tasks.push(tokio::spawn(async move {
            lbs(&sim)
                .ensure_load_balancer(CLUSTER, &service(&format!("c-{}", i / 2)), &[])
                .await
        }));
    }
    let mut by_uid = std::collections::HashMap::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let ip = t.await.unwrap().unwrap().ingress[0].ip.clone();
        if let Some(other) = by_uid.insert(i / 2, ip.clone()) {
            assert_eq!(other, ip, "one service, one address");
        }
    }
    let all = sim.load_balancers();
    assert_eq!(all.len(), 20);
    assert_eq!(all.iter().map(|lb| lb.ip).collect::<HashSet<_>>().len(), 20);
}

/// Accepted calls never exceed rate·t + burst in any window, and the cloud does not throttle a
/// caller that stays within the limit. Paused time: exact figures, whatever the machine's load.
#[tokio::test(start_paused = true)]
async fn the_rate_limit_throttles_beyond_rate_times_t_plus_burst_and_never_below() {
    let (rate, burst) = (200.0, 20.0);
    let sim = Simulator::open(SimulatorConfig {
        knobs: Knobs {
            rate_limit: Some(RateLimit::new(rate, burst)),
            ..Knobs::default()
        },
        ..SimulatorConfig::default()
    })
    .unwrap();

    // 1. A full bucket admits `burst` calls at once, then throttles with a hint.
    let started = tokio::time::Instant::now();
    let mut admitted = 0usize;
    let hint = loop {
        match routes(&sim).list_routes(CLUSTER).await {
            Ok(_) => admitted += 1,
            Err(ProviderError::Throttled { retry_after, message }) => {
                assert_eq!(message, "Request limit exceeded");
                break retry_after;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(admitted < 10_000, "never throttled");
    };
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no time passes on a paused clock"
    );
    assert_eq!(admitted, burst as usize, "the burst, then throttled");
    let d = hint.expect("a retry hint");
    assert!(
        d > Duration::ZERO && d <= Duration::from_secs_f64(1.0 / rate),
        "{d:?}"
    );

    // 2. Four callers for 1.5 s, each calling again at once after a success and after the
    //    hint after a "throttled". On paused time (the simulator reads tokio's clock), the
    //    calls land exactly when the bucket says, so the figures are exact.
    sim.reset_stats();
    let hammer_for = Duration::from_millis(1500);
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let sim = sim.clone();
        tasks.push(tokio::spawn(async move {
            let mut throttled = 0u64;
            while started.elapsed() < hammer_for {
                match instances(&sim)
                    .lookup_instances(&[NodeRef::by_name("nobody")])
                    .await
                {
                    Ok(_) => {}
                    Err(ProviderError::Throttled { retry_after, .. }) => {
                        throttled += 1;
                        tokio::time::sleep(retry_after.unwrap_or(Duration::from_millis(1))).await;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            throttled
        }));
    }
    let mut throttled = 0;
    for t in tasks {
        throttled += t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let stats = sim.stats();
    assert_eq!(stats.throttled_total, throttled);
    assert_eq!(stats.accepted_total + stats.throttled_total, stats.calls_total);
    assert_eq!(
        stats.accepted_total as usize,
        stats.accepted_at.len(),
        "throttled calls are not accepted"
    );
    assert!(throttled > 0, "four callers at once hit the limit");
    let ops = &stats.operations["describe_instances"];
    assert_eq!(
        (ops.accepted, ops.throttled),
        (stats.accepted_total, stats.throttled_total)
    );
    for window_ms in [1u64, 5, 10, 50, 100, 250, 500, 1000, 1500] {
        let window = Duration::from_millis(window_ms);
        let bound = (rate * window.as_secs_f64() + burst + 1e-9).floor() as usize;
        let got = max_in_window(&stats.accepted_at, window);
        assert!(
            got <= bound,
            "{got} calls accepted within {window_ms} ms; the limit allows {bound}"
        );
    }
    // Never below: every token of the run was used (the bucket started empty after step 1).
    let expected = (rate * elapsed.as_secs_f64()).floor() as u64;
    assert!(
        stats.accepted_total + 1 >= expected && stats.accepted_total <= expected + 1,
        "{} accepted in {elapsed:?}; the limit allows {expected}",
        stats.accepted_total
    );

    // 3. A caller pacing itself below the rate is never throttled.
    tokio::time::sleep(Duration::from_secs_f64(burst / rate)).await; // let the bucket refill
    sim.reset_stats();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(2.0 / rate));
    // after a stall, carry on at the pace instead of catching up in a burst
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for _ in 0..100 {
        tick.tick().await;
        routes(&sim).list_routes(CLUSTER).await.expect("within the limit");
    }
    assert_eq!(sim.stats().throttled_total, 0);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_changes_apply_at_once_and_zero_closes_the_api() {
    let sim = in_memory();
    routes(&sim).list_routes(CLUSTER).await.unwrap();
    sim.set_knobs(Knobs {
        rate_limit: Some(RateLimit::closed()),
        latency: Duration::from_secs(5),
        ..Knobs::default()
    });
    let started = tokio::time::Instant::now();
    match instances(&sim).lookup_instances(&[]).await {
        Err(ProviderError::Throttled {
            retry_after: None, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "a throttled call does not wait the latency"
    );
    sim.set_knobs(Knobs::default());
    routes(&sim).list_routes(CLUSTER).await.unwrap();
}

#[tokio::test]
async fn error_injection_fails_every_call_at_1_and_none_at_0() {
    let sim = in_memory();
    let set = |op: &str, p: f64| {
        sim.set_knobs(Knobs {
            error_rate: [(op.to_string(), p)].into(),
            ..Knobs::default()
        })
    };
    set("list_routes", 1.0);
    for _ in 0..50 {
        match routes(&sim).list_routes(CLUSTER).await {
            Err(ProviderError::Unavailable(m)) => {
                assert!(m.contains("injected failure of list_routes"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
    // other operations are not affected
    instances(&sim).lookup_instances(&[]).await.unwrap();
    assert_eq!(sim.stats().operations["list_routes"].injected_errors, 50);

    set("list_routes", 0.0);
    for _ in 0..50 {
        routes(&sim).list_routes(CLUSTER).await.unwrap();
    }

    set("*", 1.0);
    assert!(matches!(
        instances(&sim).lookup_instances(&[]).await,
        Err(ProviderError::Unavailable(_))
    ));
    assert!(matches!(
        lbs(&sim).ensure_load_balancer(CLUSTER, &service("x"), &[]).await,
        Err(ProviderError::Unavailable(_))
    ));
    assert!(
        sim.load_balancers().is_empty(),
        "an injected failure changes nothing"
    );

    // a probability in between fails some
    set("list_routes", 0.5);
    let mut failed = 0;
    for _ in 0..400 {
        if routes(&sim).list_routes(CLUSTER).await.is_err() {
            failed += 1;
        }
    }
    assert!((100..300).contains(&failed), "{failed} of 400 failed at 0.5");
}

#[tokio::test(start_paused = true)]
async fn latency_is_applied() {
    let sim = in_memory();
    let fast = tokio::time::Instant::now();
    routes(&sim).list_routes(CLUSTER).await.unwrap();
    assert_eq!(fast.elapsed(), Duration::ZERO);
    sim.set_knobs(Knobs {
        latency: Duration::from_millis(150),
        latency_jitter: Duration::from_millis(50),
        ..Knobs::default()
    });
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        routes(&sim).list_routes(CLUSTER).await.unwrap();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took <= Duration::from_millis(200),
            "{took:?}"
        );
    }
}

#[tokio::test]
async fn a_slow_load_balancer_answers_retry_after_until_it_is_active() {
    let sim = in_memory();
    sim.set_knobs(Knobs {
        lb_provision_delay: Duration::from_millis(300),
        ..Knobs::default()
    });
    let svc = service("slow");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut retries = 0;
    let status = loop {
        match lbs(&sim).ensure_load_balancer(CLUSTER, &svc, &[]).await {
            Ok(status) => break status,
            Err(ProviderError::RetryAfter { after, .. }) if Instant::now() < deadline => {
                assert!(
                    after > Duration::ZERO && after <= Duration::from_millis(300),
                    "{after:?}"
                );
                if retries == 0 {
                    let lb = &sim.load_balancers()[0];
                    assert_eq!(lb.state, LoadBalancerState::Provisioning);
                    let got = lbs(&sim).get_load_balancer(CLUSTER, &svc).await.unwrap().unwrap();
                    assert!(got.ingress.is_empty(), "no address while provisioning");
                }
                retries += 1;
                tokio::time::sleep(after).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(retries >= 1);
    assert_eq!(sim.load_balancers().len(), 1);
    assert_eq!(sim.load_balancers()[0].state, LoadBalancerState::Active);
    assert_eq!(
        lbs(&sim).get_load_balancer(CLUSTER, &svc).await.unwrap(),
        Some(status)
    );
}

#[tokio::test]
async fn lookups_are_one_call_per_batch_and_respect_the_batch_limit() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Simulator::open(SimulatorConfig {
        limits: provider::ProviderLimits {
            max_instance_batch: 3,
        },
        ..config(Some(dir.path().join("s.json")), Some(example_inventory()))
    })
    .unwrap();
    assert_eq!(sim.limits().max_instance_batch, 3);
    let nodes = [
        NodeRef::by_name("worker-1"),
        NodeRef::new("x", "simulator://sim-east-1c/i-0c0a0000000000006"),
        NodeRef::new("x", "aws:///us-east-1a/i-0c0a0000000000006"),
    ];
    let got = instances(&sim).lookup_instances(&nodes).await.unwrap();
    assert_eq!(got.len(), 3);
    assert!(!got[0].as_ref().unwrap().shutdown);
    assert!(got[1].as_ref().unwrap().shutdown, "worker-4 is stopped");
    assert!(matches!(got[2], Err(ProviderError::InvalidArgument(_))));
    assert_eq!(sim.stats().operations["describe_instances"].calls, 1);
    let four = [nodes.as_slice(), &nodes[..1]].concat();
    assert!(matches!(
        instances(&sim).lookup_instances(&four).await,
        Err(ProviderError::InvalidArgument(_))
    ));
}

/// 20 Services' load balancers in one call, one of them missing: 19 answers and one `Absent`;
/// an ensure read of a converged one answers without a write; 21 reads are refused.
#[tokio::test]
async fn a_batched_read_is_one_call_of_up_to_20_with_an_answer_each() {
    let sim = in_memory();
    let nodes = [lb_node("n1", "simulator://sim-east-1a/i-1")];
    for i in 0..19 {
        let _ = lbs(&sim)
            .ensure_load_balancer(CLUSTER, &service(&format!("u-{i}")), &nodes)
            .await
            .unwrap();
    }
    sim.reset_stats();
    let reads: Vec<LoadBalancerRead> = (0..20)
        .map(|i| LoadBalancerRead {
            service: service(&format!("u-{i}")),
            ensure_nodes: None,
        })
        .collect();
    let answers = lbs(&sim).read_load_balancers(CLUSTER, &reads).await.unwrap();
    assert_eq!(answers.len(), 20);
    assert!(
        answers[..19]
            .iter()
            .all(|a| matches!(a, Ok(LoadBalancerObservation::Present(s)) if !s.ingress.is_empty()))
    );
    assert_eq!(answers[19], Ok(LoadBalancerObservation::Absent));
    let check = [LoadBalancerRead {
        service: service("u-0"),
        ensure_nodes: Some(nodes.to_vec()),
    }];
    let answers = lbs(&sim).read_load_balancers(CLUSTER, &check).await.unwrap();
    assert!(matches!(answers[0], Ok(LoadBalancerObservation::Converged(_))));
    assert!(lbs(&sim).checks_before_ensure());
    let stats = sim.stats();
    assert_eq!(stats.operations["read_load_balancers"].calls, 2);
    assert_eq!(stats.calls_total, 2, "no other call");
    let too_many = [reads.as_slice(), &reads[..1]].concat();
    assert!(matches!(
        lbs(&sim).read_load_balancers(CLUSTER, &too_many).await,
        Err(ProviderError::InvalidArgument(_))
    ));
}

/// Reads and writes draw from buckets of their own: writes at the limit leave reads admitted.
#[tokio::test(start_paused = true)]
async fn reads_and_writes_are_rate_limited_apart() {
    let sim = Simulator::open(SimulatorConfig {
        knobs: Knobs {
            rate_limit: Some(RateLimit::new(1.0, 3.0)),
            ..Knobs::default()
        },
        ..SimulatorConfig::default()
    })
    .unwrap();
    for i in 0..3 {
        lbs(&sim)
            .ensure_load_balancer_deleted(CLUSTER, &service(&format!("gone-{i}")))
            .await
            .expect("the write burst");
    }
    assert!(matches!(
        lbs(&sim)
            .ensure_load_balancer_deleted(CLUSTER, &service("gone-3"))
            .await,
        Err(ProviderError::Throttled { .. })
    ));
    for _ in 0..3 {
        routes(&sim)
            .list_routes(CLUSTER)
            .await
            .expect("the read burst is untouched");
    }
    assert!(matches!(
        routes(&sim).list_routes(CLUSTER).await,
        Err(ProviderError::Throttled { .. })
    ));
}

#[test]
fn capabilities_can_be_switched_off() {
    let sim = Simulator::open(SimulatorConfig {
        disabled: Capabilities {
            load_balancers: true,
            routes: true,
            ..Capabilities::none()
        },
        ..SimulatorConfig::default()
    })
    .unwrap();
    assert_eq!(sim.name(), "simulator");
    assert!(Provider::instances(&*sim).is_some());
    assert!(Provider::load_balancers(&*sim).is_none());
    assert!(Provider::routes(&*sim).is_none());
    let all_off = Simulator::open(SimulatorConfig {
        disabled: Capabilities::all(),
        ..SimulatorConfig::default()
    })
    .unwrap();
    assert!(Provider::instances(&*all_off).is_none());
}

#[tokio::test]
async fn routes_follow_their_instances() {
    let sim = Simulator::open(config(None, Some(example_inventory()))).unwrap();
    routes(&sim)
        .create_route(CLUSTER, "n1", &route("worker-3", "10.244.3.0/24"))
        .await
        .unwrap();
    routes(&sim)
        .create_route("other", "n1", &route("worker-1", "10.245.1.0/24"))
        .await
        .unwrap();
    let mine = routes(&sim).list_routes(CLUSTER).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].name, "test-cluster-n1");
    assert!(!mine[0].blackhole);
    sim.terminate_instance("i-0c0a0000000000005").unwrap();
    assert!(routes(&sim).list_routes(CLUSTER).await.unwrap()[0].blackhole);
    assert_eq!(sim.routes().len(), 2, "the admin view lists every cluster");
}
