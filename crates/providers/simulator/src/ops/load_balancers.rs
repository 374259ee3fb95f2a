//! Load balancers: get, a batched read (a get, or the check an ensure starts with), ensure
//! (create or update in place), update backends, delete.
//!
//! A load balancer is named after the service UID and tagged with the cluster that created it;
//! another cluster's load balancer of the same name is never changed (ensure and update answer
//! `InvalidArgument`, get sees nothing, delete leaves it alone).

use std::{net::IpAddr, time::Duration, time::SystemTime};

use ipnet::IpNet;
use provider::{
    ExternalTrafficPolicy, LoadBalancerIngress, LoadBalancerNode, LoadBalancerObservation, LoadBalancerRead,
    LoadBalancerStatus, Protocol, ProviderError, ServiceSpec, default_load_balancer_name,
};

use crate::{
    ipam::Pool,
    state::{Backend, HealthCheck, Listener, LoadBalancer, LoadBalancerState, State},
};

/// Annotation that picks who implements a service's load balancer.
pub const LOAD_BALANCER_TYPE_ANNOTATION: &str = "simulator.cloudgateway.io/load-balancer-type";
/// Its value that leaves the service to another controller (`ImplementedElsewhere`).
pub const LOAD_BALANCER_TYPE_EXTERNAL: &str = "external";
/// Its value (and the default) for the simulator's own load balancers.
pub const LOAD_BALANCER_TYPE_SIMULATOR: &str = "simulator";
/// kube-proxy's health port, probed when externalTrafficPolicy is Cluster.
pub const KUBE_PROXY_HEALTH_PORT: u16 = 10256;

type Result<T, E = ProviderError> = std::result::Result<T, E>;

fn invalid(msg: impl Into<String>) -> ProviderError {
    ProviderError::InvalidArgument(msg.into())
}

/// The status of the cluster's load balancer for `svc`; `None` when it has none.
pub fn get(state: &State, cluster: &str, svc: &ServiceSpec, now: SystemTime) -> Option<LoadBalancerStatus> {
    let lb = state.load_balancers.get(&default_load_balancer_name(&svc.uid))?;
    (lb.cluster == cluster).then(|| status(lb, now))
}

/// One read of a batch: a get's `Absent` or `Present`; for the check an ensure starts with,
/// `Converged` only when [`ensure`] would change nothing and answer at once (active, every field
/// it sets already as asked), else `NeedsEnsure`, or the error [`ensure`] would answer.
pub fn observe(
    state: &State,
    cluster: &str,
    read: &LoadBalancerRead,
    now: SystemTime,
) -> Result<LoadBalancerObservation> {
    let svc = &read.service;
    let Some(nodes) = &read.ensure_nodes else {
        return Ok(get(state, cluster, svc, now)
            .map_or(LoadBalancerObservation::Absent, LoadBalancerObservation::Present));
    };
    let want = desired(cluster, svc)?;
    let Some(lb) = state.load_balancers.get(&default_load_balancer_name(&svc.uid)) else {
        return Ok(LoadBalancerObservation::NeedsEnsure);
    };
    if lb.cluster != cluster {
        return Err(foreign(lb, cluster));
    }
    let converged = lb.ready_at <= now
        && lb.state_at(now) == LoadBalancerState::Active
        && lb.service_namespace == svc.namespace
        && lb.service_name == svc.name
        && lb.listeners == want.listeners
        && lb.backends == backends(nodes)
        && lb.health_check == want.health_check
        && lb.source_ranges == want.source_ranges
        && lb.session_affinity_client_ip == svc.session_affinity_client_ip
        && want.requested_ip.is_none_or(|ip| ip == lb.ip);
    Ok(if converged {
        LoadBalancerObservation::Converged(status(lb, now))
    } else {
        LoadBalancerObservation::NeedsEnsure
    })
}

/// The status a load balancer reports: its IP once active, nothing while provisioning.
pub fn status(lb: &LoadBalancer, now: SystemTime) -> LoadBalancerStatus {
    match lb.state_at(now) {
        LoadBalancerState::Provisioning => LoadBalancerStatus::default(),
        LoadBalancerState::Active => LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: lb.ip.to_string(),
                hostname: String::new(),
                ip_mode: String::new(),
            }],
            ..LoadBalancerStatus::default()
        },
    }
}

