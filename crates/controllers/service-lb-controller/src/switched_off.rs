//! While the gateway's provider has switched load balancers off (a setting it was given, a
//! feature its cloud lacks; `Capabilities.unavailable`), the controller stays idle; this module
//! reports it on each Service it cannot serve: one Warning event per Service and reason,
//! however long the capability stays off (the runner calls [`SwitchedOffServices::report`] at
//! each check, about every minute, so that Services created meanwhile are reported too).

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use controller_kit::{
    dry_run::DryRun, events::Events, names::callers::SERVICE_CONTROLLER, runner::SwitchedOffReport,
};
use k8s_openapi::api::core::v1::Service;
use kube::{Api, Resource, api::ListParams};

use crate::plan::wants_load_balancer;

/// The Event's reason.
pub const REASON: &str = "LoadBalancersSwitchedOff";

/// Reports each Service this controller would serve (`wants_load_balancer` for its class).
pub struct SwitchedOffServices {
    class: Option<String>,
    /// (Service UID, reason) already reported.
    reported: Mutex<HashSet<(String, String)>>,
}

impl SwitchedOffServices {
    /// For the Services of `class` (`--load-balancer-class`).
    pub fn new(class: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            class,
            reported: Mutex::default(),
        })
    }

    /// The Services of `services` to report for `reason`, each once: those this controller
    /// serves and has not reported for that reason. Marks them reported.
    pub fn to_report<'a>(&self, services: &'a [Service], reason: &str) -> Vec<&'a Service> {
        let mut reported = self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        services
            .iter()
            .filter(|svc| wants_load_balancer(svc, self.class.as_deref()))
            .filter(|svc| {
                let uid = svc.metadata.uid.clone().unwrap_or_default();
                reported.insert((uid, reason.to_owned()))
            })
            .collect()
    }
}

/// The Event's note.
pub fn note(provider: &str, reason: &str) -> String {
    format!(
        "The cloud-gateway's provider {provider} switched load balancers off: {reason}. No load balancer is made for this Service until the setting is fixed and the gateway restarted."
    )
}

#[async_trait::async_trait]
impl SwitchedOffReport for SwitchedOffServices {
    async fn report(&self, client: &kube::Client, dry_run: &DryRun, provider: &str, reason: &str) {
        let services = match Api::<Service>::all(client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list Services to report that load balancers are switched off");
                return;
            }
        };
        let events = Events::new(client.clone(), SERVICE_CONTROLLER, None).with_dry_run(dry_run.clone());
        for svc in self.to_report(&services, reason) {
            tracing::warn!(
                service = %format!("{}/{}", svc.metadata.namespace.as_deref().unwrap_or_default(), svc.metadata.name.as_deref().unwrap_or_default()),
                provider,
                "load balancers are switched off: {reason}"
            );
            events
                .warning(
                    &svc.object_ref(&()),
                    REASON,
                    "EnsureLoadBalancer",
                    note(provider, reason),
                )
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(uid: &str, type_: &str, class: Option<&str>) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"type": type_, "loadBalancerClass": class},
        }))
        .unwrap()
    }

    /// Each LoadBalancer Service of the class once per reason; never a ClusterIP Service or
    /// another class's.
    #[test]
    fn each_served_service_is_reported_once_per_reason() {
        let services = [
            service("a", "LoadBalancer", None),
            service("b", "ClusterIP", None),
            service("c", "LoadBalancer", Some("other.example/lb")),
        ];
        let report = SwitchedOffServices::new(None);
        let names = |v: Vec<&Service>| {
            v.iter()
                .map(|s| s.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(report.to_report(&services, "tls")), ["a"]);
        assert!(report.to_report(&services, "tls").is_empty(), "reported once");
        let more = [services[0].clone(), service("d", "LoadBalancer", None)];
        assert_eq!(names(report.to_report(&more, "tls")), ["d"]);
        assert_eq!(
            names(report.to_report(&more, "cascade")),
            ["a", "d"],
            "a new reason is reported"
        );
        let classed = SwitchedOffServices::new(Some("other.example/lb".into()));
        assert_eq!(names(classed.to_report(&services, "tls")), ["c"]);
        assert!(note("openstack", "tls").contains("provider openstack switched load balancers off: tls."));
    }
}
