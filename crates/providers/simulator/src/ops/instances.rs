//! Instances: the batched InstancesV2 lookup and the admin actions (launch, stop, start,
//! terminate).

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    time::SystemTime,
};

use provider::{AddressType, InstanceInfo, InstanceMetadata, NodeAddress, NodeRef, ProviderError};
use serde::{Deserialize, Serialize};

use crate::{
    PROVIDER_NAME, SimulatorError,
    inventory::{DEFAULT_INSTANCE_TYPE, check_label, check_subdomain},
    ipam::Pool,
    state::{Instance, InstanceState, State},
};

/// Splits `simulator://<zone>/<instance-id>`. Anything else is the caller's mistake
/// (`InvalidArgument`), never a definite "not found": a Node must not be deleted because its
/// providerID was misread.
pub fn parse_provider_id(provider_id: &str) -> Result<(&str, &str), ProviderError> {
    let Some(rest) = provider_id
        .strip_prefix(PROVIDER_NAME)
        .and_then(|r| r.strip_prefix("://"))
    else {
        return Err(match provider_id.split_once("://") {
            Some((scheme, _)) => ProviderError::InvalidArgument(format!(
                "providerID {provider_id:?} belongs to provider {scheme:?}, not {PROVIDER_NAME:?}"
            )),
            None => ProviderError::InvalidArgument(format!(
                "providerID {provider_id:?} is malformed; expected {PROVIDER_NAME}://<zone>/<instance-id>"
            )),
        });
    };
    match rest.split_once('/') {
        Some((zone, id)) if !zone.is_empty() && !id.is_empty() && !id.contains('/') => Ok((zone, id)),
        _ => Err(ProviderError::InvalidArgument(format!(
            "providerID {provider_id:?} is malformed; expected {PROVIDER_NAME}://<zone>/<instance-id>"
        ))),
    }
}

/// Answers one entry per node, in order. By providerID when set (the id decides; the zone part
/// is informational, as in AWS), else by name: the newest live instance with that name.
pub fn lookup(state: &State, nodes: &[NodeRef]) -> Vec<Result<InstanceInfo, ProviderError>> {
    // One index per call keeps a batch linear in (instances + nodes).
    let mut by_id: HashMap<&str, &Instance> = HashMap::with_capacity(state.instances.len());
    let mut by_name: HashMap<&str, &Instance> = HashMap::new();
    for inst in &state.instances {
        by_id.insert(&inst.id, inst);
        if inst.is_live() {
            // launch order: a later instance replaces an earlier one of the same name
            by_name.insert(&inst.name, inst);
        }
    }
    nodes
        .iter()
        .map(|node| {
            let inst = if !node.provider_id.is_empty() {
                let (_, id) = parse_provider_id(&node.provider_id)?;
                by_id.get(id).copied().filter(|i| i.is_live())
            } else if !node.name.is_empty() {
                by_name.get(node.name.as_str()).copied()
            } else {
                return Err(ProviderError::InvalidArgument(
                    "a node needs a name or a providerID".into(),
                ));
            };
            match inst {
                Some(i) => Ok(InstanceInfo {
                    metadata: metadata(state, i),
                    shutdown: i.state == InstanceState::Stopped,
                }),
                None => Err(ProviderError::InstanceNotFound(if node.provider_id.is_empty() {
                    format!("no instance named {:?}", node.name)
                } else {
                    format!(
                        "instance of {} does not exist (or is terminated)",
                        node.provider_id
                    )
                })),
            }
        })
        .collect()
}

/// What the cloud reports about a live instance.
pub fn metadata(state: &State, i: &Instance) -> InstanceMetadata {
    InstanceMetadata {
        provider_id: i.provider_id(),
        instance_type: i.instance_type.clone(),
        addresses: addresses(state, i),
        zone: i.zone.clone(),
        region: state.region.clone(),
        additional_labels: i.labels.clone(),
    }
}

/// Addresses in the order AWS reports them: private IP, public IP, private DNS, hostname.
pub fn addresses(state: &State, i: &Instance) -> Vec<NodeAddress> {
    let mut a = vec![NodeAddress::new(
        AddressType::InternalIP,
        i.private_ip.to_string(),
    )];
    if let Some(ip) = i.public_ip {
        a.push(NodeAddress::new(AddressType::ExternalIP, ip.to_string()));
    }
    a.push(NodeAddress::new(
        AddressType::InternalDNS,
        format!("{}.{}.compute.internal", i.name, state.region),
    ));
    a.push(NodeAddress::new(AddressType::Hostname, i.name.clone()));
    a
}

