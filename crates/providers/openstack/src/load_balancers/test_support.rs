//! Services the load-balancer modules' unit tests share.

use provider::{Protocol, ServicePort, ServiceSpec};

/// `default/web` (UID `uid`) with an HTTP port (80 to node port 30080) and a DNS one (UDP 53 to
/// 30053), annotated with `annotations`.
pub fn web_and_dns(annotations: &[(&str, &str)]) -> ServiceSpec {
    ServiceSpec {
        uid: "uid".into(),
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![
            ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: 30080,
            },
            ServicePort {
                name: "dns".into(),
                protocol: Protocol::Udp,
                port: 53,
                node_port: 30053,
            },
        ],
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        ..ServiceSpec::default()
    }
}
