//! Typed errors over gRPC: a [`GatewayError`] travels as a gRPC code plus a
//! `cloudgateway.v1.ErrorDetail` packed in the standard `google.rpc.Status` details trailer.

use std::time::Duration;

use prost::Message;
use tonic::{Code, Status};

use crate::v1::{ErrorDetail, ErrorReason, ItemError};

/// Type URL of [`ErrorDetail`] inside a `google.protobuf.Any`.
pub const ERROR_DETAIL_TYPE_URL: &str = "type.googleapis.com/cloudgateway.v1.ErrorDetail";

/// What went wrong with a gateway call, as the contract defines it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// The cloud says definitely that the instance does not exist.
    #[error("instance not found: {0}")]
    InstanceNotFound(String),
    /// The provider does not implement this capability.
    #[error("not implemented: {0}")]
    NotImplemented(String),
    /// Another controller owns this load balancer.
    #[error("implemented elsewhere: {0}")]
    ImplementedElsewhere(String),
    /// The cloud is working on it; call again after the delay.
    #[error("retry after {after:?}: {message}")]
    RetryAfter {
        /// Fixed delay before the next attempt.
        after: Duration,
        /// Human-readable reason.
        message: String,
    },
    /// The cloud's (or the gateway's) rate limit was hit.
    #[error("throttled: {message}")]
    Throttled {
        /// Optional hint of when to try again.
        retry_after: Option<Duration>,
        /// Human-readable reason.
        message: String,
    },
    /// A quota of the cloud account is used up; the message names it. Same gRPC code as
    /// [`GatewayError::Throttled`], but not a rate limit: it is retried with the caller's
    /// ordinary error backoff, and nobody slows down for it.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// The request can never succeed as it is.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A transient failure; retry with backoff.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The call's deadline passed (in the queue or in the cloud).
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// Anything else; the message says what.
    #[error("internal error: {0}")]
    Internal(String),
    /// The caller's identity may not make this call.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
}

impl GatewayError {
    /// The gRPC code this error travels with.
    pub fn code(&self) -> Code {
        match self {
            Self::InstanceNotFound(_) => Code::NotFound,
            Self::NotImplemented(_) => Code::Unimplemented,
            Self::ImplementedElsewhere(_) => Code::FailedPrecondition,
            Self::RetryAfter { .. } | Self::Unavailable(_) => Code::Unavailable,
            Self::Throttled { .. } | Self::QuotaExceeded(_) => Code::ResourceExhausted,
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Self::Internal(_) => Code::Internal,
            Self::PermissionDenied(_) => Code::PermissionDenied,
        }
    }

    /// The contract's reason for this error.
    pub fn reason(&self) -> ErrorReason {
        match self {
            Self::InstanceNotFound(_) => ErrorReason::InstanceNotFound,
            Self::NotImplemented(_) => ErrorReason::NotImplemented,
            Self::ImplementedElsewhere(_) => ErrorReason::ImplementedElsewhere,
            Self::RetryAfter { .. } => ErrorReason::RetryAfter,
            Self::Throttled { .. } => ErrorReason::Throttled,
            Self::QuotaExceeded(_) => ErrorReason::QuotaExceeded,
            Self::InvalidArgument(_) => ErrorReason::InvalidArgument,
            Self::Unavailable(_) => ErrorReason::Unavailable,
            Self::DeadlineExceeded(_) => ErrorReason::Unspecified,
            Self::Internal(_) => ErrorReason::Internal,
            Self::PermissionDenied(_) => ErrorReason::PermissionDenied,
        }
    }

    /// The human-readable part.
    pub fn message(&self) -> &str {
        match self {
            Self::InstanceNotFound(m)
            | Self::NotImplemented(m)
            | Self::ImplementedElsewhere(m)
            | Self::QuotaExceeded(m)
            | Self::InvalidArgument(m)
            | Self::Unavailable(m)
            | Self::DeadlineExceeded(m)
            | Self::Internal(m)
            | Self::PermissionDenied(m) => m,
            Self::RetryAfter { message, .. } | Self::Throttled { message, .. } => message,
        }
    }

