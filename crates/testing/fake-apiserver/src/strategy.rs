//! Per-kind rules of the real registry (`pkg/registry/core/*/strategy.go`,
//! `pkg/apis/core/v1/defaults.go`, `pkg/apis/core/validation`): defaulting, what create and
//! update may touch (spec vs status), validation, and service allocations.

use std::net::IpAddr;

use serde_json::{Map, Value, json};

use crate::alloc::Allocators;
use crate::errors::{ApiError, Cause};
use crate::resources::Store;
use crate::validation::{self, NameRule};

pub fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// The object at `v[key]`, created (replacing a non-object) when missing.
pub fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Value::Object(m) = v else {
        unreachable!("made an object above")
    };
    let e = m
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !e.is_object() {
        *e = Value::Object(Map::new());
    }
    let Value::Object(inner) = e else {
        unreachable!("made an object above")
    };
    inner
}

pub fn name_rule(store: Store) -> NameRule {
    match store {
        Store::Namespaces => NameRule::Dns1123Label,
        Store::Services => NameRule::Dns1035Label,
        _ => NameRule::Dns1123Subdomain,
    }
}

/// The v1 defaulting functions, run on every decoded object (create, update, patch result).
pub fn defaults(store: Store, obj: &mut Value) {
    match store {
        Store::Nodes => {
            // NodeSpec and NodeStatus (and its nodeInfo / daemonEndpoints) are non-pointer
            // structs in Go: the real server always serializes them, so JSON patches can
            // `add /spec/taints` on a node created without a spec.
            obj_mut(obj, "spec");
            let status = obj_mut(obj, "status");
            status
                .entry("daemonEndpoints")
                .or_insert_with(|| json!({"kubeletEndpoint": {"Port": 0}}));
            let info = status.entry("nodeInfo").or_insert_with(|| json!({}));
            if let Value::Object(info) = info {
                for f in [
                    "architecture",
                    "bootID",
                    "containerRuntimeVersion",
                    "kernelVersion",
                    "kubeProxyVersion",
                    "kubeletVersion",
                    "machineID",
                    "operatingSystem",
                    "osImage",
                    "systemUUID",
                ] {
                    info.entry(f).or_insert_with(|| json!(""));
                }
            }
            // podCIDR (singular, v1 only) and podCIDRs: podCIDR wins when they disagree.
            let single = s(obj, "/spec/podCIDR").to_string();
            let plural = obj
                .pointer("/spec/podCIDRs")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if !single.is_empty() && (plural.is_empty() || plural[0].as_str() != Some(single.as_str())) {
                obj_mut(obj, "spec").insert("podCIDRs".into(), json!([single]));
            } else if single.is_empty()
                && let Some(first) = plural.first()
            {
                obj_mut(obj, "spec").insert("podCIDR".into(), first.clone());
            }
            if let Some(cap) = obj.pointer("/status/capacity").cloned()
                && obj.pointer("/status/allocatable").is_none()
            {
                obj_mut(obj, "status").insert("allocatable".into(), cap);
            }
        }
        Store::Services => default_service(obj),
        Store::Namespaces => {
            obj_mut(obj, "spec");
            obj_mut(obj, "status");
            let name = s(obj, "/metadata/name").to_string();
            if !name.is_empty() {
                let meta = obj_mut(obj, "metadata");
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Value::Object(l) = labels {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
        }
        Store::Secrets => {
            if s(obj, "/type").is_empty()
                && let Value::Object(m) = obj
            {
                m.insert("type".into(), json!("Opaque"));
            }
            // stringData is write-only: merged into data (standard base64, as Go encodes
            // []byte) and never stored.
            if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
                use base64::Engine as _;
                let data = obj_mut(obj, "data");
                for (k, v) in sd {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap_or(""));
                    data.insert(k, json!(encoded));
                }
            }
        }
        Store::Events | Store::ConfigMaps | Store::Leases => {}
    }
}

fn default_service(obj: &mut Value) {
    obj_mut(obj, "status")
        .entry("loadBalancer")
        .or_insert_with(|| json!({}));
    let spec = obj_mut(obj, "spec");
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    let ty = if ty.is_empty() {
        spec.insert("type".into(), json!("ClusterIP"));
        "ClusterIP".to_string()
    } else {
        ty
    };
    if spec
        .get("sessionAffinity")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        spec.insert("sessionAffinity".into(), json!("None"));
    }
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("ClientIP") {
        let cfg = spec.entry("sessionAffinityConfig").or_insert_with(|| json!({}));
        if cfg.pointer("/clientIP/timeoutSeconds").is_none()
            && let Value::Object(c) = cfg
        {
            let cip = c.entry("clientIP").or_insert_with(|| json!({}));
            if let Value::Object(cip) = cip {
                cip.insert("timeoutSeconds".into(), json!(10800));
            }
        }
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports {
            if let Value::Object(p) = p {
                if p.get("protocol").and_then(Value::as_str).unwrap_or("").is_empty() {
                    p.insert("protocol".into(), json!("TCP"));
                }
                let tp = p.get("targetPort");
                let unset = match tp {
                    None | Some(Value::Null) => true,
                    Some(Value::Number(n)) => n.as_i64() == Some(0),
                    Some(Value::String(s)) => s.is_empty(),
                    _ => false,
                };
                if unset && let Some(port) = p.get("port").cloned() {
                    p.insert("targetPort".into(), port);
                }
            }
        }
    }
    if (ty == "NodePort" || ty == "LoadBalancer")
        && spec
            .get("externalTrafficPolicy")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        spec.insert("externalTrafficPolicy".into(), json!("Cluster"));
    }
    if ty != "ExternalName"
        && spec
            .get("internalTrafficPolicy")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        spec.insert("internalTrafficPolicy".into(), json!("Cluster"));
    }
    if ty == "LoadBalancer" && spec.get("allocateLoadBalancerNodePorts").is_none() {
        spec.insert("allocateLoadBalancerNodePorts".into(), json!(true));
    }
}

