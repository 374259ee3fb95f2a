//! The one door to the provider: wait for a turn, call, measure, and slow down when throttled.

use std::{future::Future, sync::Arc};

use gateway_api::error::GatewayError;
use tracing::{Instrument as _, field::Empty};

use crate::{
    convert::provider_error,
    metrics::{Metrics, OperationLabels, ProviderCallLabels},
    scheduler::{Class, Scheduler},
};

/// Wraps every provider call with admission, metrics and adaptive slowdown.
pub struct ProviderGate {
    scheduler: Arc<Scheduler>,
    metrics: Arc<Metrics>,
}

impl ProviderGate {
    /// A gate over `scheduler`.
    pub fn new(scheduler: Arc<Scheduler>, metrics: Arc<Metrics>) -> Self {
        Self { scheduler, metrics }
    }

    /// The scheduler behind the gate.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// Waits for `caller`'s turn in `class`, then runs `call` against the provider.
    pub async fn call<T, F, Fut>(
        &self,
        class: Class,
        caller: &str,
        operation: &'static str,
        call: F,
    ) -> Result<T, GatewayError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = provider::Result<T>>,
    {
        self.admit(class, caller).await?;
        self.call_admitted(class, operation, call).await
    }

    /// Waits for `caller`'s turn in `class`. Cancel-safe: dropping the future gives the place
    /// up without spending a token.
    pub async fn admit(&self, class: Class, caller: &str) -> Result<(), GatewayError> {
        self.scheduler
            .admit(class, caller)
            .await
            .map_err(|closed| GatewayError::Unavailable(closed.to_string()))
    }

    /// Runs `call` against the provider for a turn already granted by [`ProviderGate::admit`].
    /// Traced as a `provider call` span (the vendor SDK's own spans nest under it), with the
    /// operation and its outcome.
    pub async fn call_admitted<T, F, Fut>(
        &self,
        class: Class,
        operation: &'static str,
        call: F,
    ) -> Result<T, GatewayError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = provider::Result<T>>,
    {
        let span = tracing::info_span!(
            "provider call",
            otel.name = format!("provider {operation}"),
            otel.status_code = Empty,
            provider.operation = operation,
            class = class.label(),
            outcome = Empty,
        );
        let started = crate::clock::now();
        let result = span.in_scope(call).instrument(span.clone()).await;
        self.metrics
            .provider_latency
            .get_or_create(&OperationLabels { operation })
            .observe(crate::clock::now().duration_since(started).as_secs_f64());
        let outcome = match &result {
            Ok(_) => "success",
            Err(err) => err.metric_label(),
        };
        span.record("outcome", outcome);
        if result.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        self.metrics
            .provider_calls
            .get_or_create(&ProviderCallLabels { operation, outcome })
            .inc();
        // Only a rate limit slows the gateway down; a used-up quota (QuotaExceeded) is passed
        // on as it is: calling less often would free none of it.
        if let Err(err) = &result
            && err.is_throttled()
        {
            self.metrics.provider_throttled.inc();
            self.scheduler.on_throttled(class);
        }
        result.map_err(provider_error)
    }
}

#[cfg(test)]
mod tests {
    use provider::ProviderError;
    use token_bucket::Limit;

    use super::*;
    use crate::adaptive::AdaptiveConfig;

    fn gate() -> ProviderGate {
        let limit = Limit::new(40.0, 10.0).unwrap();
        let metrics = Arc::new(Metrics::new());
        let scheduler = Scheduler::start(limit, limit, AdaptiveConfig::default(), metrics.clone());
        ProviderGate::new(scheduler, metrics)
    }

    async fn answer(gate: &ProviderGate, err: ProviderError) -> GatewayError {
        gate.call(
            Class::Write,
            "service-controller",
            "ensure_load_balancer",
            || async { Err::<(), _>(err) },
        )
        .await
        .unwrap_err()
    }

    #[tokio::test]
    async fn a_used_up_quota_is_passed_on_without_slowing_down_unlike_throttling() {
        let g = gate();
        let quota = answer(&g, ProviderError::QuotaExceeded("TooManyLoadBalancers".into())).await;
        assert_eq!(quota, GatewayError::QuotaExceeded("TooManyLoadBalancers".into()));
        assert!((g.scheduler().current_rate(Class::Write) - 40.0).abs() < 1e-9);
        assert_eq!(g.metrics.provider_throttled.get(), 0);

        let throttled = answer(
            &g,
            ProviderError::Throttled {
                retry_after: None,
                message: "RequestLimitExceeded".into(),
            },
        )
        .await;
        assert!(
            matches!(throttled, GatewayError::Throttled { .. }),
            "{throttled:?}"
        );
        assert!(g.scheduler().current_rate(Class::Write) < 40.0 * 0.6);
        assert_eq!(g.metrics.provider_throttled.get(), 1);

        let rendered = g.metrics.render();
        for outcome in ["quota_exceeded", "throttled"] {
            assert!(
                rendered.contains(&format!(
                    "cloudgateway_provider_calls_total{{operation=\"ensure_load_balancer\",outcome=\"{outcome}\"}} 1"
                )),
                "{rendered}"
            );
        }
        g.scheduler().close();
    }
}