    /// The delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RetryAfter { after, .. } => Some(*after),
            Self::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Whether repeating the same call later can succeed. A used-up quota can: once it is
    /// raised or something is deleted (later, with backoff; not within the call).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RetryAfter { .. }
                | Self::Throttled { .. }
                | Self::QuotaExceeded(_)
                | Self::Unavailable(_)
                | Self::DeadlineExceeded(_)
        )
    }

    fn detail(&self) -> ErrorDetail {
        ErrorDetail {
            reason: self.reason() as i32,
            retry_after: self.retry_after().map(duration_to_proto),
        }
    }

    /// Rebuilds the error from a code, a message and an optional detail. A known detail reason
    /// wins; without one the gRPC code decides (so plain gRPC errors such as a transport failure
    /// or a deadline map sensibly too). A reason newer than this client is unknown here and the
    /// code decides too: a client built before `QUOTA_EXCEEDED` reads it (RESOURCE_EXHAUSTED)
    /// as [`GatewayError::Throttled`] without a delay.
    pub fn from_parts(code: Code, message: String, detail: Option<&ErrorDetail>) -> Self {
        let reason = detail
            .and_then(|d| ErrorReason::try_from(d.reason).ok())
            .unwrap_or_default();
        let after = detail.and_then(|d| d.retry_after).and_then(duration_from_proto);
        match (reason, code) {
            (ErrorReason::InstanceNotFound, _) => Self::InstanceNotFound(message),
            (ErrorReason::NotImplemented, _) | (ErrorReason::Unspecified, Code::Unimplemented) => {
                Self::NotImplemented(message)
            }
            (ErrorReason::ImplementedElsewhere, _) => Self::ImplementedElsewhere(message),
            (ErrorReason::RetryAfter, _) => Self::RetryAfter {
                after: after.unwrap_or(Duration::ZERO),
                message,
            },
            (ErrorReason::Throttled, _) | (ErrorReason::Unspecified, Code::ResourceExhausted) => {
                Self::Throttled {
                    retry_after: after,
                    message,
                }
            }
            (ErrorReason::QuotaExceeded, _) => Self::QuotaExceeded(message),
            (ErrorReason::InvalidArgument, _) | (ErrorReason::Unspecified, Code::InvalidArgument) => {
                Self::InvalidArgument(message)
            }
            (ErrorReason::Unavailable, _) | (ErrorReason::Unspecified, Code::Unavailable) => {
                Self::Unavailable(message)
            }
            (ErrorReason::Unspecified, Code::DeadlineExceeded | Code::Cancelled) => {
                Self::DeadlineExceeded(message)
            }
            (ErrorReason::PermissionDenied, _)
            | (ErrorReason::Unspecified, Code::PermissionDenied | Code::Unauthenticated) => {
                Self::PermissionDenied(message)
            }
            // NOT_FOUND without the INSTANCE_NOT_FOUND reason is not a definite answer about an
            // instance (it may come from a proxy or an unknown method), so it is not one here.
            (ErrorReason::Internal | ErrorReason::Unspecified, _) => Self::Internal(message),
        }
    }

    /// Converts to a per-item error of a batch answer.
    pub fn to_item(&self) -> ItemError {
        ItemError {
            code: self.code() as i32,
            message: self.message().to_owned(),
            detail: Some(self.detail()),
        }
    }

    /// Converts a per-item error of a batch answer back.
    pub fn from_item(item: &ItemError) -> Self {
        Self::from_parts(
            Code::from_i32(item.code),
            item.message.clone(),
            item.detail.as_ref(),
        )
    }
}

impl From<GatewayError> for Status {
    fn from(err: GatewayError) -> Self {
        let any = prost_types::Any {
            type_url: ERROR_DETAIL_TYPE_URL.to_owned(),
            value: err.detail().encode_to_vec(),
        };
        let rpc_status = tonic_types::pb::Status {
            code: err.code() as i32,
            message: err.message().to_owned(),
            details: vec![any],
        };
        Status::with_details(
            err.code(),
            err.message().to_owned(),
            rpc_status.encode_to_vec().into(),
        )
    }
}

impl From<Status> for GatewayError {
    fn from(status: Status) -> Self {
        let detail = decode_detail(status.details());
        Self::from_parts(status.code(), status.message().to_owned(), detail.as_ref())
    }
}

/// Finds our [`ErrorDetail`] in an encoded `google.rpc.Status`; `None` for anything else.
fn decode_detail(details: &[u8]) -> Option<ErrorDetail> {
    if details.is_empty() {
        return None;
    }
    let rpc_status = tonic_types::pb::Status::decode(details).ok()?;
    rpc_status
        .details
        .iter()
        .find(|any| any.type_url == ERROR_DETAIL_TYPE_URL)
        .and_then(|any| ErrorDetail::decode(any.value.as_slice()).ok())
}