/// Everything ensure needs from a service, validated.
struct Desired {
    listeners: Vec<Listener>,
    health_check: HealthCheck,
    source_ranges: Vec<String>,
    requested_ip: Option<IpAddr>,
}

fn desired(cluster: &str, svc: &ServiceSpec) -> Result<Desired> {
    if cluster.is_empty() {
        return Err(invalid(
            "the cluster name is required (load balancers are tagged with it)",
        ));
    }
    if svc.uid.is_empty() {
        return Err(invalid(
            "the service UID is required (load balancer names derive from it)",
        ));
    }
    match svc
        .annotations
        .get(LOAD_BALANCER_TYPE_ANNOTATION)
        .map(String::as_str)
    {
        None | Some(LOAD_BALANCER_TYPE_SIMULATOR) => {}
        Some(LOAD_BALANCER_TYPE_EXTERNAL) => {
            return Err(ProviderError::ImplementedElsewhere(format!(
                "service {}/{} is annotated {LOAD_BALANCER_TYPE_ANNOTATION}={LOAD_BALANCER_TYPE_EXTERNAL}",
                svc.namespace, svc.name
            )));
        }
        Some(other) => {
            return Err(invalid(format!(
                "annotation {LOAD_BALANCER_TYPE_ANNOTATION}={other:?} is not understood \
                 (use {LOAD_BALANCER_TYPE_SIMULATOR:?} or {LOAD_BALANCER_TYPE_EXTERNAL:?})"
            )));
        }
    }
    if svc.ports.is_empty() {
        return Err(invalid("a load balancer needs at least one port"));
    }
    let mut listeners = Vec::with_capacity(svc.ports.len());
    for p in &svc.ports {
        if p.protocol == Protocol::Sctp {
            return Err(invalid(format!(
                "port {} is SCTP: the simulator's load balancers support TCP and UDP",
                p.port
            )));
        }
        if p.port == 0 {
            return Err(invalid("a load balancer port must not be 0"));
        }
        if listeners
            .iter()
            .any(|l: &Listener| l.port == p.port && l.protocol == p.protocol.as_k8s_str())
        {
            return Err(invalid(format!(
                "port {}/{} is listed twice",
                p.port,
                p.protocol.as_k8s_str()
            )));
        }
        listeners.push(Listener {
            name: p.name.clone(),
            protocol: p.protocol.as_k8s_str().to_string(),
            port: p.port,
            node_port: p.node_port,
        });
    }
    // Like cloud-provider-aws: Local traffic policy probes the service's health check node
    // port, Cluster probes kube-proxy.
    let health_check = match (svc.external_traffic_policy, svc.health_check_node_port) {
        (ExternalTrafficPolicy::Local, port) if port != 0 => HealthCheck {
            protocol: "HTTP".into(),
            port,
            path: "/healthz".into(),
        },
        _ => HealthCheck {
            protocol: "HTTP".into(),
            port: KUBE_PROXY_HEALTH_PORT,
            path: "/healthz".into(),
        },
    };
    let mut source_ranges = Vec::with_capacity(svc.source_ranges.len());
    for r in &svc.source_ranges {
        let net: IpNet = r
            .trim()
            .parse()
            .map_err(|_| invalid(format!("source range {r:?} is not a CIDR")))?;
        source_ranges.push(net.to_string());
    }
    let requested_ip = match svc.requested_ip.trim() {
        "" => None,
        s => Some(
            s.parse::<IpAddr>()
                .map_err(|_| invalid(format!("loadBalancerIP {s:?} is not an IP address")))?,
        ),
    };
    Ok(Desired {
        listeners,
        health_check,
        source_ranges,
        requested_ip,
    })
}

fn backends(nodes: &[LoadBalancerNode]) -> Vec<Backend> {
    let mut b: Vec<Backend> = nodes
        .iter()
        .map(|n| Backend {
            node_name: n.name.clone(),
            provider_id: n.provider_id.clone(),
        })
        .collect();
    b.sort();
    b.dedup_by(|a, b| a.node_name == b.node_name);
    b
}

