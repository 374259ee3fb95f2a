//! AWS errors → [`ProviderError`], and the retry classifier that keeps throttling visible.
//!
//! The decision is [`classify`], a pure function of the error code, the HTTP status and the
//! message; [`sdk_error`] only extracts those from an SDK error.

use std::time::Duration;

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::{
    interceptors::context::InterceptorContext,
    orchestrator::HttpResponse,
    retries::classifiers::{ClassifyRetry, RetryAction, RetryClassifierPriority},
};
use provider::ProviderError;

/// Error codes that mean "slow down": the AWS SDKs' throttling list plus EC2's own.
pub const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Codes of account quotas, as the EC2, Classic ELB and ELBv2 API references list them: the
/// request is fine, the account (or the resource) is full. Raising the quota or deleting
/// something fixes it, so it is neither an invalid argument nor a rate limit. Besides these,
/// any code named as AWS names its quota errors (`TooMany*`, `*LimitExceeded`) is one too,
/// except the throttling codes ([`THROTTLING_CODES`], checked first) and [`NOT_QUOTA_CODES`].
pub const QUOTA_CODES: &[&str] = &[
    // Classic ELB
    "TooManyLoadBalancers",
    "TooManyPolicies",
    "TooManyTags",
    // ELBv2
    "TooManyTargetGroups",
    "TooManyListeners",
    "TooManyTargets",
    "TooManyRegistrationsForTargetId",
    "TooManyRules",
    "TooManyActions",
    "TooManyCertificates",
    "TooManyUniqueTargetGroupsPerLoadBalancer",
    "TargetGroupAssociationLimit",
    "CapacityUnitsLimitExceeded",
    // EC2 and VPC
    "RulesPerSecurityGroupLimitExceeded",
    "SecurityGroupLimitExceeded",
    "SecurityGroupsPerInstanceLimitExceeded",
    "SecurityGroupsPerInterfaceLimitExceeded",
    "RouteLimitExceeded",
    "RouteTableLimitExceeded",
    "NetworkInterfaceLimitExceeded",
    "PrivateIpAddressLimitExceeded",
    "AddressLimitExceeded",
    "SubnetLimitExceeded",
    "VpcLimitExceeded",
    "TagLimitExceeded",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "ResourceLimitExceeded",
];

/// Codes named like quotas that are not one: EC2's `FilterLimitExceeded` says our request has
/// too many filters or values (a bug here, so `Internal`), however full the account is.
const NOT_QUOTA_CODES: &[&str] = &["FilterLimitExceeded"];

/// Codes of missing credentials or permissions: the gateway's identity needs fixing.
const AUTH_CODES: &[&str] = &[
    "AuthFailure",
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "MissingAuthenticationToken",
    "OptInRequired",
];

/// Codes of a resource busy with another change; trying again shortly succeeds.
const BUSY_CODES: &[&str] = &["ResourceInUse", "IncorrectState", "OperationInProgress"];

/// Delay suggested for [`BUSY_CODES`].
pub const BUSY_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Whether `code` is a throttling code.
pub fn is_throttling_code(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// Whether `code` says an account quota is used up (and not that the rate limit was hit).
pub fn is_quota_code(code: &str) -> bool {
    if is_throttling_code(code) || NOT_QUOTA_CODES.contains(&code) {
        return false;
    }
    QUOTA_CODES.contains(&code) || code.starts_with("TooMany") || code.ends_with("LimitExceeded")
}

/// Maps an AWS error onto the provider's typed error. `operation` names the API call for the
/// message; callers handle the not-found codes that mean success or "instance not found" in their
/// context before calling this.
pub fn classify(operation: &str, code: Option<&str>, message: &str, status: Option<u16>) -> ProviderError {
    let text = match code {
        Some(code) => format!("{operation}: {code}: {message}"),
        None => format!("{operation}: {message}"),
    };
    let status = status.unwrap_or(0);
    match code {
        Some(c) if is_throttling_code(c) => ProviderError::Throttled {
            retry_after: None,
            message: text,
        },
        _ if status == 429 => ProviderError::Throttled {
            retry_after: None,
            message: text,
        },
        // The code and AWS's message name the quota.
        Some(c) if is_quota_code(c) => ProviderError::QuotaExceeded(text),
        Some(c) if AUTH_CODES.contains(&c) => {
            ProviderError::Internal(format!("AWS credentials or permissions: {text}"))
        }
        Some(c) if BUSY_CODES.contains(&c) => ProviderError::RetryAfter {
            after: BUSY_RETRY_AFTER,
            message: text,
        },
        Some(c)
            if c.starts_with("Invalid")
                || c.starts_with("Validation")
                || c.starts_with("Unsupported")
                || c.starts_with("Missing")
                || c == "OperationNotPermitted"
                || c == "DuplicateListener" =>
        {
            ProviderError::InvalidArgument(text)
        }
        Some("InternalError" | "InternalFailure" | "ServiceUnavailable" | "Unavailable") => {
            ProviderError::Unavailable(text)
        }
        _ if status >= 500 => ProviderError::Unavailable(text),
        _ => ProviderError::Internal(text),
    }
}

/// The outcome of an idempotent write: an answer whose code is in `already` (a delete's "not
/// found", a create's "duplicate") means the cloud is already as the write would leave it, so
/// the write counts as done; any other error is mapped by [`sdk_error`].
pub fn done_or_already<T, E>(
    operation: &str,
    result: Result<T, SdkError<E, HttpResponse>>,
    already: &[&str],
) -> Result<(), ProviderError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match result {
        Ok(_) => Ok(()),
        Err(e) if code_of(&e).is_some_and(|code| already.contains(&code)) => Ok(()),
        Err(e) => Err(sdk_error(operation, &e)),
    }
}