/// What the admin API takes to launch an instance.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewInstance {
    /// Name (the Node name); required.
    pub name: String,
    /// Instance type; default `sim.medium`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Zone; default: the zone with the fewest live instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Private IP; default: allocated from the instance subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_ip: Option<IpAddr>,
    /// Public IP; default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<IpAddr>,
    /// Extra labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl NewInstance {
    /// A running instance named `name` with every default.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}

/// Launches an instance with id `id` at `now`.
pub fn launch(
    state: &mut State,
    spec: NewInstance,
    id: String,
    now: SystemTime,
) -> Result<Instance, SimulatorError> {
    check_subdomain(&spec.name).map_err(SimulatorError::Invalid)?;
    if let Some(other) = state
        .instances
        .iter()
        .find(|i| i.is_live() && i.name == spec.name)
    {
        return Err(SimulatorError::Conflict(format!(
            "instance {} is already named {} (names of live instances are unique: they are Node names)",
            other.id, spec.name
        )));
    }
    let instance_type = match spec.instance_type {
        Some(t) if t.trim().is_empty() => {
            return Err(SimulatorError::Invalid("type must not be empty".into()));
        }
        Some(t) => t,
        None => DEFAULT_INSTANCE_TYPE.to_string(),
    };
    let zone = match spec.zone {
        Some(z) if state.zones.contains(&z) => z,
        Some(z) => {
            return Err(SimulatorError::Invalid(format!(
                "zone {z} is not a zone of this cloud ({})",
                state.zones.join(", ")
            )));
        }
        // Spread like an auto scaling group: the zone with the fewest live instances.
        None => state
            .zones
            .iter()
            .min_by_key(|z| {
                state
                    .instances
                    .iter()
                    .filter(|i| i.is_live() && &i.zone == *z)
                    .count()
            })
            .cloned()
            .ok_or_else(|| SimulatorError::Internal("the cloud has no zones".into()))?,
    };
    for (k, v) in &spec.labels {
        check_label(k, v).map_err(SimulatorError::Invalid)?;
    }
    let subnet = Pool::new(state.instance_subnet);
    let private_in_use = |ip: IpAddr| state.instances.iter().any(|i| i.is_live() && i.private_ip == ip);
    let (private_ip, cursor) = match spec.private_ip {
        Some(ip) => {
            subnet.check_requested(ip, private_in_use).map_err(|m| {
                if subnet.contains(ip) {
                    SimulatorError::Conflict(format!("private_ip: {m}"))
                } else {
                    SimulatorError::Invalid(format!("private_ip: {m}"))
                }
            })?;
            (ip, state.instance_ip_cursor)
        }
        None => {
            let ip = subnet
                .allocate(state.instance_ip_cursor, private_in_use)
                .ok_or_else(|| {
                    SimulatorError::Conflict(format!("instance subnet {} is full", state.instance_subnet))
                })?;
            (ip, Some(ip))
        }
    };
    if let Some(ip) = spec.public_ip {
        if state.load_balancer_pool.contains(&ip) {
            return Err(SimulatorError::Invalid(format!(
                "public_ip {ip} is inside the load balancer pool {}",
                state.load_balancer_pool
            )));
        }
        if let Some(other) = state
            .instances
            .iter()
            .find(|i| i.is_live() && i.public_ip == Some(ip))
        {
            return Err(SimulatorError::Conflict(format!(
                "public_ip {ip} is already used by {}",
                other.id
            )));
        }
    }
    if state.instances.iter().any(|i| i.id == id) {
        return Err(SimulatorError::Internal(format!(
            "instance id {id} is already taken"
        )));
    }
    let inst = Instance {
        id,
        name: spec.name,
        instance_type,
        zone,
        private_ip,
        public_ip: spec.public_ip,
        state: InstanceState::Running,
        labels: spec.labels,
        launched_at: now,
    };
    state.instance_ip_cursor = cursor;
    state.instances.push(inst.clone());
    Ok(inst)
}

/// A power action on an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// running → stopped.
    Stop,
    /// stopped → running.
    Start,
    /// any → terminated, for good.
    Terminate,
}

