//! The one error type of every provider call, matching the contract's typed errors.

use std::time::Duration;

/// Result of a provider call.
pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// What a provider call can fail with. Vendors map their cloud's errors onto these; the gateway
/// maps these onto gRPC statuses. Callers decide on the variant, never on the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The cloud says definitely that the instance does not exist (terminated or never existed).
    /// Only this variant may lead a controller to delete a Node.
    #[error("instance not found: {0}")]
    InstanceNotFound(String),
    /// The provider does not implement the operation.
    #[error("not implemented: {0}")]
    NotImplemented(String),
    /// The load balancer is handled by another controller (upstream `ImplementedElsewhere`).
    #[error("implemented elsewhere: {0}")]
    ImplementedElsewhere(String),
    /// The operation is under way in the cloud; call again after `after` (upstream `RetryError`).
    #[error("retry after {after:?}: {message}")]
    RetryAfter {
        /// Fixed delay before the next attempt.
        after: Duration,
        /// Why.
        message: String,
    },
    /// The cloud's API rate limit was exceeded.
    #[error("throttled by the cloud API: {message}")]
    Throttled {
        /// The cloud's hint, when it gave one.
        retry_after: Option<Duration>,
        /// The cloud's message.
        message: String,
    },
    /// A quota of the cloud account is used up (load balancers, target groups, rules per
    /// security group, routes per table...). The request is fine and succeeds once the quota is
    /// raised or something is deleted. Not a rate limit: the gateway does not slow down on it.
    /// The message names the quota (the cloud's own words).
    #[error("cloud quota exceeded: {0}")]
    QuotaExceeded(String),
    /// The request can never succeed as it is.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A transient failure (network, 5xx); retry with backoff.
    #[error("cloud unavailable: {0}")]
    Unavailable(String),
    /// An unexpected failure.
    #[error("internal provider error: {0}")]
    Internal(String),
}

impl ProviderError {
    /// Whether this answer says the cloud is throttling us, so the caller should slow down. A
    /// used-up quota ([`ProviderError::QuotaExceeded`]) is not: calling less often frees none.
    pub fn is_throttled(&self) -> bool {
        matches!(self, Self::Throttled { .. })
    }

    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::InstanceNotFound(_) => "instance_not_found",
            Self::NotImplemented(_) => "not_implemented",
            Self::ImplementedElsewhere(_) => "implemented_elsewhere",
            Self::RetryAfter { .. } => "retry_after",
            Self::Throttled { .. } => "throttled",
            Self::QuotaExceeded(_) => "quota_exceeded",
            Self::InvalidArgument(_) => "invalid_argument",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_is_not_throttling() {
        let quota = ProviderError::QuotaExceeded("TooManyLoadBalancers: 20 of 20".into());
        assert!(!quota.is_throttled());
        assert_eq!(quota.metric_label(), "quota_exceeded");
        let throttled = ProviderError::Throttled {
            retry_after: None,
            message: "RequestLimitExceeded".into(),
        };
        assert!(throttled.is_throttled());
        assert_eq!(throttled.metric_label(), "throttled");
    }
}