/// The not-ready taint the TaintNodesByCondition admission plugin puts on new Nodes.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";

/// The mutating admission of a create, which the real server runs after decoding and
/// defaulting and before `PrepareForCreate` and validation (dry runs included).
///
/// TaintNodesByCondition (`plugin/pkg/admission/nodetaint`, lately registered as
/// `TaintNodesAtCreation`; on by default since v1.19): a new Node gets `not-ready:NoSchedule`
/// appended unless it has a taint with that key and effect, so no pod lands on it before the
/// node lifecycle controller sees it Ready. Create only: updates and patches never add it back.
pub fn admit_create(store: Store, obj: &mut Value) {
    if store != Store::Nodes {
        return;
    }
    let spec = obj_mut(obj, "spec");
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if !taints.is_array() {
        *taints = json!([]);
    }
    let Value::Array(taints) = taints else {
        unreachable!("made an array above")
    };
    let present = taints
        .iter()
        .any(|t| s(t, "/key") == TAINT_NOT_READY && s(t, "/effect") == "NoSchedule");
    if !present {
        taints.push(json!({"key": TAINT_NOT_READY, "effect": "NoSchedule"}));
    }
}

/// `PrepareForCreate`.
pub fn prepare_create(store: Store, obj: &mut Value) {
    match store {
        // Services start with an empty status; nodes may carry status on create (kubelet does).
        Store::Services => {
            if let Value::Object(m) = obj {
                m.insert("status".into(), json!({"loadBalancer": {}}));
            }
        }
        Store::Namespaces => {
            let spec = obj_mut(obj, "spec");
            let fins = spec.entry("finalizers").or_insert_with(|| json!([]));
            if let Value::Array(f) = fins
                && !f.iter().any(|x| x == "kubernetes")
            {
                f.push(json!("kubernetes"));
            }
            if let Value::Object(m) = obj {
                m.insert("status".into(), json!({"phase": "Active"}));
            }
        }
        _ => {}
    }
}

/// `PrepareForUpdate` of the main resource (`status == false`) or of `/status`.
pub fn prepare_update(store: Store, status: bool, new: &mut Value, old: &Value) {
    let has_status = matches!(store, Store::Nodes | Store::Services | Store::Namespaces);
    if has_status {
        let Value::Object(n) = new else { return };
        if status {
            // A status write changes only status (and, as upstream allows, metadata).
            match old.get("spec") {
                Some(spec) => n.insert("spec".into(), spec.clone()),
                None => n.remove("spec"),
            };
        } else {
            match old.get("status") {
                Some(st) => n.insert("status".into(), st.clone()),
                None => n.remove("status"),
            };
        }
    }
    match store {
        Store::Namespaces if !status => {
            // spec.finalizers change only through /finalize.
            if let Some(f) = old.pointer("/spec/finalizers").cloned() {
                obj_mut(new, "spec").insert("finalizers".into(), f);
            }
        }
        Store::Services if !status => {
            patch_allocated_values(new, old);
            drop_type_dependent_fields(new, old);
        }
        _ => {}
    }
}