fn foreign(lb: &LoadBalancer, cluster: &str) -> ProviderError {
    invalid(format!(
        "load balancer {} belongs to cluster {:?}, not {cluster:?}; it is left alone",
        lb.name, lb.cluster
    ))
}

/// Creates the load balancer or brings it in line with the service, in place. While it is
/// provisioning the answer is `RetryAfter` (the change is kept: a retry finds it).
pub fn ensure(
    state: &mut State,
    cluster: &str,
    svc: &ServiceSpec,
    nodes: &[LoadBalancerNode],
    provision_delay: Duration,
    now: SystemTime,
) -> Result<LoadBalancerStatus> {
    let want = desired(cluster, svc)?;
    let name = default_load_balancer_name(&svc.uid);
    let pool = Pool::new(state.load_balancer_pool);
    let taken_by_other = |ip: IpAddr| {
        state
            .load_balancers
            .values()
            .any(|lb| lb.ip == ip && lb.name != name)
    };
    let ip = match (state.load_balancers.get(&name), want.requested_ip) {
        (Some(lb), _) if lb.cluster != cluster => return Err(foreign(lb, cluster)),
        (Some(lb), None) => lb.ip,
        (Some(lb), Some(ip)) if lb.ip == ip => ip,
        // a changed loadBalancerIP moves the load balancer to it, if it may
        (_, Some(ip)) => {
            pool.check_requested(ip, taken_by_other)
                .map_err(|m| invalid(format!("loadBalancerIP: {m}")))?;
            ip
        }
        (None, None) => pool
            .allocate(state.load_balancer_ip_cursor, taken_by_other)
            .ok_or_else(|| {
                ProviderError::Unavailable(format!(
                    "no free address left in the load balancer pool {}",
                    state.load_balancer_pool
                ))
            })?,
    };
    let backends = backends(nodes);
    let lb = match state.load_balancers.get_mut(&name) {
        Some(lb) => {
            lb.service_namespace = svc.namespace.clone();
            lb.service_name = svc.name.clone();
            lb.listeners = want.listeners;
            lb.backends = backends;
            lb.health_check = want.health_check;
            lb.source_ranges = want.source_ranges;
            lb.session_affinity_client_ip = svc.session_affinity_client_ip;
            lb.ip = ip;
            lb.state = lb.state_at(now);
            lb.clone()
        }
        None => {
            if want.requested_ip.is_none() {
                state.load_balancer_ip_cursor = Some(ip);
            }
            let ready_at = crate::state::truncate_to_millis(now + provision_delay);
            let lb = LoadBalancer {
                name: name.clone(),
                cluster: cluster.to_string(),
                service_uid: svc.uid.clone(),
                service_namespace: svc.namespace.clone(),
                service_name: svc.name.clone(),
                listeners: want.listeners,
                backends,
                health_check: want.health_check,
                source_ranges: want.source_ranges,
                session_affinity_client_ip: svc.session_affinity_client_ip,
                ip,
                state: LoadBalancerState::Provisioning,
                created_at: now,
                ready_at,
            };
            let lb = LoadBalancer {
                state: lb.state_at(now),
                ..lb
            };
            state.load_balancers.insert(name, lb.clone());
            state.load_balancers_created += 1;
            lb
        }
    };
    match lb.ready_at.duration_since(now) {
        Ok(remaining) if !remaining.is_zero() => Err(ProviderError::RetryAfter {
            after: remaining,
            message: format!("load balancer {} is being provisioned", lb.name),
        }),
        _ => Ok(status(&lb, now)),
    }
}

/// Replaces the backends (and nothing else) of an existing load balancer.
pub fn update(state: &mut State, cluster: &str, svc: &ServiceSpec, nodes: &[LoadBalancerNode]) -> Result<()> {
    let name = default_load_balancer_name(&svc.uid);
    match state.load_balancers.get_mut(&name) {
        None => Err(invalid(format!(
            "load balancer {name} of service {}/{} does not exist",
            svc.namespace, svc.name
        ))),
        Some(lb) if lb.cluster != cluster => Err(foreign(lb, cluster)),
        Some(lb) => {
            lb.backends = backends(nodes);
            Ok(())
        }
    }
}

