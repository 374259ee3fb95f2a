//! Well-known names: controller IDs, client identities, taints, labels, annotations, finalizers.
//!
//! The strings are Kubernetes API (k8s.io/cloud-provider `api/`, `names/`) and must never change.

/// Controller IDs, as upstream's `names/controller_names.go`; also our binary names.
pub mod controllers {
    /// Initializes nodes from the cloud.
    pub const CLOUD_NODE: &str = "cloud-node-controller";
    /// Deletes nodes whose instance is gone; taints shut-down ones.
    pub const CLOUD_NODE_LIFECYCLE: &str = "cloud-node-lifecycle-controller";
    /// Cloud load balancers for `type: LoadBalancer` services.
    pub const SERVICE_LB: &str = "service-lb-controller";
    /// Pod-CIDR routes.
    pub const NODE_ROUTE: &str = "node-route-controller";
}

/// Client identities (upstream's `--use-service-account-credentials` names); the gateway queues
/// each fairly against the others.
pub mod callers {
    /// Both node controllers share this identity upstream.
    pub const NODE_CONTROLLER: &str = "node-controller";
    /// The service controller.
    pub const SERVICE_CONTROLLER: &str = "service-controller";
    /// The route controller.
    pub const ROUTE_CONTROLLER: &str = "route-controller";
}

/// Taint kubelet `--cloud-provider=external` puts on a new node until the CCM initializes it.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Taint the lifecycle controller puts on a node whose instance is shut down.
pub const TAINT_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// Kubelet's `--node-ip`, which must match a cloud address and is put first.
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
/// Finalizer that keeps a Service until its cloud load balancer is deleted.
pub const FINALIZER_LB_CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";

/// Node labels the node controller sets, GA and deprecated beta forms.
pub mod labels {
    /// `node.kubernetes.io/instance-type`
    pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    /// `beta.kubernetes.io/instance-type`
    pub const INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
    /// `topology.kubernetes.io/zone`
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    /// `failure-domain.beta.kubernetes.io/zone`
    pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
    /// `topology.kubernetes.io/region`
    pub const REGION: &str = "topology.kubernetes.io/region";
    /// `failure-domain.beta.kubernetes.io/region`
    pub const REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
    /// Nodes carrying it (with any value but false) are kept out of load balancers.
    pub const EXCLUDE_FROM_EXTERNAL_LBS: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

    /// (beta, GA) pairs; upstream treats the beta label as the source of truth when only it exists.
    pub const BETA_TO_GA: [(&str, &str); 3] = [
        (ZONE_BETA, ZONE),
        (REGION_BETA, REGION),
        (INSTANCE_TYPE_BETA, INSTANCE_TYPE),
    ];
}