fn svc_type(v: &Value) -> &str {
    s(v, "/spec/type")
}
fn needs_cluster_ip(v: &Value) -> bool {
    svc_type(v) != "ExternalName"
}
fn needs_node_port(v: &Value) -> bool {
    match svc_type(v) {
        "NodePort" => true,
        "LoadBalancer" => {
            v.pointer("/spec/allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false)
        }
        _ => false,
    }
}
fn needs_hc_node_port(v: &Value) -> bool {
    svc_type(v) == "LoadBalancer" && s(v, "/spec/externalTrafficPolicy") == "Local"
}

fn ports(v: &Value) -> Vec<Value> {
    v.pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn node_port_of(p: &Value) -> i64 {
    p.get("nodePort").and_then(Value::as_i64).unwrap_or(0)
}

/// `patchAllocatedValues`: an update that omits allocated values keeps them.
fn patch_allocated_values(new: &mut Value, old: &Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        if s(new, "/spec/clusterIP").is_empty() && !s(old, "/spec/clusterIP").is_empty() {
            let v = json!(s(old, "/spec/clusterIP"));
            obj_mut(new, "spec").insert("clusterIP".into(), v);
        }
        let new_ips_empty = new
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if new_ips_empty && let Some(ips) = old.pointer("/spec/clusterIPs").cloned() {
            obj_mut(new, "spec").insert("clusterIPs".into(), ips);
        }
    }
    if needs_node_port(old) && needs_node_port(new) {
        let old_ports = ports(old);
        let used: Vec<i64> = {
            let newp: Vec<i64> = ports(new).iter().map(node_port_of).collect();
            old_ports
                .iter()
                .map(node_port_of)
                .filter(|p| newp.contains(p))
                .collect()
        };
        if let Some(Value::Array(np)) = new.pointer_mut("/spec/ports") {
            for p in np.iter_mut() {
                if node_port_of(p) == 0 {
                    let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                    let prev = old_ports
                        .iter()
                        .find(|o| o.get("name").and_then(Value::as_str).unwrap_or("") == name)
                        .map(node_port_of)
                        .unwrap_or(0);
                    if prev != 0
                        && !used.contains(&prev)
                        && let Value::Object(p) = p
                    {
                        p.insert("nodePort".into(), json!(prev));
                    }
                }
            }
        }
    }
    if needs_hc_node_port(old) && needs_hc_node_port(new) {
        let n = new
            .pointer("/spec/healthCheckNodePort")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if n == 0
            && let Some(o) = old.pointer("/spec/healthCheckNodePort").cloned()
        {
            obj_mut(new, "spec").insert("healthCheckNodePort".into(), o);
        }
    }
}

/// `dropTypeDependentFields`: switching type clears values that no longer apply, when the
/// user left them as they were.
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let same = |n: &Value, f: &str| n.pointer(f) == old.pointer(f);
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        if same(new, "/spec/clusterIP") && same(new, "/spec/clusterIPs") {
            let spec = obj_mut(new, "spec");
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        if same(new, "/spec/ipFamilies") {
            obj_mut(new, "spec").remove("ipFamilies");
        }
        if same(new, "/spec/ipFamilyPolicy") {
            obj_mut(new, "spec").remove("ipFamilyPolicy");
        }
    }
    let same_node_ports = ports(new).iter().map(node_port_of).collect::<Vec<_>>()
        == ports(old).iter().map(node_port_of).collect::<Vec<_>>();
    if needs_node_port(old)
        && !needs_node_port(new)
        && same_node_ports
        && let Some(Value::Array(np)) = new.pointer_mut("/spec/ports")
    {
        for p in np {
            if let Value::Object(p) = p {
                p.remove("nodePort");
            }
        }
    }
    if needs_hc_node_port(old) && !needs_hc_node_port(new) && same(new, "/spec/healthCheckNodePort") {
        obj_mut(new, "spec").remove("healthCheckNodePort");
    }
    let was_lb = svc_type(old) == "LoadBalancer";
    let is_lb = svc_type(new) == "LoadBalancer";
    if was_lb && !is_lb {
        if same(new, "/spec/allocateLoadBalancerNodePorts") {
            obj_mut(new, "spec").remove("allocateLoadBalancerNodePorts");
        }
        if same(new, "/spec/loadBalancerClass") {
            obj_mut(new, "spec").remove("loadBalancerClass");
        }
    }
    let etp = |v: &Value| matches!(svc_type(v), "NodePort" | "LoadBalancer");
    if etp(old) && !etp(new) && same(new, "/spec/externalTrafficPolicy") {
        obj_mut(new, "spec").remove("externalTrafficPolicy");
    }
    if !is_lb {
        obj_mut(new, "status").insert("loadBalancer".into(), json!({}));
    }
}

/// What an allocation step took, so a failed or dry-run request can give it back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Taken {
    Ip(IpAddr),
    Port(u16),
}

pub fn release(alloc: &mut Allocators, taken: &[Taken]) {
    for t in taken {
        match t {
            Taken::Ip(ip) => alloc.release_ip(*ip),
            Taken::Port(p) => alloc.release_port(*p),
        }
    }
}

/// Everything a stored service holds in the allocators.
pub fn held(svc: &Value) -> Vec<Taken> {
    let mut out = Vec::new();
    if let Some(ips) = svc.pointer("/spec/clusterIPs").and_then(Value::as_array) {
        for ip in ips
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|s| s.parse::<IpAddr>().ok())
        {
            out.push(Taken::Ip(ip));
        }
    }
    for p in ports(svc) {
        let np = node_port_of(&p);
        if let Ok(np) = u16::try_from(np)
            && np != 0
            && !out.contains(&Taken::Port(np))
        {
            out.push(Taken::Port(np));
        }
    }
    if let Some(hc) = svc.pointer("/spec/healthCheckNodePort").and_then(Value::as_i64)
        && let Ok(hc) = u16::try_from(hc)
        && hc != 0
        && !out.contains(&Taken::Port(hc))
    {
        out.push(Taken::Port(hc));
    }
    out
}