/// Deletes the cluster's load balancer of `svc`, releasing its IP. Nothing to delete is success;
/// so is another cluster's load balancer of that name (nothing of *this* cluster is left, and
/// the other one is not ours to touch).
pub fn delete(state: &mut State, cluster: &str, svc: &ServiceSpec) -> Result<()> {
    let name = default_load_balancer_name(&svc.uid);
    if state
        .load_balancers
        .get(&name)
        .is_some_and(|lb| lb.cluster == cluster)
    {
        state.load_balancers.remove(&name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use provider::ServicePort;

    use super::*;

    const T0: Duration = Duration::from_secs(1_700_000_000);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + T0 + Duration::from_secs(secs)
    }

    fn state(pool: &str) -> State {
        State::empty(
            "r".into(),
            vec!["z".into()],
            "10.0.0.0/16".parse().unwrap(),
            pool.parse().unwrap(),
        )
    }

    fn svc(uid: &str) -> ServiceSpec {
        ServiceSpec {
            uid: uid.into(),
            namespace: "ns".into(),
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

    fn node(n: &str) -> LoadBalancerNode {
        LoadBalancerNode {
            name: n.into(),
            provider_id: format!("simulator://z/{n}"),
            ..LoadBalancerNode::default()
        }
    }

    fn ip_of(status: &LoadBalancerStatus) -> String {
        status.ingress[0].ip.clone()
    }

    #[test]
    fn refused_services_change_nothing() {
        let mut s = state("203.0.113.0/24");
        ensure(
            &mut s,
            "c1",
            &ServiceSpec {
                requested_ip: "203.0.113.50".into(),
                ..svc("taken")
            },
            &[],
            Duration::ZERO,
            at(0),
        )
        .unwrap();
        ensure(&mut s, "c2", &svc("theirs"), &[], Duration::ZERO, at(0)).unwrap();
        let before = s.clone();
        let annotated = |k: &str, v: &str| ServiceSpec {
            annotations: BTreeMap::from([(k.to_string(), v.to_string())]),
            ..svc("u1")
        };
        let sctp = ServiceSpec {
            ports: vec![ServicePort {
                protocol: Protocol::Sctp,
                ..svc("u").ports[0].clone()
            }],
            ..svc("u1")
        };
        // (cluster, service, error label, message fragment)
        let cases = [
            (
                "c1",
                annotated(LOAD_BALANCER_TYPE_ANNOTATION, "external"),
                "implemented_elsewhere",
                "annotated",
            ),
            (
                "c1",
                annotated(LOAD_BALANCER_TYPE_ANNOTATION, "nlb"),
                "invalid_argument",
                "not understood",
            ),
            ("c1", sctp, "invalid_argument", "support TCP and UDP"),
            (
                "c1",
                ServiceSpec {
                    ports: vec![],
                    ..svc("u1")
                },
                "invalid_argument",
                "at least one port",
            ),
            (
                "c1",
                ServiceSpec {
                    requested_ip: "198.51.100.1".into(),
                    ..svc("u1")
                },
                "invalid_argument",
                "not an address of the pool",
            ),
            (
                "c1",
                ServiceSpec {
                    requested_ip: "203.0.113.50".into(),
                    ..svc("u1")
                },
                "invalid_argument",
                "already in use",
            ),
            (
                "c1",
                ServiceSpec {
                    requested_ip: "not-an-ip".into(),
                    ..svc("u1")
                },
                "invalid_argument",
                "not an IP address",
            ),
            (
                "c1",
                ServiceSpec {
                    source_ranges: vec!["10.0.0.0/33".into()],
                    ..svc("u1")
                },
                "invalid_argument",
                "not a CIDR",
            ),
            (
                "c1",
                svc("theirs"),
                "invalid_argument",
                "belongs to cluster \"c2\"",
            ),
            ("", svc("u1"), "invalid_argument", "cluster name"),
            ("c1", svc(""), "invalid_argument", "UID"),
        ];
        for (cluster, service, label, fragment) in cases {
            let e = ensure(&mut s, cluster, &service, &[node("n1")], Duration::ZERO, at(1)).unwrap_err();
            assert_eq!(e.metric_label(), label, "{service:?}: {e}");
            assert!(e.to_string().contains(fragment), "{e}");
            assert_eq!(s, before, "{e}: a refused ensure changes nothing");
        }
    }

    #[test]
    fn ensure_is_idempotent_and_updates_in_place() {
        let mut s = state("203.0.113.0/24");
        let first = ensure(&mut s, "c", &svc("u"), &[node("a")], Duration::ZERO, at(0)).unwrap();
        assert_eq!(ip_of(&first), "203.0.113.1");
        let mut changed = svc("u");
        changed.ports[0].port = 8080;
        changed.external_traffic_policy = ExternalTrafficPolicy::Local;
        changed.health_check_node_port = 31000;
        let second = ensure(
            &mut s,
            "c",
            &changed,
            &[node("b"), node("a"), node("b")],
            Duration::ZERO,
            at(5),
        )
        .unwrap();
        assert_eq!(first, second);
        assert_eq!(s.load_balancers.len(), 1);
        assert_eq!(s.load_balancers_created, 1, "ensured twice, created once");
        let lb = &s.load_balancers[&default_load_balancer_name("u")];
        assert_eq!(lb.listeners[0].port, 8080);
        assert_eq!(
            (lb.health_check.port, lb.health_check.path.as_str()),
            (31000, "/healthz")
        );
        let names: Vec<_> = lb.backends.iter().map(|b| b.node_name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(lb.created_at, at(0));
        assert_eq!(get(&s, "c", &svc("u"), at(6)), Some(second));
        assert_eq!(get(&s, "other", &svc("u"), at(6)), None);
    }

    /// Every read against an ensure of the same request on a copy of the state: `Converged`
    /// exactly when that ensure would change nothing and answer the same status; an error
    /// exactly when it would answer that error.
    #[test]
    fn a_read_says_converged_only_when_an_ensure_would_change_nothing() {
        let mut s = state("203.0.113.0/24");
        ensure(
            &mut s,
            "c",
            &svc("u"),
            &[node("a"), node("b")],
            Duration::ZERO,
            at(0),
        )
        .unwrap();
        let _ = ensure(
            &mut s,
            "c",
            &svc("p"),
            &[node("a")],
            Duration::from_secs(60),
            at(0),
        );
        ensure(&mut s, "other", &svc("f"), &[node("a")], Duration::ZERO, at(0)).unwrap();
        let status = get(&s, "c", &svc("u"), at(1)).unwrap();
        let with = |edit: fn(&mut ServiceSpec)| {
            let mut spec = svc("u");
            edit(&mut spec);
            spec
        };
        let get_of = |spec: ServiceSpec| LoadBalancerRead {
            service: spec,
            ensure_nodes: None,
        };
        let check = |spec: ServiceSpec, nodes: &[&str]| LoadBalancerRead {
            service: spec,
            ensure_nodes: Some(nodes.iter().map(|n| node(n)).collect()),
        };
        use LoadBalancerObservation::{Absent, Converged, NeedsEnsure, Present};
        // (read, what it answers: an observation or an error's metric label)
        let cases: Vec<(LoadBalancerRead, Result<LoadBalancerObservation, &str>)> = vec![
            (get_of(svc("u")), Ok(Present(status.clone()))),
            (get_of(svc("missing")), Ok(Absent)),
            (get_of(svc("f")), Ok(Absent)),
            (check(svc("u"), &["a", "b"]), Ok(Converged(status.clone()))),
            (check(svc("u"), &["b", "a", "b"]), Ok(Converged(status.clone()))),
            (
                check(with(|s| s.requested_ip = "203.0.113.1".into()), &["a", "b"]),
                Ok(Converged(status.clone())),
            ),
            (check(svc("u"), &["a"]), Ok(NeedsEnsure)),
            (check(svc("u"), &["a", "b", "c"]), Ok(NeedsEnsure)),
            (
                check(with(|s| s.ports[0].port = 8080), &["a", "b"]),
                Ok(NeedsEnsure),
            ),
            (
                check(with(|s| s.ports[0].node_port = 30081), &["a", "b"]),
                Ok(NeedsEnsure),
            ),
            (
                check(with(|s| s.source_ranges = vec!["10.0.0.0/8".into()]), &["a", "b"]),
                Ok(NeedsEnsure),
            ),
            (
                check(
                    with(|s| {
                        s.external_traffic_policy = ExternalTrafficPolicy::Local;
                        s.health_check_node_port = 31000;
                    }),
                    &["a", "b"],
                ),
                Ok(NeedsEnsure),
            ),
            (
                check(with(|s| s.session_affinity_client_ip = true), &["a", "b"]),
                Ok(NeedsEnsure),
            ),
            (
                check(with(|s| s.requested_ip = "203.0.113.9".into()), &["a", "b"]),
                Ok(NeedsEnsure),
            ),
            (
                check(with(|s| s.name = "renamed".into()), &["a", "b"]),
                Ok(NeedsEnsure),
            ),
            (check(svc("missing"), &["a"]), Ok(NeedsEnsure)),
            (check(svc("p"), &["a"]), Ok(NeedsEnsure)),
            (check(svc("f"), &["a"]), Err("invalid_argument")),
            (check(with(|s| s.ports.clear()), &["a"]), Err("invalid_argument")),
            (
                check(
                    with(|s| {
                        s.annotations.insert(
                            LOAD_BALANCER_TYPE_ANNOTATION.into(),
                            LOAD_BALANCER_TYPE_EXTERNAL.into(),
                        );
                    }),
                    &["a"],
                ),
                Err("implemented_elsewhere"),
            ),
        ];
        for (read, want) in cases {
            let got = observe(&s, "c", &read, at(1)).map_err(|e| e.metric_label());
            assert_eq!(got, want, "{read:?}");
            let Some(nodes) = &read.ensure_nodes else {
                continue;
            };
            let mut after = s.clone();
            let ensured = ensure(&mut after, "c", &read.service, nodes, Duration::ZERO, at(1));
            let unchanged = crate::cloud::dry_run_change(&s, &after).is_empty();
            match (got, ensured) {
                (Ok(Converged(seen)), Ok(answer)) => {
                    assert!(unchanged, "{read:?}: converged, yet an ensure changes the cloud");
                    assert_eq!(seen, answer);
                }
                (Ok(NeedsEnsure), ensured) => assert!(
                    !unchanged || ensured.is_err(),
                    "{read:?}: an ensure would change nothing and answer at once"
                ),
                (Err(label), Err(e)) => assert_eq!(label, e.metric_label()),
                (got, ensured) => panic!("{read:?}: read {got:?}, ensure {ensured:?}"),
            }
        }
    }

    #[test]
    fn health_check_follows_traffic_policy() {
        let cases = [
            (ExternalTrafficPolicy::Cluster, 0, KUBE_PROXY_HEALTH_PORT),
            (ExternalTrafficPolicy::Cluster, 31000, KUBE_PROXY_HEALTH_PORT),
            (ExternalTrafficPolicy::Local, 31000, 31000),
            (ExternalTrafficPolicy::Local, 0, KUBE_PROXY_HEALTH_PORT),
        ];
        for (policy, hc_port, want) in cases {
            let spec = ServiceSpec {
                external_traffic_policy: policy,
                health_check_node_port: hc_port,
                ..svc("u")
            };
            let d = desired("c", &spec).unwrap();
            assert_eq!(d.health_check.port, want, "{policy:?} {hc_port}");
        }
    }

    #[test]
    fn provisioning_answers_retry_after_then_active() {
        let mut s = state("203.0.113.0/24");
        let delay = Duration::from_secs(10);
        let e = ensure(&mut s, "c", &svc("u"), &[], delay, at(0)).unwrap_err();
        assert_eq!(
            e,
            ProviderError::RetryAfter {
                after: delay,
                message: format!(
                    "load balancer {} is being provisioned",
                    default_load_balancer_name("u")
                )
            }
        );
        assert_eq!(
            get(&s, "c", &svc("u"), at(3)),
            Some(LoadBalancerStatus::default())
        );
        match ensure(&mut s, "c", &svc("u"), &[], delay, at(4)) {
            Err(ProviderError::RetryAfter { after, .. }) => assert_eq!(after, Duration::from_secs(6)),
            other => panic!("{other:?}"),
        }
        let ready = ensure(&mut s, "c", &svc("u"), &[], delay, at(10)).unwrap();
        assert_eq!(ip_of(&ready), "203.0.113.1");
        assert_eq!(s.load_balancers.len(), 1);
    }

    #[test]
    fn requested_ip_is_honoured_and_can_move() {
        let mut s = state("203.0.113.0/24");
        let want = ServiceSpec {
            requested_ip: "203.0.113.77".into(),
            ..svc("u")
        };
        assert_eq!(
            ip_of(&ensure(&mut s, "c", &want, &[], Duration::ZERO, at(0)).unwrap()),
            "203.0.113.77"
        );
        assert_eq!(
            s.load_balancer_ip_cursor, None,
            "a requested IP does not move the cursor"
        );
        let moved = ServiceSpec {
            requested_ip: "203.0.113.78".into(),
            ..svc("u")
        };
        assert_eq!(
            ip_of(&ensure(&mut s, "c", &moved, &[], Duration::ZERO, at(1)).unwrap()),
            "203.0.113.78"
        );
        // dropping loadBalancerIP keeps the address it has
        assert_eq!(
            ip_of(&ensure(&mut s, "c", &svc("u"), &[], Duration::ZERO, at(2)).unwrap()),
            "203.0.113.78"
        );
    }

    #[test]
    fn update_and_delete() {
        let mut s = state("203.0.113.0/24");
        let e = update(&mut s, "c", &svc("u"), &[node("a")]).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        ensure(&mut s, "c", &svc("u"), &[node("a")], Duration::ZERO, at(0)).unwrap();
        let before_ports = s.load_balancers[&default_load_balancer_name("u")]
            .listeners
            .clone();
        let mut other_ports = svc("u");
        other_ports.ports[0].port = 9999;
        update(&mut s, "c", &other_ports, &[node("b")]).unwrap();
        let lb = &s.load_balancers[&default_load_balancer_name("u")];
        assert_eq!(
            lb.backends,
            vec![Backend {
                node_name: "b".into(),
                provider_id: "simulator://z/b".into()
            }]
        );
        assert_eq!(lb.listeners, before_ports, "update touches backends only");
        assert_eq!(
            update(&mut s, "other", &svc("u"), &[])
                .unwrap_err()
                .metric_label(),
            "invalid_argument"
        );
        delete(&mut s, "other", &svc("u")).unwrap();
        assert_eq!(
            s.load_balancers.len(),
            1,
            "another cluster's delete leaves it alone"
        );
        delete(&mut s, "c", &svc("u")).unwrap();
        assert!(s.load_balancers.is_empty());
        delete(&mut s, "c", &svc("u")).unwrap();
    }

    #[test]
    fn ips_are_unique_and_not_reused_at_once_and_pool_exhaustion_is_unavailable() {
        let mut s = state("192.0.2.0/29"); // 6 usable
        let mut seen = Vec::new();
        for i in 0..6 {
            let st = ensure(&mut s, "c", &svc(&format!("u{i}")), &[], Duration::ZERO, at(0)).unwrap();
            seen.push(ip_of(&st));
        }
        assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 6);
        let e = ensure(&mut s, "c", &svc("u6"), &[], Duration::ZERO, at(0)).unwrap_err();
        assert_eq!(e.metric_label(), "unavailable", "{e}");
        delete(&mut s, "c", &svc("u0")).unwrap();
        delete(&mut s, "c", &svc("u1")).unwrap();
        // next-fit: .1 was freed first but the cursor is at .6, so .1 comes next, then .2
        let a = ip_of(&ensure(&mut s, "c", &svc("u7"), &[], Duration::ZERO, at(0)).unwrap());
        assert_eq!(a, "192.0.2.1");
    }
}