/// Applies `action` to the instance `id`. Repeating an action is a no-op success, as in EC2;
/// stopping or starting a terminated instance is a conflict.
pub fn act(state: &mut State, id: &str, action: Action) -> Result<Instance, SimulatorError> {
    let inst = state
        .instances
        .iter_mut()
        .find(|i| i.id == id)
        .ok_or_else(|| SimulatorError::NotFound(format!("no instance {id}")))?;
    if inst.state == InstanceState::Terminated && action != Action::Terminate {
        return Err(SimulatorError::Conflict(format!("instance {id} is terminated")));
    }
    inst.state = match action {
        Action::Stop => InstanceState::Stopped,
        Action::Start => InstanceState::Running,
        Action::Terminate => InstanceState::Terminated,
    };
    Ok(inst.clone())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn state() -> State {
        let mut s = crate::inventory::parse(
            "zones: [z-a, z-b]\ninstances:\n\
             - {name: run, id: i-00000000000000001, zone: z-a, private_ip: 10.0.0.10, public_ip: 198.51.100.1, labels: {team: x}}\n\
             - {name: stop, id: i-00000000000000002, zone: z-b, state: stopped}\n\
             - {name: old, id: i-00000000000000003, zone: z-a, state: terminated}\n\
             - {name: twin, id: i-00000000000000004, zone: z-a, state: terminated}\n\
             - {name: twin, id: i-00000000000000005, zone: z-b}\n",
        )
        .unwrap()
        .into_state(now());
        s.region = "r-1".into();
        s
    }

    #[test]
    fn provider_ids() {
        let cases = [
            ("simulator://z-a/i-1", Ok(("z-a", "i-1"))),
            ("aws:///us-east-1a/i-1", Err("belongs to provider \"aws\"")),
            ("i-1", Err("malformed")),
            ("simulator://i-1", Err("malformed")),
            ("simulator://z-a/", Err("malformed")),
            ("simulator:///i-1", Err("malformed")),
            ("simulator://z/a/b", Err("malformed")),
        ];
        for (pid, want) in cases {
            match (parse_provider_id(pid), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, w, "{pid}"),
                (Err(ProviderError::InvalidArgument(m)), Err(w)) => assert!(m.contains(w), "{pid}: {m}"),
                (got, want) => panic!("{pid}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn lookups_answer_each_node_in_order() {
        let s = state();
        // (node, expected: Ok(shutdown, instance id) | Err(metric label))
        type Want = Result<(bool, &'static str), &'static str>;
        let cases: Vec<(NodeRef, Want)> = vec![
            (
                NodeRef::new("x", "simulator://z-a/i-00000000000000001"),
                Ok((false, "i-00000000000000001")),
            ),
            (NodeRef::by_name("run"), Ok((false, "i-00000000000000001"))),
            (NodeRef::by_name("stop"), Ok((true, "i-00000000000000002"))),
            (
                NodeRef::new("stop", "simulator://wrong-zone/i-00000000000000002"),
                Ok((true, "i-00000000000000002")),
            ),
            (NodeRef::by_name("old"), Err("instance_not_found")),
            (
                NodeRef::new("old", "simulator://z-a/i-00000000000000003"),
                Err("instance_not_found"),
            ),
            (NodeRef::by_name("twin"), Ok((false, "i-00000000000000005"))),
            (NodeRef::by_name("nobody"), Err("instance_not_found")),
            (
                NodeRef::new("run", "simulator://z-a/i-deadbeef"),
                Err("instance_not_found"),
            ),
            (NodeRef::new("run", "gce://p/z/run"), Err("invalid_argument")),
            (NodeRef::new("run", "garbage"), Err("invalid_argument")),
            (NodeRef::default(), Err("invalid_argument")),
        ];
        let nodes: Vec<NodeRef> = cases.iter().map(|(n, _)| n.clone()).collect();
        let got = lookup(&s, &nodes);
        assert_eq!(got.len(), cases.len());
        for ((node, want), got) in cases.iter().zip(got) {
            match (got, want) {
                (Ok(info), Ok((shutdown, id))) => {
                    assert_eq!(info.shutdown, *shutdown, "{node:?}");
                    assert!(info.metadata.provider_id.ends_with(id), "{node:?}: {info:?}");
                }
                (Err(e), Err(label)) => assert_eq!(e.metric_label(), *label, "{node:?}: {e}"),
                (got, want) => panic!("{node:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn metadata_describes_the_instance() {
        let s = state();
        let got = lookup(&s, &[NodeRef::by_name("run")]).remove(0).unwrap().metadata;
        let want = InstanceMetadata {
            provider_id: "simulator://z-a/i-00000000000000001".into(),
            instance_type: DEFAULT_INSTANCE_TYPE.into(),
            addresses: vec![
                NodeAddress::new(AddressType::InternalIP, "10.0.0.10"),
                NodeAddress::new(AddressType::ExternalIP, "198.51.100.1"),
                NodeAddress::new(AddressType::InternalDNS, "run.r-1.compute.internal"),
                NodeAddress::new(AddressType::Hostname, "run"),
            ],
            zone: "z-a".into(),
            region: "r-1".into(),
            additional_labels: [("team".to_string(), "x".to_string())].into(),
        };
        assert_eq!(got, want);
    }

    #[test]
    fn launch_checks_and_defaults() {
        let mut s = state();
        let inst = launch(
            &mut s,
            NewInstance::named("new"),
            "i-0000000000000000a".into(),
            now(),
        )
        .unwrap();
        assert_eq!(inst.zone, "z-a", "z-b has more live instances");
        assert_eq!(inst.state, InstanceState::Running);
        assert!(Pool::new(s.instance_subnet).contains(inst.private_ip));
        let before = s.clone();
        // (spec, error kind, message fragment)
        let cases = [
            (NewInstance::named("run"), "conflict", "already named run"),
            (NewInstance::named("Bad_Name"), "invalid", "not a valid Node name"),
            (
                NewInstance {
                    zone: Some("z-q".into()),
                    ..NewInstance::named("a")
                },
                "invalid",
                "not a zone",
            ),
            (
                NewInstance {
                    private_ip: Some("10.0.0.10".parse().unwrap()),
                    ..NewInstance::named("a")
                },
                "conflict",
                "already in use",
            ),
            (
                NewInstance {
                    private_ip: Some("10.9.0.0".parse().unwrap()),
                    ..NewInstance::named("a")
                },
                "invalid",
                "not an address of the pool",
            ),
            (
                NewInstance {
                    public_ip: Some("198.51.100.1".parse().unwrap()),
                    ..NewInstance::named("a")
                },
                "conflict",
                "already used",
            ),
            (
                NewInstance {
                    public_ip: Some("203.0.113.5".parse().unwrap()),
                    ..NewInstance::named("a")
                },
                "invalid",
                "load balancer pool",
            ),
            (
                NewInstance {
                    instance_type: Some(" ".into()),
                    ..NewInstance::named("a")
                },
                "invalid",
                "type",
            ),
            (
                NewInstance {
                    labels: [("bad key!".into(), "v".into())].into(),
                    ..NewInstance::named("a")
                },
                "invalid",
                "label key",
            ),
        ];
        for (spec, kind, fragment) in cases {
            let e = launch(&mut s, spec.clone(), "i-0000000000000000b".into(), now()).unwrap_err();
            assert_eq!(e.kind(), kind, "{spec:?}: {e}");
            assert!(e.to_string().contains(fragment), "{spec:?}: {e}");
            assert_eq!(s, before, "a refused launch changes nothing");
        }
        // a terminated instance's name and private IP are free again
        let reuse = NewInstance {
            private_ip: Some(s.instances[2].private_ip),
            ..NewInstance::named("old")
        };
        launch(&mut s, reuse, "i-0000000000000000c".into(), now()).unwrap();
    }

    #[test]
    fn power_actions() {
        let mut s = state();
        // (id, action, expected state or error kind)
        let cases = [
            ("i-00000000000000001", Action::Stop, Ok(InstanceState::Stopped)),
            ("i-00000000000000001", Action::Stop, Ok(InstanceState::Stopped)),
            ("i-00000000000000001", Action::Start, Ok(InstanceState::Running)),
            (
                "i-00000000000000001",
                Action::Terminate,
                Ok(InstanceState::Terminated),
            ),
            (
                "i-00000000000000001",
                Action::Terminate,
                Ok(InstanceState::Terminated),
            ),
            ("i-00000000000000001", Action::Start, Err("conflict")),
            ("i-00000000000000003", Action::Stop, Err("conflict")),
            ("i-0ffffffffffffffff", Action::Stop, Err("not_found")),
        ];
        for (id, action, want) in cases {
            match (act(&mut s, id, action), want) {
                (Ok(i), Ok(st)) => assert_eq!(i.state, st, "{id} {action:?}"),
                (Err(e), Err(kind)) => assert_eq!(e.kind(), kind, "{id} {action:?}: {e}"),
                (got, want) => panic!("{id} {action:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
