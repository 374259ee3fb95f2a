//! What the provider serves, said once at start: one log line per capability it does not serve
//! (with the provider's reason when it switched it off), and the gauge
//! `cloudgateway_capability{capability,reason}` (1 served, 0 not). `GetCapabilities` answers the
//! same reasons ([`crate::service`]).

use provider::{Capability, Provider};

use crate::metrics::{CapabilityLabels, Metrics};

/// The reason label of a capability the provider does not implement at all.
pub const NOT_IMPLEMENTED: &str = "not implemented";

/// Whether the provider serves a capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Served.
    Served,
    /// Switched off by the provider, for this reason (a setting, a missing cloud feature).
    SwitchedOff(String),
    /// The provider does not implement it.
    NotImplemented,
}

/// Every capability's state: served when the provider hands it out; otherwise switched off
/// with the provider's reason, or not implemented when it gives none.
pub fn states(provider: &dyn Provider) -> Vec<(Capability, State)> {
    let mut off = provider.switched_off();
    Capability::ALL
        .into_iter()
        .map(|capability| {
            let served = match capability {
                Capability::Instances => provider.instances().is_some(),
                Capability::LoadBalancers => provider.load_balancers().is_some(),
                Capability::Routes => provider.routes().is_some(),
            };
            let state = match (served, off.remove(&capability)) {
                (true, _) => State::Served,
                (false, Some(reason)) => State::SwitchedOff(reason),
                (false, None) => State::NotImplemented,
            };
            (capability, state)
        })
        .collect()
}

/// Logs each capability not served (a warning when switched off, naming the reason) and sets
/// the gauge.
pub fn report(provider: &dyn Provider, metrics: &Metrics) {
    for (capability, state) in states(provider) {
        let (value, reason) = match &state {
            State::Served => (1, String::new()),
            State::SwitchedOff(reason) => {
                tracing::warn!(
                    provider = provider.name(),
                    capability = capability.as_str(),
                    reason = %reason,
                    "capability switched off: {capability} ({reason}); the other capabilities are served"
                );
                (0, reason.clone())
            }
            State::NotImplemented => {
                tracing::info!(
                    provider = provider.name(),
                    capability = capability.as_str(),
                    "capability not implemented by the provider: {capability}"
                );
                (0, NOT_IMPLEMENTED.to_owned())
            }
        };
        metrics
            .capabilities
            .get_or_create(&CapabilityLabels {
                capability: capability.as_str(),
                reason,
            })
            .set(value);
    }
}

#[cfg(test)]
mod tests {
    use provider::SwitchedOff;

    use super::*;
    use crate::bare::Bare;

    #[test]
    fn a_capability_off_carries_the_providers_reason_and_one_without_is_not_implemented() {
        let provider = Bare::switching_off(SwitchedOff::from([(
            Capability::Routes,
            "no router tags".to_owned(),
        )]));
        assert_eq!(
            states(&provider),
            [
                (Capability::Instances, State::NotImplemented),
                (Capability::LoadBalancers, State::NotImplemented),
                (Capability::Routes, State::SwitchedOff("no router tags".into())),
            ]
        );
        let metrics = Metrics::new();
        report(&provider, &metrics);
        let text = metrics.render();
        assert!(
            text.contains("cloudgateway_capability{capability=\"routes\",reason=\"no router tags\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("cloudgateway_capability{capability=\"instances\",reason=\"not implemented\"} 0"),
            "{text}"
        );
    }
}