/// Allocates the cluster IP, node ports and health check node port a service needs, keeping
/// what `old` already holds. Returns what was newly taken.
pub fn allocate_service(
    alloc: &mut Allocators,
    svc: &mut Value,
    old: Option<&Value>,
) -> Result<Vec<Taken>, ApiError> {
    let old_held = old.map(held).unwrap_or_default();
    let name = s(svc, "/metadata/name").to_string();
    let mut taken: Vec<Taken> = Vec::new();
    let mut causes = Vec::new();

    if needs_cluster_ip(svc) {
        let mut ip = s(svc, "/spec/clusterIP").to_string();
        if ip.is_empty() {
            ip = svc
                .pointer("/spec/clusterIPs/0")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
        }
        if ip.is_empty() {
            match alloc.allocate_ip() {
                Some(a) => {
                    taken.push(Taken::Ip(a));
                    ip = a.to_string();
                }
                None => {
                    release(alloc, &taken);
                    return Err(ApiError::internal(
                        "failed to allocate a serviceIP: range is full",
                    ));
                }
            }
        } else if ip != "None" {
            match ip.parse::<IpAddr>() {
                Ok(a) if old_held.contains(&Taken::Ip(a)) => {}
                Ok(a) => match alloc.reserve_ip(a) {
                    Ok(()) => taken.push(Taken::Ip(a)),
                    Err(e) => causes.push(Cause::invalid(
                        "spec.clusterIPs",
                        &json!([ip]),
                        format!("failed to allocate IP {ip}: {e}"),
                    )),
                },
                // Validation has already reported a malformed IP.
                Err(_) => {}
            }
        }
        let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
        let spec = obj_mut(svc, "spec");
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
        if spec
            .get("ipFamilies")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            spec.insert("ipFamilies".into(), json!([family]));
        }
        if spec
            .get("ipFamilyPolicy")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
        }
    }

    let auto = needs_node_port(svc);
    if let Some(Value::Array(ps)) = svc.pointer_mut("/spec/ports") {
        for (i, p) in ps.iter_mut().enumerate() {
            let np = node_port_of(p);
            if np != 0 {
                let Ok(np16) = u16::try_from(np) else { continue };
                if old_held.contains(&Taken::Port(np16)) || taken.contains(&Taken::Port(np16)) {
                    continue;
                }
                match alloc.reserve_port(np16) {
                    Ok(()) => taken.push(Taken::Port(np16)),
                    Err(e) => causes.push(Cause::invalid(format!("spec.ports[{i}].nodePort"), &json!(np), e)),
                }
            } else if auto {
                match alloc.allocate_port() {
                    Some(a) => {
                        taken.push(Taken::Port(a));
                        if let Value::Object(p) = p {
                            p.insert("nodePort".into(), json!(a));
                        }
                    }
                    None => causes.push(Cause::invalid(
                        format!("spec.ports[{i}].nodePort"),
                        &json!(0),
                        "failed to allocate a nodePort: range is full",
                    )),
                }
            }
        }
    }

    if needs_hc_node_port(svc) {
        let hc = svc
            .pointer("/spec/healthCheckNodePort")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if hc == 0 {
            match alloc.allocate_port() {
                Some(a) => {
                    taken.push(Taken::Port(a));
                    obj_mut(svc, "spec").insert("healthCheckNodePort".into(), json!(a));
                }
                None => causes.push(Cause::invalid(
                    "spec.healthCheckNodePort",
                    &json!(0),
                    "range is full",
                )),
            }
        } else if let Ok(hc16) = u16::try_from(hc)
            && !old_held.contains(&Taken::Port(hc16))
            && !taken.contains(&Taken::Port(hc16))
        {
            match alloc.reserve_port(hc16) {
                Ok(()) => taken.push(Taken::Port(hc16)),
                Err(e) => causes.push(Cause::invalid("spec.healthCheckNodePort", &json!(hc), e)),
            }
        }
    }

    if !causes.is_empty() {
        release(alloc, &taken);
        return Err(ApiError::invalid("", "Service", &name, causes));
    }
    Ok(taken)
}

// ---------------------------------------------------------------- validation

