//! The cluster's identity: the UID of its `kube-system` Namespace, which every cluster has from
//! its first start and keeps for life. Load-balancer calls carry it so that a provider can record
//! it on what it creates and leave alone what another cluster's controllers made, even under the
//! same `--cluster-name` (OCCM's default `kubernetes` is shared by many clusters in one project).

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// The namespace whose UID identifies the cluster.
pub const IDENTITY_NAMESPACE: &str = "kube-system";

/// How long a start waits for the API server before going on without the identity.
const PATIENCE: Duration = Duration::from_secs(60);

/// The `kube-system` Namespace's UID; empty (after a warning saying what is lost and how to
/// fix it) when it cannot be read: the RBAC rule is missing (`get` on namespaces), or the API
/// server did not answer within a minute. Transient errors are retried until then.
pub async fn cluster_identity(client: &Client, shutdown: &CancellationToken) -> String {
    let api = Api::<Namespace>::all(client.clone());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut pause = Duration::from_millis(200);
    loop {
        let why = match api.get(IDENTITY_NAMESPACE).await {
            Ok(ns) => match ns.metadata.uid.filter(|u| !u.is_empty()) {
                Some(uid) => return uid,
                None => "it has no UID".to_owned(),
            },
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => e.message,
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "reading the cluster identity; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return String::new(),
                    () = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(e) => e.to_string(),
        };
        tracing::warn!(
            namespace = IDENTITY_NAMESPACE,
            reason = %why,
            "cannot read the cluster identity (the kube-system Namespace's UID; the controller needs \
             `get` on namespaces): load balancers are not tagged with it, and another cluster's \
             load balancers under the same --cluster-name are told apart by name only"
        );
        return String::new();
    }
}
