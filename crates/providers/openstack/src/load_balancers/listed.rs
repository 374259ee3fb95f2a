//! The project's load balancers and floating IPs, listed once for a batch of reads (two calls
//! for up to [`super::MAX_READ_BATCH`] Services), and a Service's found among them as the
//! provider finds it with its own calls: by its `load-balancer-id`, else its name, else OCCM's
//! legacy name.

use provider::{ProviderError, Result, ServiceSpec};

use crate::{neutron::floating_ips::FloatingIp, octavia::model::LoadBalancer};

/// The project's load balancers and floating IPs, listed once for a batch of reads.
pub struct Listed {
    /// Every load balancer of the project.
    pub load_balancers: Vec<LoadBalancer>,
    /// Every floating IP of the project.
    pub floating_ips: Vec<FloatingIp>,
}

impl Listed {
    /// As `OpenStackLoadBalancers::find` finds it, among the listed ones.
    pub fn find(
        &self,
        id: Option<&str>,
        lb_name: &str,
        service: &ServiceSpec,
    ) -> Result<Option<&LoadBalancer>> {
        let live = || {
            self.load_balancers
                .iter()
                .filter(|lb| lb.provisioning_status != "DELETED")
        };
        if let Some(id) = id
            && let Some(lb) = live().find(|lb| lb.id == id)
        {
            return Ok(Some(lb));
        }
        for name in [
            lb_name.to_owned(),
            provider::default_load_balancer_name(&service.uid),
        ] {
            if let Some(lb) = only_one(&name, live().filter(|lb| lb.name == name).collect())? {
                return Ok(Some(lb));
            }
        }
        Ok(None)
    }

    /// The floating IP on `port_id` (a VIP port), if any.
    pub fn floating_ip_on(&self, port_id: &str) -> Option<&FloatingIp> {
        self.floating_ips
            .iter()
            .find(|f| !port_id.is_empty() && f.port_id.as_deref() == Some(port_id))
    }
}

/// The one load balancer named `name` among `found`; more than one is refused, naming them.
pub fn only_one<L: std::borrow::Borrow<LoadBalancer>>(name: &str, mut found: Vec<L>) -> Result<Option<L>> {
    match found.len() {
        0 | 1 => Ok(found.pop()),
        n => Err(ProviderError::InvalidArgument(format!(
            "{n} load balancers are named {name}: {}; delete the extra ones",
            found
                .iter()
                .map(|l| l.borrow().id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(id: &str, name: &str, status: &str) -> LoadBalancer {
        LoadBalancer {
            id: id.into(),
            name: name.into(),
            provisioning_status: status.into(),
            ..LoadBalancer::default()
        }
    }

    #[test]
    fn a_service_is_found_among_the_listed_as_the_provider_finds_it() {
        let service = ServiceSpec {
            uid: "1234-5678".into(),
            ..ServiceSpec::default()
        };
        let legacy = provider::default_load_balancer_name(&service.uid);
        let listed = |lbs: Vec<LoadBalancer>| Listed {
            load_balancers: lbs,
            floating_ips: Vec::new(),
        };
        let found = |l: &Listed, id: Option<&str>| {
            l.find(id, "kube_service_k_ns_web", &service)
                .map(|lb| lb.map(|lb| lb.id.clone()))
        };
        let l = listed(vec![
            lb("by-id", "other", "ACTIVE"),
            lb("by-name", "kube_service_k_ns_web", "ACTIVE"),
        ]);
        assert_eq!(found(&l, Some("by-id")).unwrap(), Some("by-id".into()));
        // An ID no longer known falls back to the name (OCCM's #2751).
        assert_eq!(found(&l, Some("gone")).unwrap(), Some("by-name".into()));
        assert_eq!(found(&l, None).unwrap(), Some("by-name".into()));
        // A deleted one is not found; OCCM's legacy name is.
        let l = listed(vec![
            lb("old", "kube_service_k_ns_web", "DELETED"),
            lb("legacy", &legacy, "ACTIVE"),
        ]);
        assert_eq!(found(&l, None).unwrap(), Some("legacy".into()));
        assert_eq!(found(&listed(vec![]), None).unwrap(), None);
        // Two of one name: refused, naming both.
        let l = listed(vec![
            lb("a", "kube_service_k_ns_web", "ACTIVE"),
            lb("b", "kube_service_k_ns_web", "ERROR"),
        ]);
        match l.find(None, "kube_service_k_ns_web", &service) {
            Err(ProviderError::InvalidArgument(m)) => assert!(m.contains("a, b"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
