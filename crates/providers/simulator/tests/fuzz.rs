//! Property tests of what the simulator reads from outside: the inventory file, the state file,
//! its admin API (knobs, instances, routes as JSON) and the Services a load balancer is asked
//! for (annotations, ports, source ranges, the requested IP). Each input gets a clear error or
//! the right answer, never a panic.
//!
//! 256 cases per property by default; `PROPTEST_CASES=100000` (what `make fuzz` sets) for the
//! full run.

use std::{collections::BTreeMap, net::Ipv4Addr, sync::Arc};

use axum::body::Body;
use proptest::prelude::*;
use provider::{ExternalTrafficPolicy, Protocol, Provider, ProviderError, ServicePort, ServiceSpec};
use provider_simulator::{InstanceState, Simulator, SimulatorConfig, admin_router, inventory};
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// One instance of a generated inventory.
#[derive(Debug, Clone)]
struct Machine {
    name: String,
    id: Option<String>,
    instance_type: Option<String>,
    zone: Option<usize>,
    /// The host part in 10.0.0.0/16.
    host: Option<u16>,
    state: Option<&'static str>,
    labels: BTreeMap<String, String>,
}

fn machine() -> impl Strategy<Value = Machine> {
    (
        "[a-z][a-z0-9-]{0,10}[a-z0-9]",
        proptest::option::of("[0-9a-f]{17}"),
        proptest::option::of("sim\\.[a-z]{1,6}"),
        proptest::option::of(0usize..2),
        proptest::option::of(2u16..60000),
        proptest::option::of(prop_oneof![Just("running"), Just("stopped"), Just("terminated")]),
        proptest::collection::btree_map("[a-z]{1,8}", "[a-z0-9]{0,8}", 0..3),
    )
        .prop_map(|(name, id, instance_type, zone, host, state, labels)| Machine {
            name,
            id: id.map(|h| format!("i-{h}")),
            instance_type,
            zone,
            host,
            state,
            labels,
        })
}

/// Machines whose names, ids and addresses are all distinct (what a valid inventory has).
fn machines() -> impl Strategy<Value = Vec<Machine>> {
    proptest::collection::vec(machine(), 0..6).prop_map(|mut all| {
        let mut names = std::collections::HashSet::new();
        let mut ids = std::collections::HashSet::new();
        let mut hosts = std::collections::HashSet::new();
        all.retain(|m| names.insert(m.name.clone()));
        for m in &mut all {
            if m.id.as_ref().is_some_and(|id| !ids.insert(id.clone())) {
                m.id = None;
            }
            if m.host.is_some_and(|h| !hosts.insert(h)) {
                m.host = None;
            }
        }
        all
    })
}

const ZONES: [&str; 2] = ["sim-east-1a", "sim-east-1b"];

fn ip(host: u16) -> Ipv4Addr {
    let [hi, lo] = host.to_be_bytes();
    Ipv4Addr::new(10, 0, hi, lo)
}

/// The inventory's YAML, in the style of the example (block lists, flow maps for labels).
fn render(machines: &[Machine]) -> String {
    let mut text = String::from(
        "# generated\nregion: sim-east-1\nzones: [sim-east-1a, sim-east-1b]\ninstance_subnet: 10.0.0.0/16\ninstances:\n",
    );
    if machines.is_empty() {
        text = text.replace("instances:\n", "instances: []\n");
    }
    for m in machines {
        text.push_str(&format!("  - name: {}\n", m.name));
        if let Some(id) = &m.id {
            text.push_str(&format!("    id: {id}\n"));
        }
        if let Some(t) = &m.instance_type {
            text.push_str(&format!("    type: {t}\n"));
        }
        if let Some(z) = m.zone {
            text.push_str(&format!("    zone: {}\n", ZONES[z]));
        }
        if let Some(h) = m.host {
            text.push_str(&format!("    private_ip: {}\n", ip(h)));
        }
        if let Some(s) = m.state {
            text.push_str(&format!("    state: {s}\n"));
        }
        if !m.labels.is_empty() {
            let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}: \"{v}\"")).collect();
            text.push_str(&format!("    labels: {{{}}}\n", labels.join(", ")));
        }
    }
    text
}

/// `text` with one edit at `at` (a fraction of its length): a character replaced, removed or
/// inserted, or a line dropped or doubled.
fn mutate(text: &str, at: f64, edit: u8, c: char) -> String {
    let chars: Vec<char> = text.chars().collect();
    let i = ((chars.len() as f64) * at) as usize % chars.len().max(1);
    let mut out: Vec<char> = chars.clone();
    match edit % 5 {
        0 if !out.is_empty() => out[i] = c,
        1 if !out.is_empty() => {
            out.remove(i);
        }
        2 => out.insert(i.min(out.len()), c),
        _ => {
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let l = i % lines.len();
                if edit % 5 == 3 {
                    lines.remove(l);
                } else {
                    lines.insert(l, lines[l]);
                }
            }
            return lines.join("\n");
        }
    }
    out.into_iter().collect()
}