fn validate_service(svc: &Value, causes: &mut Vec<Cause>) {
    let ty = svc_type(svc);
    const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !TYPES.contains(&ty) {
        causes.push(Cause::not_supported("spec.type", &json!(ty), TYPES));
    }
    let cluster_ip = s(svc, "/spec/clusterIP");
    let headless = cluster_ip == "None";
    if !cluster_ip.is_empty() && !headless && !validation::is_ip(cluster_ip) {
        causes.push(Cause::invalid(
            "spec.clusterIPs[0]",
            &json!(cluster_ip),
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    }
    if ty == "ExternalName" {
        if !cluster_ip.is_empty() {
            causes.push(Cause::forbidden(
                "spec.clusterIPs",
                "may not be set for ExternalName services",
            ));
        }
        let en = s(svc, "/spec/externalName");
        if en.is_empty() {
            causes.push(Cause::required("spec.externalName", ""));
        } else {
            for e in validation::dns1123_subdomain(en.trim_end_matches('.')) {
                causes.push(Cause::invalid("spec.externalName", &json!(en), e));
            }
        }
    }
    if headless && matches!(ty, "NodePort" | "LoadBalancer") {
        causes.push(Cause::invalid(
            "spec.clusterIPs[0]",
            &json!("None"),
            format!("may not be set to 'None' for {ty} services"),
        ));
    }
    let ps = ports(svc);
    if ps.is_empty() && !headless && ty != "ExternalName" {
        causes.push(Cause::required("spec.ports", ""));
    }
    let mut names: Vec<&str> = Vec::new();
    let mut keys: Vec<(i64, &str)> = Vec::new();
    let mut node_ports: Vec<(i64, &str)> = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        let f = format!("spec.ports[{i}]");
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ps.len() > 1 && name.is_empty() {
            causes.push(Cause::required(format!("{f}.name"), ""));
        } else if !name.is_empty() {
            for e in validation::dns1123_label(name) {
                causes.push(Cause::invalid(format!("{f}.name"), &json!(name), e));
            }
            if names.contains(&name) {
                causes.push(Cause::duplicate(format!("{f}.name"), &json!(name)));
            }
            names.push(name);
        }
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            causes.push(Cause::invalid(
                format!("{f}.port"),
                &json!(port),
                "must be between 1 and 65535, inclusive",
            ));
        }
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("");
        const PROTOS: &[&str] = &["SCTP", "TCP", "UDP"];
        if !PROTOS.contains(&proto) {
            causes.push(Cause::not_supported(
                format!("{f}.protocol"),
                &json!(proto),
                PROTOS,
            ));
        }
        if keys.contains(&(port, proto)) {
            causes.push(Cause::duplicate(
                f.clone(),
                &json!({"port": port, "protocol": proto}),
            ));
        }
        keys.push((port, proto));
        match p.get("targetPort") {
            Some(Value::Number(n)) => {
                let t = n.as_i64().unwrap_or(0);
                if !(1..=65535).contains(&t) {
                    causes.push(Cause::invalid(
                        format!("{f}.targetPort"),
                        &json!(t),
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
            Some(Value::String(t)) => {
                let ok = !t.is_empty()
                    && t.len() <= 15
                    && t.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                    && t.bytes().any(|c| c.is_ascii_lowercase())
                    && !t.starts_with('-')
                    && !t.ends_with('-')
                    && !t.contains("--");
                if !ok {
                    causes.push(Cause::invalid(
                        format!("{f}.targetPort"),
                        &json!(t),
                        "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                    ));
                }
            }
            _ => {}
        }
        let np = node_port_of(p);
        if np != 0 {
            if !(0..=65535).contains(&np) {
                causes.push(Cause::invalid(
                    format!("{f}.nodePort"),
                    &json!(np),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if ty == "ClusterIP" || ty == "ExternalName" {
                causes.push(Cause::forbidden(
                    format!("{f}.nodePort"),
                    format!("may not be used when `type` is '{ty}'"),
                ));
            }
            if node_ports.contains(&(np, proto)) {
                causes.push(Cause::duplicate(format!("{f}.nodePort"), &json!(np)));
            }
            node_ports.push((np, proto));
        }
    }
    let etp = s(svc, "/spec/externalTrafficPolicy");
    if !etp.is_empty() {
        if !matches!(ty, "NodePort" | "LoadBalancer") {
            causes.push(Cause::invalid(
                "spec.externalTrafficPolicy",
                &json!(etp),
                "may only be set when `type` is 'NodePort' or 'LoadBalancer'",
            ));
        } else if !matches!(etp, "Cluster" | "Local") {
            causes.push(Cause::not_supported(
                "spec.externalTrafficPolicy",
                &json!(etp),
                &["Cluster", "Local"],
            ));
        }
    } else if matches!(ty, "NodePort" | "LoadBalancer") {
        causes.push(Cause::required("spec.externalTrafficPolicy", ""));
    }
    let hc = svc
        .pointer("/spec/healthCheckNodePort")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if hc != 0 && !(ty == "LoadBalancer" && etp == "Local") {
        causes.push(Cause::invalid(
            "spec.healthCheckNodePort",
            &json!(hc),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
    let sa = s(svc, "/spec/sessionAffinity");
    if !matches!(sa, "None" | "ClientIP") {
        causes.push(Cause::not_supported(
            "spec.sessionAffinity",
            &json!(sa),
            &["ClientIP", "None"],
        ));
    }
    let itp = s(svc, "/spec/internalTrafficPolicy");
    if !itp.is_empty() && !matches!(itp, "Cluster" | "Local") {
        causes.push(Cause::not_supported(
            "spec.internalTrafficPolicy",
            &json!(itp),
            &["Cluster", "Local"],
        ));
    }
    if let Some(sel) = svc.pointer("/spec/selector") {
        validation::validate_labels(Some(sel), "spec.selector", causes);
    }
    if svc.pointer("/spec/loadBalancerClass").is_some() && ty != "LoadBalancer" {
        causes.push(Cause::forbidden(
            "spec.loadBalancerClass",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if svc.pointer("/spec/allocateLoadBalancerNodePorts").is_some() && ty != "LoadBalancer" {
        causes.push(Cause::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    validate_lb_status(svc, causes);
}

fn validate_lb_status(svc: &Value, causes: &mut Vec<Cause>) {
    if let Some(ing) = svc
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
    {
        for (i, e) in ing.iter().enumerate() {
            let ip = s(e, "/ip");
            if !ip.is_empty() && !validation::is_ip(ip) {
                causes.push(Cause::invalid(
                    format!("status.loadBalancer.ingress[{i}].ip"),
                    &json!(ip),
                    "must be a valid IP address",
                ));
            }
            let host = s(e, "/hostname");
            if !host.is_empty() {
                for m in validation::dns1123_subdomain(host) {
                    causes.push(Cause::invalid(
                        format!("status.loadBalancer.ingress[{i}].hostname"),
                        &json!(host),
                        m,
                    ));
                }
                if validation::is_ip(host) {
                    causes.push(Cause::invalid(
                        format!("status.loadBalancer.ingress[{i}].hostname"),
                        &json!(host),
                        "must be a DNS name, not an IP address",
                    ));
                }
            }
            if e.get("ipMode").is_some() && ip.is_empty() {
                causes.push(Cause::forbidden(
                    format!("status.loadBalancer.ingress[{i}].ipMode"),
                    "may not be specified when `ip` is not set",
                ));
            }
        }
    }
}

fn validate_node(node: &Value, causes: &mut Vec<Cause>) {
    if let Some(taints) = node.pointer("/spec/taints").and_then(Value::as_array) {
        let mut seen: Vec<(String, String)> = Vec::new();
        for (i, t) in taints.iter().enumerate() {
            let f = format!("spec.taints[{i}]");
            let key = s(t, "/key");
            if key.is_empty() {
                causes.push(Cause::required(format!("{f}.key"), ""));
            }
            for e in validation::qualified_name(key) {
                if !key.is_empty() {
                    causes.push(Cause::invalid(format!("{f}.key"), &json!(key), e));
                }
            }
            let v = s(t, "/value");
            for e in validation::label_value(v) {
                causes.push(Cause::invalid(format!("{f}.value"), &json!(v), e));
            }
            let effect = s(t, "/effect");
            const EFFECTS: &[&str] = &["NoExecute", "NoSchedule", "PreferNoSchedule"];
            if effect.is_empty() {
                causes.push(Cause::required(format!("{f}.effect"), ""));
            } else if !EFFECTS.contains(&effect) {
                causes.push(Cause::not_supported(
                    format!("{f}.effect"),
                    &json!(effect),
                    EFFECTS,
                ));
            }
            let k = (key.to_string(), effect.to_string());
            if seen.contains(&k) {
                causes.push(Cause::duplicate(
                    f.clone(),
                    &json!(format!("taints must be unique by key and effect pair")),
                ));
            }
            seen.push(k);
        }
    }
    if let Some(cidrs) = node.pointer("/spec/podCIDRs").and_then(Value::as_array) {
        for (i, c) in cidrs.iter().enumerate() {
            let c = c.as_str().unwrap_or("");
            if !validation::is_cidr(c) {
                causes.push(Cause::invalid(
                    format!("spec.podCIDRs[{i}]"),
                    &json!(c),
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
        }
        if cidrs.len() > 2 {
            causes.push(Cause::invalid(
                "spec.podCIDRs",
                &json!(cidrs),
                "may specify no more than one CIDR for each IP family",
            ));
        }
    }
    if let Some(addrs) = node.pointer("/status/addresses").and_then(Value::as_array) {
        for (i, a) in addrs.iter().enumerate() {
            if addrs[..i].contains(a) {
                causes.push(Cause::duplicate(format!("status.addresses[{i}]"), a));
            }
        }
    }
}

fn validate_node_update(new: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let old_cidr = s(old, "/spec/podCIDR");
    if !old_cidr.is_empty() && old_cidr != s(new, "/spec/podCIDR") {
        causes.push(Cause::forbidden(
            "spec.podCIDR",
            "node updates may not change podCIDR except from \"\" to valid",
        ));
    }
    let old_pid = s(old, "/spec/providerID");
    if !old_pid.is_empty() && old_pid != s(new, "/spec/providerID") {
        causes.push(Cause::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
}

fn is_config_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && !k.starts_with("..")
        && k.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn validate_data_keys(obj: &Value, causes: &mut Vec<Cause>) {
    let mut seen = Vec::new();
    for field in ["data", "binaryData"] {
        if let Some(m) = obj.get(field).and_then(Value::as_object) {
            for k in m.keys() {
                if !is_config_key(k) {
                    causes.push(Cause::invalid(field, &json!(k), "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"));
                }
                if seen.contains(k) {
                    causes.push(Cause::invalid(
                        "data",
                        &json!(k),
                        "duplicate of key present in binaryData",
                    ));
                }
                seen.push(k.clone());
            }
        }
    }
}

fn validate_immutable_data(new: &Value, old: &Value, causes: &mut Vec<Cause>) {
    if old.get("immutable").and_then(Value::as_bool) == Some(true) {
        if new.get("immutable").and_then(Value::as_bool) != Some(true) {
            causes.push(Cause::forbidden(
                "immutable",
                "field is immutable when `immutable` is set",
            ));
        }
        for f in ["data", "binaryData"] {
            if new.get(f) != old.get(f) {
                causes.push(Cause::forbidden(f, "field is immutable when `immutable` is set"));
            }
        }
    }
}

fn validate_event(ev: &Value, events_v1: bool, causes: &mut Vec<Cause>) {
    let ns = s(ev, "/metadata/namespace");
    let inv_ns = s(ev, "/involvedObject/namespace");
    let has_event_time = !s(ev, "/eventTime").is_empty();
    let (regarding, reporting) = if events_v1 {
        ("regarding", "reportingController")
    } else {
        ("involvedObject", "reportingComponent")
    };
    if !has_event_time {
        // Legacy events: the namespace must agree with the involved object's.
        if inv_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                causes.push(Cause::invalid(
                    format!("{regarding}.namespace"),
                    &json!(inv_ns),
                    "does not match event.namespace",
                ));
            }
        } else if ns != inv_ns {
            causes.push(Cause::invalid(
                format!("{regarding}.namespace"),
                &json!(inv_ns),
                "does not match event.namespace",
            ));
        }
    } else {
        if inv_ns.is_empty() && ns != "default" && ns != "kube-system" {
            causes.push(Cause::invalid(
                format!("{regarding}.namespace"),
                &json!(inv_ns),
                "does not match event.namespace",
            ));
        }
        let rc = s(ev, "/reportingComponent");
        if rc.is_empty() {
            causes.push(Cause::required(reporting, ""));
        }
        for e in validation::qualified_name(rc) {
            if !rc.is_empty() {
                causes.push(Cause::invalid(reporting, &json!(rc), e));
            }
        }
        for (field, ptr, limit) in [
            ("reportingInstance", "/reportingInstance", 128),
            ("action", "/action", 128),
            ("reason", "/reason", 128),
        ] {
            let v = s(ev, ptr);
            if v.is_empty() {
                causes.push(Cause::required(field, ""));
            }
            if v.len() > limit {
                causes.push(Cause::invalid(
                    field,
                    &json!(""),
                    format!("can have at most {limit} characters"),
                ));
            }
        }
        if s(ev, "/message").len() > 1024 {
            causes.push(Cause::invalid(
                if events_v1 { "note" } else { "message" },
                &json!(""),
                "can have at most 1024 characters",
            ));
        }
    }
    if events_v1 {
        // Strict validation of the events.k8s.io API.
        if !has_event_time {
            causes.push(Cause::required("eventTime", ""));
        }
        let ty = s(ev, "/type");
        if ty != "Normal" && ty != "Warning" {
            causes.push(Cause::invalid(
                "type",
                &json!(""),
                format!("has invalid value: {ty}"),
            ));
        }
        for (f, p) in [
            ("deprecatedFirstTimestamp", "/firstTimestamp"),
            ("deprecatedLastTimestamp", "/lastTimestamp"),
        ] {
            if !s(ev, p).is_empty() {
                causes.push(Cause::invalid(f, &json!(""), "needs to be unset"));
            }
        }
        if ev.get("count").and_then(Value::as_i64).unwrap_or(0) != 0 {
            causes.push(Cause::invalid("deprecatedCount", &json!(""), "needs to be unset"));
        }
        if !s(ev, "/source/component").is_empty() || !s(ev, "/source/host").is_empty() {
            causes.push(Cause::invalid(
                "deprecatedSource",
                &json!(""),
                "needs to be unset",
            ));
        }
        validate_event_series(ev, causes);
    }
    for e in validation::dns1123_subdomain(ns) {
        causes.push(Cause::invalid("namespace", &json!(ns), e));
    }
}

fn validate_event_series(ev: &Value, causes: &mut Vec<Cause>) {
    if let Some(series) = ev.get("series").filter(|v| !v.is_null()) {
        let count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
        if count < 2 {
            causes.push(Cause::invalid("series.count", &json!(""), "should be at least 2"));
        }
        if s(series, "/lastObservedTime").is_empty() {
            causes.push(Cause::required("series.lastObservedTime", ""));
        }
    }
}

fn validate_lease(l: &Value, causes: &mut Vec<Cause>) {
    if let Some(d) = l.pointer("/spec/leaseDurationSeconds").and_then(Value::as_i64)
        && d <= 0
    {
        causes.push(Cause::invalid(
            "spec.leaseDurationSeconds",
            &json!(d),
            "must be greater than 0",
        ));
    }
    if let Some(t) = l.pointer("/spec/leaseTransitions").and_then(Value::as_i64)
        && t < 0
    {
        causes.push(Cause::invalid(
            "spec.leaseTransitions",
            &json!(t),
            "must be greater than or equal to 0",
        ));
    }
}

/// `Validate` (create) for the stored object; `events_v1` selects the strict events API rules.
pub fn validate(store: Store, namespaced: bool, obj: &Value, events_v1: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    match store {
        Store::Services => validate_service(obj, &mut causes),
        Store::Nodes => validate_node(obj, &mut causes),
        Store::ConfigMaps | Store::Secrets => validate_data_keys(obj, &mut causes),
        Store::Events => validate_event(obj, events_v1, &mut causes),
        Store::Leases => validate_lease(obj, &mut causes),
        Store::Namespaces => {
            if let Some(f) = obj.pointer("/spec/finalizers").and_then(Value::as_array) {
                for (i, x) in f.iter().enumerate() {
                    let x = x.as_str().unwrap_or("");
                    for e in validation::qualified_name(x) {
                        causes.push(Cause::invalid(format!("spec.finalizers[{i}]"), &json!(x), e));
                    }
                }
            }
        }
    }
    causes.extend(validation::validate_object_meta(
        obj,
        namespaced,
        name_rule(store),
    ));
    causes
}

/// `ValidateUpdate` for the main resource or `/status`.
pub fn validate_update(
    store: Store,
    namespaced: bool,
    new: &Value,
    old: &Value,
    events_v1: bool,
) -> Vec<Cause> {
    let mut causes = validation::validate_object_meta_update(new, old);
    causes.extend(
        validate(store, namespaced, new, events_v1)
            .into_iter()
            .filter(|c| c.field != "metadata.name" || c.reason != "FieldValueRequired"),
    );
    match store {
        Store::Nodes => validate_node_update(new, old, &mut causes),
        Store::Services => {
            let (o, n) = (s(old, "/spec/clusterIP"), s(new, "/spec/clusterIP"));
            if needs_cluster_ip(old) && needs_cluster_ip(new) && !o.is_empty() && o != n {
                causes.push(Cause::invalid(
                    "spec.clusterIPs[0]",
                    &json!(n),
                    "may not change once set",
                ));
            }
        }
        Store::ConfigMaps => validate_immutable_data(new, old, &mut causes),
        Store::Secrets => {
            if s(new, "/type") != s(old, "/type") {
                causes.push(Cause::immutable("type", &json!(s(new, "/type"))));
            }
            validate_immutable_data(new, old, &mut causes);
        }
        Store::Events if events_v1 => {
            for (field, ptr) in [
                ("regarding", "/involvedObject"),
                ("reason", "/reason"),
                ("note", "/message"),
                ("deprecatedSource", "/source"),
                ("deprecatedFirstTimestamp", "/firstTimestamp"),
                ("deprecatedLastTimestamp", "/lastTimestamp"),
                ("deprecatedCount", "/count"),
                ("type", "/type"),
                ("eventTime", "/eventTime"),
                ("action", "/action"),
                ("related", "/related"),
                ("reportingController", "/reportingComponent"),
                ("reportingInstance", "/reportingInstance"),
            ] {
                if new.pointer(ptr) != old.pointer(ptr) {
                    causes.push(Cause::immutable(field, new.pointer(ptr).unwrap_or(&Value::Null)));
                }
            }
        }
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(spec: Value) -> Value {
        let mut v = json!({"metadata": {"name": "s", "namespace": "default"}, "spec": spec});
        defaults(Store::Services, &mut v);
        v
    }

    #[test]
    fn service_defaults() {
        let v = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
        assert_eq!(v["spec"]["sessionAffinity"], "None");
        assert_eq!(v["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(v["spec"]["internalTrafficPolicy"], "Cluster");
        assert_eq!(v["spec"]["allocateLoadBalancerNodePorts"], true);
        assert_eq!(v["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(v["spec"]["ports"][0]["targetPort"], 80);
        let v = svc(json!({"ports": [{"port": 80}]}));
        assert_eq!(v["spec"]["type"], "ClusterIP");
        assert!(v["spec"].get("externalTrafficPolicy").is_none());
    }

    #[test]
    fn service_validation_table() {
        let cases: Vec<(Value, &str)> = vec![
            (json!({"ports": [{"port": 0}]}), "spec.ports[0].port"),
            (json!({"ports": [{"port": 70000}]}), "spec.ports[0].port"),
            (
                json!({"ports": [{"port": 80}, {"port": 81}]}),
                "spec.ports[0].name",
            ),
            (
                json!({"ports": [{"port": 80, "protocol": "ICMP"}]}),
                "spec.ports[0].protocol",
            ),
            (
                json!({"ports": [{"port": 80, "nodePort": 30000}]}),
                "spec.ports[0].nodePort",
            ),
            (json!({"type": "Bogus", "ports": [{"port": 80}]}), "spec.type"),
            (json!({}), "spec.ports"),
            (
                json!({"ports": [{"port": 80}], "externalTrafficPolicy": "Local"}),
                "spec.externalTrafficPolicy",
            ),
            (
                json!({"type": "NodePort", "ports": [{"port": 80}], "healthCheckNodePort": 30001}),
                "spec.healthCheckNodePort",
            ),
            (
                json!({"ports": [{"port": 80}], "clusterIP": "bogus"}),
                "spec.clusterIPs[0]",
            ),
        ];
        for (spec, field) in cases {
            let v = svc(spec.clone());
            let c = validate(Store::Services, true, &v, false);
            assert!(
                c.iter().any(|c| c.field == field),
                "{spec}: expected an error at {field}, got {c:?}"
            );
        }
        assert!(
            validate(
                Store::Services,
                true,
                &svc(json!({"ports": [{"port": 80}]})),
                false
            )
            .is_empty()
        );
    }

    #[test]
    fn node_update_rules() {
        let old =
            json!({"metadata": {"name": "n"}, "spec": {"providerID": "a://1", "podCIDR": "10.0.0.0/24"}});
        let new =
            json!({"metadata": {"name": "n"}, "spec": {"providerID": "a://2", "podCIDR": "10.0.1.0/24"}});
        let c = validate_update(Store::Nodes, false, &new, &old, false);
        assert!(c.iter().any(|c| c.field == "spec.providerID"));
        assert!(c.iter().any(|c| c.field == "spec.podCIDR"));
        let old = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(validate_update(Store::Nodes, false, &new, &old, false).is_empty());
    }

    #[test]
    fn event_namespace_rules() {
        let core = |ns: &str, inv_ns: &str| json!({"metadata": {"name": "e", "namespace": ns}, "involvedObject": {"kind": "Node", "name": "n", "namespace": inv_ns}});
        assert!(validate(Store::Events, true, &core("default", ""), false).is_empty());
        assert!(!validate(Store::Events, true, &core("other", ""), false).is_empty());
        assert!(!validate(Store::Events, true, &core("a", "b"), false).is_empty());
        let strict = json!({"metadata": {"name": "e", "namespace": "default"}, "involvedObject": {"kind": "Node", "name": "n"},
            "eventTime": "2024-01-01T00:00:00.000000Z", "reportingComponent": "ctl", "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal"});
        assert!(
            validate(Store::Events, true, &strict, true).is_empty(),
            "{:?}",
            validate(Store::Events, true, &strict, true)
        );
        let mut bad = strict.clone();
        bad["type"] = json!("Info");
        assert!(
            validate(Store::Events, true, &bad, true)
                .iter()
                .any(|c| c.field == "type")
        );
    }

    #[test]
    fn allocation_keeps_and_releases() {
        let mut a = Allocators::new("10.96.0.0/24".parse().unwrap(), 30000..=30010);
        let mut s1 = svc(json!({"type": "NodePort", "ports": [{"port": 80, "name": "a"}]}));
        allocate_service(&mut a, &mut s1, None).unwrap();
        assert!(s1["spec"]["clusterIP"].as_str().unwrap().starts_with("10.96.0."));
        let np = s1["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
        let mut dup = svc(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": np}]}));
        let e = allocate_service(&mut a, &mut dup, None).unwrap_err();
        assert!(
            e.message.contains("provided port is already allocated"),
            "{}",
            e.message
        );
        // An update omitting the nodePort keeps it.
        let mut upd = svc(json!({"type": "NodePort", "ports": [{"port": 80, "name": "a"}]}));
        prepare_update(Store::Services, false, &mut upd, &s1);
        let taken = allocate_service(&mut a, &mut upd, Some(&s1)).unwrap();
        assert!(taken.is_empty());
        assert_eq!(upd["spec"]["ports"][0]["nodePort"].as_i64(), Some(np));
        assert_eq!(upd["spec"]["clusterIP"], s1["spec"]["clusterIP"]);
    }
}