/// Maps an SDK error of `operation` onto the provider's typed error.
pub fn sdk_error<E>(operation: &str, err: &SdkError<E, HttpResponse>) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match err {
        SdkError::ServiceError(service) => classify(
            operation,
            service.err().code(),
            service.err().message().unwrap_or("(no message)"),
            Some(service.raw().status().as_u16()),
        ),
        SdkError::TimeoutError(_) => ProviderError::Unavailable(format!("{operation}: timed out")),
        SdkError::DispatchFailure(_) => ProviderError::Unavailable(format!(
            "{operation}: could not reach the AWS endpoint: {}",
            DisplayErrorContext(err)
        )),
        SdkError::ResponseError(response) => classify(
            operation,
            None,
            &format!("unreadable response: {}", DisplayErrorContext(err)),
            Some(response.raw().status().as_u16()),
        ),
        _ => ProviderError::Internal(format!("{operation}: {}", DisplayErrorContext(err))),
    }
}

/// The error code of an SDK error, if the service sent one.
pub fn code_of<E>(err: &SdkError<E, HttpResponse>) -> Option<&str>
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(service) => service.err().code(),
        _ => None,
    }
}

/// The error message of an SDK error, if the service sent one.
pub fn message_of<E>(err: &SdkError<E, HttpResponse>) -> &str
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(service) => service.err().message().unwrap_or(""),
        _ => "",
    }
}

/// The `<Code>` of an AWS query/EC2 XML error body.
pub fn xml_error_code(body: &[u8]) -> Option<&str> {
    let body = std::str::from_utf8(body).ok()?;
    let start = body.find("<Code>")? + "<Code>".len();
    let len = body[start..].find("</Code>")?;
    Some(body[start..start + len].trim())
}

/// Forbids the SDK's retries of throttled requests, so every throttling answer reaches the
/// gateway, whose adaptive limiter slows all callers down. Other retries (network errors, 5xx)
/// stay with the SDK's standard strategy.
///
/// Classifiers are generic over operations, so this one reads the raw response: HTTP 429, or an
/// XML error body whose `<Code>` is a throttling code (EC2 answers `RequestLimitExceeded` with
/// 503, ELBv2 `Throttling` with 400).
#[derive(Debug, Default, Clone, Copy)]
pub struct NeverRetryThrottling;