/// Converts a [`Duration`] to its protobuf form.
pub fn duration_to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Converts a protobuf duration; negative or out-of-range values give `None`.
pub fn duration_from_proto(d: prost_types::Duration) -> Option<Duration> {
    let secs = u64::try_from(d.seconds).ok()?;
    let nanos = u32::try_from(d.nanos).ok()?;
    Some(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_errors() -> Vec<GatewayError> {
        vec![
            GatewayError::InstanceNotFound("i-1".into()),
            GatewayError::NotImplemented("routes".into()),
            GatewayError::ImplementedElsewhere("external lb".into()),
            GatewayError::RetryAfter {
                after: Duration::from_millis(2500),
                message: "provisioning".into(),
            },
            GatewayError::Throttled {
                retry_after: Some(Duration::from_secs(1)),
                message: "slow down".into(),
            },
            GatewayError::Throttled {
                retry_after: None,
                message: "slow down".into(),
            },
            GatewayError::QuotaExceeded("TooManyLoadBalancers: 20 of 20 used".into()),
            GatewayError::InvalidArgument("bad ip".into()),
            GatewayError::Unavailable("try later".into()),
            GatewayError::Internal("boom".into()),
            GatewayError::PermissionDenied("not yours".into()),
        ]
    }

    #[test]
    fn every_error_survives_a_trip_through_a_grpc_status() {
        for err in all_errors() {
            let status: Status = err.clone().into();
            assert_eq!(status.code(), err.code(), "{err:?}");
            assert_eq!(GatewayError::from(status), err);
        }
    }

    #[test]
    fn every_error_survives_a_trip_through_a_batch_item() {
        for err in all_errors() {
            assert_eq!(GatewayError::from_item(&err.to_item()), err);
        }
    }

    #[test]
    fn plain_statuses_without_detail_map_by_code() {
        let cases = [
            (Code::Unavailable, GatewayError::Unavailable("x".into())),
            (
                Code::ResourceExhausted,
                GatewayError::Throttled {
                    retry_after: None,
                    message: "x".into(),
                },
            ),
            (Code::DeadlineExceeded, GatewayError::DeadlineExceeded("x".into())),
            (Code::Cancelled, GatewayError::DeadlineExceeded("x".into())),
            (Code::Unimplemented, GatewayError::NotImplemented("x".into())),
            (Code::InvalidArgument, GatewayError::InvalidArgument("x".into())),
            // A bare NOT_FOUND is not proof that an instance is gone.
            (Code::NotFound, GatewayError::Internal("x".into())),
            (Code::Unknown, GatewayError::Internal("x".into())),
        ];
        for (code, want) in cases {
            assert_eq!(GatewayError::from(Status::new(code, "x")), want, "{code:?}");
        }
    }

    #[test]
    fn a_quota_shares_throttlings_code_but_not_its_reason() {
        let quota = GatewayError::QuotaExceeded("Quota exceeded for resources: ['port']".into());
        let throttled = GatewayError::Throttled {
            retry_after: None,
            message: "slow down".into(),
        };
        assert_eq!(quota.code(), Code::ResourceExhausted);
        assert_eq!(quota.code(), throttled.code());
        assert_eq!(quota.reason(), ErrorReason::QuotaExceeded);
        assert_ne!(quota.reason(), throttled.reason());
        assert_eq!(quota.retry_after(), None);
        assert!(quota.is_retryable());
        assert_eq!(
            quota.to_string(),
            "quota exceeded: Quota exceeded for resources: ['port']"
        );
        let status: Status = quota.clone().into();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(GatewayError::from(status), quota);
    }

    /// What a client built before a reason was added does with it: the value is unknown to it,
    /// so the code decides. (This is how a client older than QUOTA_EXCEEDED reads one.)
    #[test]
    fn a_reason_newer_than_the_client_falls_back_to_the_code() {
        let unknown = ErrorDetail {
            reason: 1000,
            retry_after: None,
        };
        assert_eq!(
            GatewayError::from_parts(Code::ResourceExhausted, "x".into(), Some(&unknown)),
            GatewayError::Throttled {
                retry_after: None,
                message: "x".into()
            }
        );
        assert_eq!(
            GatewayError::from_parts(Code::Unavailable, "x".into(), Some(&unknown)),
            GatewayError::Unavailable("x".into())
        );
    }

    #[test]
    fn garbage_details_are_ignored_not_fatal() {
        let status = Status::with_details(Code::Unavailable, "x", vec![0xff, 0x00, 0x13].into());
        assert_eq!(GatewayError::from(status), GatewayError::Unavailable("x".into()));
    }

    #[test]
    fn only_transient_errors_are_retryable() {
        let retryable: Vec<bool> = all_errors().iter().map(GatewayError::is_retryable).collect();
        assert_eq!(
            retryable,
            [
                false, false, false, true, true, true, true, false, true, false, false
            ]
        );
    }
}
