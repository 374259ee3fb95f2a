//! Pure decisions of the service controller, as upstream's `controllers/service` makes them:
//! which Services want a load balancer, which need cleanup, which changes need the cloud, which
//! nodes are backends, and the writes (finalizer, status) to make. No I/O here.

use std::collections::BTreeMap;

use controller_kit::{
    load_balancers::BackendNode,
    names::{FINALIZER_LB_CLEANUP, labels::EXCLUDE_FROM_EXTERNAL_LBS},
    node::{has_taint, provider_id},
    patch::Patches,
};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service, ServiceSpec};
use serde_json::{Value, json};

/// The taint the cluster autoscaler puts on a node it is about to delete.
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// What a sync of one Service must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: not ours, or in sync.
    Nothing,
    /// Create or bring the load balancer to the Service's spec (finalizer first).
    Ensure,
    /// Only the backends changed: update them.
    UpdateHosts,
    /// Delete the load balancer, then drop the finalizer and the status.
    Cleanup,
}

/// What this controller last brought the cloud to for a Service.
#[derive(Debug, Clone)]
pub struct Synced {
    /// The Service as it was when its load balancer was ensured.
    pub service: Service,
    /// The backends it was ensured or updated with, by name: providerID.
    pub nodes: BTreeMap<String, String>,
}

fn spec(svc: &Service) -> ServiceSpec {
    svc.spec.clone().unwrap_or_default()
}

fn has_finalizer(svc: &Service) -> bool {
    svc.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER_LB_CLEANUP))
}

fn is_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

fn class_of(svc: &Service) -> Option<&str> {
    svc.spec.as_ref().and_then(|s| s.load_balancer_class.as_deref())
}

/// `wantsLoadBalancer`: type LoadBalancer and the class this controller serves (upstream
/// serves only Services without a class; `--load-balancer-class` serves that one class).
pub fn wants_load_balancer(svc: &Service, class: Option<&str>) -> bool {
    is_load_balancer(svc) && class_of(svc) == class
}

/// `needsCleanup`: the finalizer is set and the Service is being deleted or no longer a
/// LoadBalancer.
pub fn needs_cleanup(svc: &Service) -> bool {
    has_finalizer(svc) && (svc.metadata.deletion_timestamp.is_some() || !is_load_balancer(svc))
}

/// Decides a sync from the Service, what was last synced for it, and the current backends.
///
/// A LoadBalancer Service of another class is never touched, even with the finalizer (another
/// install serves it). A Service that is no longer a LoadBalancer has no class (the API server
/// clears it with the type), so every install cleans up what its own cloud holds for it.
pub fn decide(
    svc: &Service,
    last: Option<&Synced>,
    backends: &BTreeMap<String, String>,
    class: Option<&str>,
) -> Decision {
    if is_load_balancer(svc) && class_of(svc) != class {
        // Another install's class (or upstream's): never touch it, finalizer or not.
        return Decision::Nothing;
    }
    let wants = wants_load_balancer(svc, class);
    if needs_cleanup(svc) || (!wants && last.is_some()) {
        return Decision::Cleanup;
    }
    if !wants || svc.metadata.deletion_timestamp.is_some() {
        // Not ours, or being deleted without our finalizer: there is nothing of ours to keep.
        return Decision::Nothing;
    }
    match last {
        None => Decision::Ensure,
        Some(last) if needs_update(&last.service, svc, class) => Decision::Ensure,
        Some(last) if last.nodes != *backends => Decision::UpdateHosts,
        Some(_) => Decision::Nothing,
    }
}

/// `needsUpdate`: whether a change of the Service needs the cloud, upstream's checks in order.
pub fn needs_update(old: &Service, new: &Service, class: Option<&str>) -> bool {
    let (wants_old, wants_new) = (wants_load_balancer(old, class), wants_load_balancer(new, class));
    if !wants_old && !wants_new {
        return false;
    }
    if wants_old != wants_new {
        return true;
    }
    let (o, n) = (spec(old), spec(new));
    if o.load_balancer_source_ranges != n.load_balancer_source_ranges {
        return true;
    }
    if ports_differ(&o, &n) || o.session_affinity != n.session_affinity {
        return true;
    }
    if o.session_affinity_config != n.session_affinity_config || o.load_balancer_ip != n.load_balancer_ip {
        return true;
    }
    if o.external_ips.clone().unwrap_or_default() != n.external_ips.clone().unwrap_or_default() {
        return true;
    }
    if user_annotations(old) != user_annotations(new) || old.metadata.uid != new.metadata.uid {
        return true;
    }
    if o.external_traffic_policy != n.external_traffic_policy
        || o.health_check_node_port != n.health_check_node_port
    {
        return true;
    }
    o.ip_families.map_or(0, |f| f.len()) != n.ip_families.map_or(0, |f| f.len())
}