fn yaml_char() -> impl Strategy<Value = char> {
    prop_oneof![
        proptest::sample::select(vec![
            ':', '-', ' ', '\n', '\t', '"', '\'', '[', ']', '{', '}', ',', '#', '&', '*', '!', '|', '>', '%',
            '@', '`', '?', '0', 'a', '\u{0}', '\u{feff}', 'é',
        ]),
        any::<char>(),
    ]
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![Just(Protocol::Tcp), Just(Protocol::Udp), Just(Protocol::Sctp)]
}

/// Services as a controller could send them, valid or not.
fn service() -> impl Strategy<Value = ServiceSpec> {
    let annotation = prop_oneof![
        Just("simulator.cloudgateway.io/load-balancer-type".to_owned()),
        Just("service.beta.kubernetes.io/aws-load-balancer-type".to_owned()),
        "[a-z./-]{1,20}",
    ];
    let value = prop_oneof![
        Just("simulator".to_owned()),
        Just("external".to_owned()),
        Just(String::new()),
        ".{0,12}",
    ];
    let port = (any::<String>(), protocol(), any::<u16>(), any::<u16>()).prop_map(
        |(name, protocol, port, node_port)| ServicePort {
            name,
            protocol,
            port,
            node_port,
        },
    );
    let address = prop_oneof![
        Just(String::new()),
        Just("203.0.113.9".to_owned()),
        Just("::1".to_owned()),
        Just(" 10.0.0.1 ".to_owned()),
        ".{0,16}",
    ];
    let range = prop_oneof![
        Just("0.0.0.0/0".to_owned()),
        Just("10.0.0.0/8".to_owned()),
        Just("fd00::/8".to_owned()),
        Just("10.0.0.1/33".to_owned()),
        ".{0,16}",
    ];
    (
        ("[a-z0-9-]{0,36}", "[a-z0-9-]{0,12}", "[a-z0-9-]{0,12}"),
        proptest::collection::vec(port, 0..4),
        any::<bool>(),
        any::<u16>(),
        proptest::collection::vec(range, 0..3),
        address,
        proptest::collection::btree_map(annotation, value, 0..3),
    )
        .prop_map(
            |((uid, namespace, name), ports, local, hc, source_ranges, requested_ip, annotations)| {
                ServiceSpec {
                    cluster_id: String::new(),
                    uid,
                    namespace,
                    name,
                    ports,
                    external_traffic_policy: if local {
                        ExternalTrafficPolicy::Local
                    } else {
                        ExternalTrafficPolicy::Cluster
                    },
                    health_check_node_port: hc,
                    source_ranges,
                    requested_ip,
                    annotations,
                    session_affinity_client_ip: false,
                    ip_families: Vec::new(),
                }
            },
        )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn in_memory() -> Arc<Simulator> {
    Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..SimulatorConfig::default()
    })
    .expect("simulator")
}

/// Admin API bodies: JSON shaped like what each route takes, with wrong types and values mixed in.
fn admin_body() -> impl Strategy<Value = Vec<u8>> {
    let duration = prop_oneof![
        Just(json!("50ms")),
        Just(json!("2s")),
        Just(json!("1m 30s")),
        Just(json!("0")),
        Just(json!("61s")),
        Just(json!("-1s")),
        Just(json!(5)),
        Just(Value::Null),
        ".{0,8}".prop_map(Value::String),
    ];
    let number = prop_oneof![
        any::<f64>().prop_map(|f| json!(f)),
        Just(json!(0.5)),
        Just(json!(-1)),
        Just(json!(1e308)),
        Just(Value::Null),
        Just(json!("x")),
    ];
    let knobs = (
        duration.clone(),
        duration.clone(),
        number.clone(),
        number.clone(),
        number,
        duration,
    )
        .prop_map(|(latency, jitter, rate, burst, error, delay)| {
            json!({
                "latency": latency,
                "latency_jitter": jitter,
                "rate_limit": {"rate": rate, "burst": burst},
                "error_rate": {"*": error},
                "lb_provision_delay": delay,
            })
        });
    let instance = (
        "[a-zA-Z0-9._-]{0,12}",
        proptest::option::of(".{0,20}"),
        proptest::option::of(".{0,12}"),
    )
        .prop_map(|(name, ip, zone)| json!({"name": name, "private_ip": ip, "zone": zone}));
    let route = (".{0,10}", ".{0,20}").prop_map(|(target, destination)| {
        json!({"cluster": "kubernetes", "target_node": target, "destination_cidr": destination})
    });
    prop_oneof![
        knobs.prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        instance.prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        route.prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        proptest::collection::vec(any::<u8>(), 0..48),
    ]
}

fn admin_path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/simulator/v1/knobs".to_owned()),
        Just("/simulator/v1/instances".to_owned()),
        Just("/simulator/v1/routes".to_owned()),
        Just("/simulator/v1/stats/reset".to_owned()),
        "[a-z0-9-]{0,20}".prop_map(|id| format!("/simulator/v1/instances/{id}/stop")),
        (
            "i-[0-9a-f]{17}",
            prop_oneof![Just("start"), Just("terminate"), Just("explode")]
        )
            .prop_map(|(id, action)| format!("/simulator/v1/instances/{id}/{action}")),
    ]
}