impl ClassifyRetry for NeverRetryThrottling {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        let Some(response) = ctx.response() else {
            return RetryAction::NoActionIndicated;
        };
        if response.status().as_u16() == 429 {
            return RetryAction::RetryForbidden;
        }
        match response.body().bytes().and_then(xml_error_code) {
            Some(code) if is_throttling_code(code) => RetryAction::RetryForbidden,
            _ => RetryAction::NoActionIndicated,
        }
    }

    fn name(&self) -> &'static str {
        "NeverRetryThrottling"
    }

    fn priority(&self) -> RetryClassifierPriority {
        // Run last so that a forbidden retry overrides the SDK's "throttling: retry" verdict.
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(err: &ProviderError) -> &'static str {
        err.metric_label()
    }

    #[test]
    fn codes_map_to_typed_errors() {
        let cases: &[(Option<&str>, u16, &str)] = &[
            (Some("RequestLimitExceeded"), 503, "throttled"),
            (Some("Throttling"), 400, "throttled"),
            (Some("ThrottlingException"), 400, "throttled"),
            (Some("TooManyRequestsException"), 400, "throttled"),
            (Some("SlowDown"), 503, "throttled"),
            (None, 429, "throttled"),
            (Some("SomethingNew"), 429, "throttled"),
            (Some("InvalidParameterValue"), 400, "invalid_argument"),
            (Some("InvalidSubnetID.NotFound"), 400, "invalid_argument"),
            (Some("ValidationError"), 400, "invalid_argument"),
            (Some("InvalidConfigurationRequest"), 400, "invalid_argument"),
            (Some("UnsupportedProtocol"), 400, "invalid_argument"),
            (Some("MissingParameter"), 400, "invalid_argument"),
            (Some("OperationNotPermitted"), 400, "invalid_argument"),
            (Some("TooManyLoadBalancers"), 400, "quota_exceeded"),
            (Some("TooManyTargetGroups"), 400, "quota_exceeded"),
            (Some("TooManyListeners"), 400, "quota_exceeded"),
            (Some("TooManyTargets"), 400, "quota_exceeded"),
            (Some("RouteLimitExceeded"), 400, "quota_exceeded"),
            (Some("RulesPerSecurityGroupLimitExceeded"), 400, "quota_exceeded"),
            (Some("SecurityGroupLimitExceeded"), 400, "quota_exceeded"),
            (Some("LimitExceededException"), 400, "throttled"),
            (Some("UnauthorizedOperation"), 403, "internal"),
            (Some("AuthFailure"), 401, "internal"),
            (Some("ResourceInUse"), 400, "retry_after"),
            (Some("IncorrectState"), 400, "retry_after"),
            (Some("InternalError"), 500, "unavailable"),
            (Some("ServiceUnavailable"), 503, "unavailable"),
            (None, 502, "unavailable"),
            (Some("Mystery"), 400, "internal"),
            (None, 400, "internal"),
        ];
        for (code, status, want) in cases {
            let err = classify("Op", *code, "msg", Some(*status));
            assert_eq!(kind(&err), *want, "{code:?} {status}: {err}");
        }
    }

    #[test]
    fn quota_codes_are_quotas_and_rate_limits_stay_throttling() {
        // Each documented quota code, and the ones only named like them.
        let quotas = QUOTA_CODES.iter().copied().chain([
            "TooManySomethingNew",
            "NatGatewayLimitExceeded",
            "LimitExceeded",
        ]);
        for code in quotas {
            let err = classify("Op", Some(code), "msg", Some(400));
            assert_eq!(
                err,
                ProviderError::QuotaExceeded(format!("Op: {code}: msg")),
                "{code}"
            );
            assert!(!err.is_throttled(), "{code}");
        }
        // Rate limits that look like quotas by name stay throttling; a quota code never is.
        for code in [
            "RequestLimitExceeded",
            "BandwidthLimitExceeded",
            "LimitExceededException",
            "TooManyRequestsException",
        ] {
            assert_eq!(
                kind(&classify("Op", Some(code), "msg", Some(400))),
                "throttled",
                "{code}"
            );
            assert!(!is_quota_code(code), "{code}");
        }
        for code in THROTTLING_CODES {
            assert!(!is_quota_code(code), "{code}");
        }
        for code in QUOTA_CODES {
            assert!(!is_throttling_code(code), "{code}");
        }
        // Too many filters in our own request is no quota of the account.
        assert_eq!(
            kind(&classify("Op", Some("FilterLimitExceeded"), "msg", Some(400))),
            "internal"
        );
    }

    #[test]
    fn quota_errors_name_the_quota() {
        let err = classify(
            "AuthorizeSecurityGroupIngress",
            Some("RulesPerSecurityGroupLimitExceeded"),
            "The maximum number of rules per security group has been reached.",
            Some(400),
        );
        assert_eq!(
            err,
            ProviderError::QuotaExceeded(
                "AuthorizeSecurityGroupIngress: RulesPerSecurityGroupLimitExceeded: The maximum number of rules per security group has been reached."
                    .into()
            )
        );
    }

    #[test]
    fn throttled_errors_carry_the_cloud_message() {
        let err = classify(
            "DescribeInstances",
            Some("RequestLimitExceeded"),
            "Request limit exceeded.",
            None,
        );
        assert_eq!(
            err,
            ProviderError::Throttled {
                retry_after: None,
                message: "DescribeInstances: RequestLimitExceeded: Request limit exceeded.".into()
            }
        );
    }

    #[test]
    fn xml_error_codes_are_read_from_both_error_formats() {
        let ec2 = br#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>r</RequestID></Response>"#;
        let elb = br#"<ErrorResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>r</RequestId></ErrorResponse>"#;
        assert_eq!(xml_error_code(ec2), Some("RequestLimitExceeded"));
        assert_eq!(xml_error_code(elb), Some("Throttling"));
        assert_eq!(xml_error_code(b"<Response/>"), None);
        assert_eq!(xml_error_code(b"<Code>unterminated"), None);
        assert_eq!(xml_error_code(&[0xff, 0xfe]), None);
    }
}