/// Ports compared by position: name, protocol, port, nodePort, targetPort, appProtocol.
fn ports_differ(o: &ServiceSpec, n: &ServiceSpec) -> bool {
    let (o, n) = (
        o.ports.clone().unwrap_or_default(),
        n.ports.clone().unwrap_or_default(),
    );
    o.len() != n.len()
        || o.iter().zip(&n).any(|(a, b)| {
            a.name != b.name
                || a.protocol.as_deref().unwrap_or("TCP") != b.protocol.as_deref().unwrap_or("TCP")
                || a.port != b.port
                || a.node_port != b.node_port
                || a.target_port != b.target_port
                || a.app_protocol != b.app_protocol
        })
}

/// Whether the exclude label keeps a node out of load balancers: any value that does not parse
/// as false (Go's `strconv.ParseBool`) excludes it, an empty or unparsable one included.
pub fn excluded_by_label(node: &Node) -> bool {
    let Some(value) = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXCLUDE_FROM_EXTERNAL_LBS))
    else {
        return false;
    };
    !matches!(value.as_str(), "0" | "f" | "F" | "FALSE" | "false" | "False")
}

/// Upstream's stable node set: a node is a backend unless it is being deleted, excluded by the
/// label, or tainted for deletion by the cluster autoscaler. Readiness does not count (KEP-3458:
/// a flapping node must not churn every load balancer).
pub fn is_backend(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && !excluded_by_label(node)
        && !has_taint(node, TAINT_TO_BE_DELETED)
}

/// The backends among `nodes`, sorted by name.
pub fn backends<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<BackendNode> {
    let mut backends: Vec<BackendNode> = nodes
        .into_iter()
        .filter(|n| is_backend(n))
        .map(|n| BackendNode {
            name: n.metadata.name.clone().unwrap_or_default(),
            provider_id: provider_id(n).to_owned(),
            addresses: n
                .status
                .as_ref()
                .and_then(|s| s.addresses.clone())
                .unwrap_or_default(),
            labels: n.metadata.labels.clone().unwrap_or_default(),
        })
        .collect();
    backends.sort_by(|a, b| a.name.cmp(&b.name));
    backends
}

/// What makes two backend sets the same to the cloud (`nodesSufficientlyEqual`): names and
/// providerIDs.
pub fn backend_identity(backends: &[BackendNode]) -> BTreeMap<String, String> {
    backends
        .iter()
        .map(|b| (b.name.clone(), b.provider_id.clone()))
        .collect()
}

/// The annotation recording which provider holds a Service's load balancer. A gateway swapped
/// for another vendor does not know that load balancer: such a Service is reported, never
/// re-provisioned or cleaned up at the wrong provider behind the operator's back (removing the
/// annotation provisions one at the provider of the moment).
pub const ANNOTATION_PROVIDER: &str = "service.cloudgateway.io/load-balancer-provider";

/// The annotations a user sets: what `needsUpdate` compares (our own provider record is not a
/// change of the Service).
fn user_annotations(svc: &Service) -> BTreeMap<String, String> {
    let mut annotations = svc.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(ANNOTATION_PROVIDER);
    annotations
}

/// The provider that holds the Service's load balancer, when it is not `current` (the one the
/// gateway serves now); `None` when it is, or when nothing is recorded.
pub fn former_provider(svc: &Service, current: Option<&str>) -> Option<String> {
    let current = current?;
    let recorded = svc.metadata.annotations.as_ref()?.get(ANNOTATION_PROVIDER)?;
    (recorded != current && !recorded.is_empty()).then(|| recorded.clone())
}

/// Whether `svc`, as read before its finalizer is written, shows no sign of a load balancer:
/// no cleanup finalizer (written before every cloud call, so a load balancer made before a crash
/// left it) and no ingress in its status (a load balancer of a controller that predates
/// finalizers). Its ensure then tells the gateway, which may skip the read an ensure starts with.
/// Only a hint: the provider's ensure finds a load balancer of the Service's name either way.
pub fn shows_no_load_balancer(svc: &Service) -> bool {
    let has_ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty());
    !has_finalizer(svc) && !has_ingress
}