proptest! {
    #[test]
    fn fuzz_inventory_says_what_it_holds(machines in machines()) {
        let text = render(&machines);
        let inv = inventory::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(inv.instances.len(), machines.len(), "{}", text);
        for (got, want) in inv.instances.iter().zip(&machines) {
            prop_assert_eq!(&got.name, &want.name);
            if let Some(id) = &want.id {
                prop_assert_eq!(&got.id, id);
            }
            if let Some(t) = &want.instance_type {
                prop_assert_eq!(&got.instance_type, t);
            }
            if let Some(z) = want.zone {
                prop_assert_eq!(got.zone.as_str(), ZONES[z]);
            }
            prop_assert!(ZONES.contains(&got.zone.as_str()));
            match want.host {
                Some(h) => prop_assert_eq!(got.private_ip, std::net::IpAddr::V4(ip(h))),
                None => prop_assert!(inv.instance_subnet.contains(&got.private_ip)),
            }
            let state = match want.state {
                Some("stopped") => InstanceState::Stopped,
                Some("terminated") => InstanceState::Terminated,
                _ => InstanceState::Running,
            };
            prop_assert_eq!(got.state, state);
            prop_assert_eq!(&got.labels, &want.labels);
        }
    }

    #[test]
    fn fuzz_inventory_edits_get_an_error_naming_a_line(
        machines in machines(), at in 0.0f64..1.0, edit in any::<u8>(), c in yaml_char()
    ) {
        let text = mutate(&render(&machines), at, edit, c);
        if let Err(e) = inventory::parse(&text) {
            let lines = text.lines().count().max(1);
            if let Some(line) = e.line {
                prop_assert!(line >= 1 && line <= lines + 1, "line {} of {}: {}\n{}", line, lines, e, text);
            }
            prop_assert!(!e.message.is_empty());
            prop_assert!(!e.to_string().contains('\n'), "one line: {}", e);
        }
    }

    #[test]
    fn fuzz_inventory_text_parses_or_says_why(text in "(.|\n){0,200}") {
        let _ = inventory::parse(&text);
    }

    #[test]
    fn fuzz_state_file_opens_or_says_why(bytes in prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        Just(b"{}".to_vec()),
        Just(br#"{"version":1}"#.to_vec()),
        Just(br#"{"instances":[{"id":"i-1"}]}"#.to_vec()),
    ]) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.path().join("state.json");
        std::fs::write(&path, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Err(e) = Simulator::open(SimulatorConfig {
            state_file: Some(path),
            durable_writes: false,
            ..SimulatorConfig::default()
        }) {
            prop_assert!(e.to_string().contains("state.json"), "{}", e);
        }
    }

    #[test]
    fn fuzz_a_service_gets_a_load_balancer_or_a_typed_refusal(svc in service()) {
        let sim = in_memory();
        let lbs = Provider::load_balancers(&*sim).expect("load balancers");
        let answer = runtime().block_on(lbs.ensure_load_balancer("fuzz", &svc, &[]));
        match answer {
            Ok(status) => {
                prop_assert_eq!(status.ingress.len(), 1);
                prop_assert!(!svc.uid.is_empty() && !svc.ports.is_empty());
                prop_assert!(svc.ports.iter().all(|p| p.port != 0 && p.protocol != Protocol::Sctp));
                let kind = svc.annotations.get("simulator.cloudgateway.io/load-balancer-type");
                prop_assert!(kind.is_none_or(|k| k == "simulator"), "{:?}", kind);
            }
            Err(ProviderError::InvalidArgument(m)) => prop_assert!(!m.is_empty()),
            Err(ProviderError::ImplementedElsewhere(_)) => prop_assert_eq!(
                svc.annotations.get("simulator.cloudgateway.io/load-balancer-type").map(String::as_str),
                Some("external")
            ),
            Err(other) => prop_assert!(false, "{:?} for {:?}", other, svc),
        }
    }
}

proptest! {
    #[test]
    fn fuzz_admin_api_answers_or_says_why(
        method in prop_oneof![Just("GET"), Just("POST"), Just("PUT")],
        path in admin_path(),
        body in admin_body(),
    ) {
        let sim = in_memory();
        let request = http::Request::builder()
            .method(method)
            .uri(&path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (status, body) = runtime().block_on(async {
            let response = admin_router(sim.clone()).oneshot(request).await.expect("infallible");
            let status = response.status().as_u16();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap_or_default();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        });
        prop_assert!(status < 500, "{} {}: {} {}", method, path, status, body);
        if status >= 400 && status != 405 {
            prop_assert!(body["error"].as_str().is_some_and(|m| !m.is_empty()), "{} {}: {} {}", method, path, status, body);
        }
        // Whatever was accepted leaves knobs that validate.
        prop_assert!(sim.knobs().validate().is_ok());
    }
}