/// Before the first cloud call: the finalizer, and the provider that is about to hold the load
/// balancer; `None` when both are there. The whole finalizer list is written, guarded by the
/// resourceVersion it was read at, so no other finalizer is lost.
pub fn add_finalizer(svc: &Service, provider: Option<&str>) -> Option<Patches> {
    let record = provider.filter(|p| {
        svc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_PROVIDER))
            .map(String::as_str)
            != Some(*p)
    });
    if has_finalizer(svc) && record.is_none() {
        return None;
    }
    let mut metadata = serde_json::Map::new();
    if !has_finalizer(svc) {
        let mut finalizers = svc.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(FINALIZER_LB_CLEANUP.to_owned());
        metadata.insert("finalizers".into(), json!(finalizers));
    }
    if let Some(provider) = record {
        metadata.insert("annotations".into(), json!({ ANNOTATION_PROVIDER: provider }));
    }
    Some(Patches::main(json!({ "metadata": metadata })))
}

/// The annotations an ensure answered for the Service (OCCM's `load-balancer-id` and
/// `load-balancer-address`), as a patch of those whose value differs: only keys under the
/// provider's own `prefix`, and none when it names none, so no provider can write over the
/// Service's other annotations. `None`: nothing to write.
pub fn provider_annotations(
    svc: &Service,
    answered: &BTreeMap<String, String>,
    prefix: &str,
) -> Option<BTreeMap<String, String>> {
    let current = svc.metadata.annotations.as_ref();
    let changed: BTreeMap<String, String> = answered
        .iter()
        .filter(|(key, _)| !prefix.is_empty() && key.starts_with(prefix) && key.len() > prefix.len())
        .filter(|(key, value)| current.and_then(|a| a.get(*key)) != Some(*value))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!changed.is_empty()).then_some(changed)
}

/// The merge patch setting `annotations`.
pub fn annotations_patch(annotations: &BTreeMap<String, String>) -> Value {
    json!({ "metadata": { "annotations": annotations } })
}

/// The finalizer removed once the load balancer is gone (every occurrence), and the status
/// cleared unless the Service is being deleted (it goes with the finalizer). Empty when there
/// is nothing to do.
pub fn remove_finalizer_and_status(svc: &Service) -> Patches {
    let main = has_finalizer(svc).then(|| {
        let rest: Vec<&String> = svc
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != FINALIZER_LB_CLEANUP)
            .collect();
        let finalizers = if rest.is_empty() { Value::Null } else { json!(rest) };
        json!({ "metadata": { "finalizers": finalizers } })
    });
    let status = if svc.metadata.deletion_timestamp.is_some() {
        None
    } else {
        status_patch(svc, &LoadBalancerStatus::default())
    };
    Patches { status, main }
}

/// The status patch writing `status` into `status.loadBalancer`; `None` when the ingress points
/// are the same (in order; an IP without a mode counts as the API server's default `VIP`).
pub fn status_patch(svc: &Service, status: &LoadBalancerStatus) -> Option<Value> {
    let current = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default();
    let wanted = status.ingress.clone().unwrap_or_default();
    if ingress_equal(&current, &wanted) {
        return None;
    }
    let ingress = if wanted.is_empty() {
        Value::Null
    } else {
        json!(wanted)
    };
    Some(json!({ "status": { "loadBalancer": { "ingress": ingress } } }))
}

fn ingress_equal(a: &[LoadBalancerIngress], b: &[LoadBalancerIngress]) -> bool {
    /// An ingress point as the API server holds it: an IP without a mode has mode `VIP`.
    fn normal(i: &LoadBalancerIngress) -> LoadBalancerIngress {
        let ip = i.ip.clone().filter(|s| !s.is_empty());
        LoadBalancerIngress {
            ip_mode: i
                .ip_mode
                .clone()
                .or_else(|| ip.as_ref().map(|_| "VIP".to_owned())),
            ip,
            hostname: i.hostname.clone().filter(|s| !s.is_empty()),
            ports: i.ports.clone().filter(|p| !p.is_empty()),
        }
    }
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| normal(x) == normal(y))
}

/// Node names for a message, as upstream logs them: sorted, at most 20, then how many more.
pub fn loggable_node_names(backends: &[BackendNode]) -> String {
    let mut names: Vec<&str> = backends.iter().take(20).map(|b| b.name.as_str()).collect();
    names.sort_unstable();
    let mut text = format!("[{}]", names.join(" "));
    if backends.len() > 20 {
        text = format!("[{} <{} more>]", names.join(" "), backends.len() - 20);
    }
    text
}

#[cfg(test)]
mod tests;
