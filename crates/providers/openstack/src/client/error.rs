//! Typed errors of the OpenStack APIs: the status, the service's own error body (Keystone,
//! Nova, Neutron and Octavia each have their shape) and what a caller should do about it.

use std::{fmt, time::Duration};

use http::{HeaderMap, Method, StatusCode};
use provider::ProviderError;

use super::Service;

/// How long a caller waits after a 409 (the object is busy: Octavia's `PENDING_*`, Nova's task
/// states) before asking again.
pub const CONFLICT_RETRY_AFTER: Duration = Duration::from_secs(5);
/// How long a caller waits after a 412 (a stale `If-Match` revision): re-read and try again.
pub const PRECONDITION_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What went wrong, as a caller decides on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 404: the object (or the URL) does not exist. The caller decides what that means.
    NotFound,
    /// 409 (other than Neutron's `OverQuota`): the object is busy or in the wrong state.
    Conflict,
    /// 412: an `If-Match` revision is stale.
    PreconditionFailed,
    /// 401 (after one re-authentication), or Keystone refused the credentials.
    Unauthorized,
    /// 403 (other than a quota): the policy forbids it.
    Forbidden,
    /// A quota is exhausted: Neutron's `OverQuota` (409), a 413, Nova's or Octavia's 403 naming
    /// a quota.
    OverQuota,
    /// 429 (see [`ApiError::retry_after`]).
    RateLimited,
    /// 400 and the other 4xx: the request can never succeed as it is.
    BadRequest,
    /// 5xx.
    Server,
    /// No answer: connection refused or reset, TLS failure, timeout.
    Transport,
    /// An answer the client cannot read: not JSON, the wrong shape, a redirect.
    Decode,
    /// The catalog has no endpoint for the service in the region with the interface.
    NoEndpoint,
    /// The credentials or TLS settings cannot be used as given (no request was made).
    Config,
    /// A listing had more pages than the caller's cap.
    TooManyPages,
}

impl ErrorKind {
    /// A short, stable label (metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::PreconditionFailed => "precondition_failed",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::OverQuota => "over_quota",
            Self::RateLimited => "rate_limited",
            Self::BadRequest => "bad_request",
            Self::Server => "server",
            Self::Transport => "transport",
            Self::Decode => "decode",
            Self::NoEndpoint => "no_endpoint",
            Self::Config => "config",
            Self::TooManyPages => "too_many_pages",
        }
    }
}

/// A failed OpenStack API call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The service called.
    pub service: Service,
    /// The HTTP method.
    pub method: Method,
    /// The path called, relative to the service's endpoint, without the query.
    pub path: Box<str>,
    /// The HTTP status, when there was an answer.
    pub status: Option<StatusCode>,
    /// What went wrong.
    pub kind: ErrorKind,
    /// The service's error type when it names one (Neutron `PortNotFound`, Nova `itemNotFound`,
    /// Keystone `Unauthorized`). Boxed, like `request_id`, to keep `Result<_, ApiError>` small.
    pub error_type: Option<Box<str>>,
    /// The service's message (or ours, without an answer).
    pub message: String,
    /// `X-OpenStack-Request-Id` (or Nova's `X-Compute-Request-Id`), for the cloud's logs.
    pub request_id: Option<Box<str>>,
    /// `Retry-After`, when the answer has one (429, 503).
    pub retry_after: Option<Duration>,
}

impl ApiError {
    /// An error without an answer from the service.
    pub fn local(
        service: Service,
        method: Method,
        path: &str,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            service,
            method,
            path: strip_query(path).into(),
            status: None,
            kind,
            error_type: None,
            message: message.into(),
            request_id: None,
            retry_after: None,
        }
    }

    /// The error an answer with a non-2xx status stands for.
    pub fn from_response(
        service: Service,
        method: Method,
        path: &str,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Self {
        let (error_type, message) = parse_error_body(body);
        let message = if message.is_empty() {
            status.canonical_reason().unwrap_or("no message").to_owned()
        } else {
            message
        };
        let kind = classify(status, error_type.as_deref(), &message);
        Self {
            service,
            method,
            path: strip_query(path).into(),
            status: Some(status),
            kind,
            error_type: error_type.map(String::into_boxed_str),
            message,
            request_id: request_id(headers).map(String::into_boxed_str),
            retry_after: retry_after(headers),
        }
    }

    /// 404: the caller decides whether that means "gone" (a definite answer, never guessed).
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// 409.
    pub fn is_conflict(&self) -> bool {
        self.kind == ErrorKind::Conflict
    }

    /// 412.
    pub fn is_precondition_failed(&self) -> bool {
        self.kind == ErrorKind::PreconditionFailed
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.service, self.method, self.path)?;
        match self.status {
            Some(s) => write!(f, ": {}", s.as_u16())?,
            None => write!(f, ": {}", self.kind.as_str())?,
        }
        if let Some(t) = &self.error_type {
            write!(f, " {t}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(id) = &self.request_id {
            write!(f, " (request {id})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiError {}

impl From<ApiError> for ProviderError {
    /// The contract's mapping. A 404 is *not* [`ProviderError::InstanceNotFound`]: only the
    /// caller knows whether the missing object is the instance (see [`ApiError::is_not_found`]);
    /// one that reaches this conversion was not expected, so it is `Internal`.
    fn from(e: ApiError) -> Self {
        let text = e.to_string();
        match e.kind {
            ErrorKind::Conflict => ProviderError::RetryAfter {
                after: CONFLICT_RETRY_AFTER,
                message: text,
            },
            ErrorKind::PreconditionFailed => ProviderError::RetryAfter {
                after: PRECONDITION_RETRY_AFTER,
                message: text,
            },
            ErrorKind::RateLimited => ProviderError::Throttled {
                retry_after: e.retry_after,
                message: text,
            },
            // The message carries the service's own words, which name the quota.
            ErrorKind::OverQuota => ProviderError::QuotaExceeded(text),
            ErrorKind::BadRequest | ErrorKind::NoEndpoint | ErrorKind::Config => {
                ProviderError::InvalidArgument(text)
            }
            ErrorKind::Unauthorized | ErrorKind::Forbidden => {
                ProviderError::Internal(format!("OpenStack credentials or permissions: {text}"))
            }
            ErrorKind::Server | ErrorKind::Transport => ProviderError::Unavailable(text),
            ErrorKind::NotFound | ErrorKind::Decode | ErrorKind::TooManyPages => {
                ProviderError::Internal(text)
            }
        }
    }
}

fn strip_query(path: &str) -> &str {
    path.split_once('?').map_or(path, |(p, _)| p)
}

/// The kind from the status and the body's error type and message.
pub(crate) fn classify(status: StatusCode, error_type: Option<&str>, message: &str) -> ErrorKind {
    let lower = message.to_ascii_lowercase();
    let quota = error_type.is_some_and(|t| t == "OverQuota" || t == "overLimit")
        || lower.contains("quota exceeded")
        || lower.contains("quota has been met")
        || lower.contains("exceeded quota")
        || lower.contains("over quota");
    match status.as_u16() {
        404 => ErrorKind::NotFound,
        409 | 403 | 413 if quota => ErrorKind::OverQuota,
        413 => ErrorKind::OverQuota,
        409 => ErrorKind::Conflict,
        412 => ErrorKind::PreconditionFailed,
        401 => ErrorKind::Unauthorized,
        403 => ErrorKind::Forbidden,
        429 => ErrorKind::RateLimited,
        400..=499 => ErrorKind::BadRequest,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::Decode,
    }
}

/// `(error type, message)` from any of the error bodies OpenStack services send:
/// - Keystone: `{"error": {"code": 401, "title": "Unauthorized", "message": "…"}}`
/// - Nova: `{"itemNotFound": {"code": 404, "message": "…"}}` (the key is the type)
/// - Neutron: `{"NeutronError": {"type": "PortNotFound", "message": "…", "detail": ""}}`
/// - Octavia (WSME): `{"faultcode": "Client", "faultstring": "…", "debuginfo": null}`
/// - anything else (a proxy's HTML, webob's plain text): the text, trimmed and shortened.
pub(crate) fn parse_error_body(body: &[u8]) -> (Option<String>, String) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (None, plain_text(body));
    };
    let Some(obj) = value.as_object() else {
        return (None, plain_text(body));
    };
    let str_of = |v: &serde_json::Value, key: &str| v.get(key).and_then(|s| s.as_str()).map(str::to_owned);
    if let Some(n) = obj.get("NeutronError") {
        if let Some(s) = n.as_str() {
            return (None, s.to_owned());
        }
        return (str_of(n, "type"), str_of(n, "message").unwrap_or_default());
    }
    if let Some(k) = obj.get("error").filter(|e| e.is_object()) {
        return (str_of(k, "title"), str_of(k, "message").unwrap_or_default());
    }
    if let Some(msg) = str_of(&value, "faultstring") {
        return (None, msg);
    }
    // Nova (and Octavia's older shape): one key, an object with a message.
    if obj.len() == 1
        && let Some((key, inner)) = obj.iter().next()
        && let Some(msg) = str_of(inner, "message")
    {
        return (Some(key.clone()), msg);
    }
    if let Some(msg) = str_of(&value, "message").or_else(|| str_of(&value, "description")) {
        return (str_of(&value, "title"), msg);
    }
    (None, plain_text(body))
}

fn plain_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end < text.len() {
        format!("{}…", &text[..end])
    } else {
        text
    }
}

fn request_id(headers: &HeaderMap) -> Option<String> {
    ["x-openstack-request-id", "x-compute-request-id", "x-request-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()).map(str::to_owned))
}

/// `Retry-After` in seconds (the HTTP-date form is rare from OpenStack; it is read too).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let secs = (at.timestamp() - chrono::Utc::now().timestamp()).max(0);
    Some(Duration::from_secs(secs as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(status: u16, body: &str) -> ApiError {
        let mut headers = HeaderMap::new();
        headers.insert("x-openstack-request-id", "req-1".parse().unwrap());
        if status == 429 {
            headers.insert("retry-after", "7".parse().unwrap());
        }
        ApiError::from_response(
            Service::Network,
            Method::GET,
            "/ports?device_id=x",
            StatusCode::from_u16(status).unwrap(),
            &headers,
            body.as_bytes(),
        )
    }

    /// Error bodies of Zed's services, as the test cloud sends them (the quota ones from a
    /// project with quota 0: Nova 403, Neutron 409 `OverQuota`, Octavia 403), and 413/429/5xx
    /// shapes from their source and proxies.
    #[test]
    fn classifies_real_error_bodies() {
        let table: &[(u16, &str, ErrorKind, Option<&str>, &str)] = &[
            (
                404,
                r#"{"itemNotFound": {"code": 404, "message": "Instance 4a3b could not be found."}}"#,
                ErrorKind::NotFound,
                Some("itemNotFound"),
                "Instance 4a3b could not be found.",
            ),
            (
                404,
                r#"{"NeutronError": {"type": "RouterNotFound", "message": "Router r1 could not be found", "detail": ""}}"#,
                ErrorKind::NotFound,
                Some("RouterNotFound"),
                "Router r1 could not be found",
            ),
            (
                404,
                r#"{"faultcode": "Client", "faultstring": "Load Balancer lb1 not found.", "debuginfo": null}"#,
                ErrorKind::NotFound,
                None,
                "Load Balancer lb1 not found.",
            ),
            (
                404,
                "404 Not Found\n\nThe resource could not be found.\n\n   ",
                ErrorKind::NotFound,
                None,
                "404 Not Found The resource could not be found.",
            ),
            (
                401,
                r#"{"error":{"code":401,"message":"The request you have made requires authentication.","title":"Unauthorized"}}"#,
                ErrorKind::Unauthorized,
                Some("Unauthorized"),
                "The request you have made requires authentication.",
            ),
            (
                409,
                r#"{"NeutronError": {"type": "OverQuota", "message": "Quota exceeded for resources: ['network'].", "detail": ""}}"#,
                ErrorKind::OverQuota,
                Some("OverQuota"),
                "Quota exceeded for resources: ['network'].",
            ),
            (
                403,
                r#"{"forbidden": {"code": 403, "message": "Quota exceeded for instances: Requested 1, but already used 0 of 0 instances"}}"#,
                ErrorKind::OverQuota,
                Some("forbidden"),
                "Quota exceeded for instances: Requested 1, but already used 0 of 0 instances",
            ),
            (
                403,
                r#"{"faultcode": "Client", "faultstring": "Quota has been met for resources: Load Balancer", "debuginfo": null}"#,
                ErrorKind::OverQuota,
                None,
                "Quota has been met for resources: Load Balancer",
            ),
            (
                413,
                r#"{"overLimit": {"code": 413, "message": "Maximum number of ports exceeded"}}"#,
                ErrorKind::OverQuota,
                Some("overLimit"),
                "Maximum number of ports exceeded",
            ),
            (
                403,
                r#"{"forbidden": {"code": 403, "message": "Policy doesn't allow os_compute_api:servers:detail:get_all_tenants to be performed."}}"#,
                ErrorKind::Forbidden,
                Some("forbidden"),
                "Policy doesn't allow os_compute_api:servers:detail:get_all_tenants to be performed.",
            ),
            (
                409,
                r#"{"conflictingRequest": {"code": 409, "message": "Cannot 'stop' instance 4a3b while it is in vm_state stopped"}}"#,
                ErrorKind::Conflict,
                Some("conflictingRequest"),
                "Cannot 'stop' instance 4a3b while it is in vm_state stopped",
            ),
            (
                409,
                r#"{"faultcode": "Client", "faultstring": "Invalid state PENDING_UPDATE of loadbalancer resource lb1", "debuginfo": null}"#,
                ErrorKind::Conflict,
                None,
                "Invalid state PENDING_UPDATE of loadbalancer resource lb1",
            ),
            (
                412,
                r#"{"NeutronError": {"type": "RevisionNumberConstraintFailed", "message": "Constrained to 1, but current revision is 7", "detail": ""}}"#,
                ErrorKind::PreconditionFailed,
                Some("RevisionNumberConstraintFailed"),
                "Constrained to 1, but current revision is 7",
            ),
            (
                400,
                r#"{"badRequest": {"code": 400, "message": "Invalid input for field/attribute flavorRef."}}"#,
                ErrorKind::BadRequest,
                Some("badRequest"),
                "Invalid input for field/attribute flavorRef.",
            ),
            (
                400,
                r#"{"NeutronError": {"type": "InvalidInput", "message": "Invalid input for operation: 'garbage' is not of the form <key>=[value].", "detail": ""}}"#,
                ErrorKind::BadRequest,
                Some("InvalidInput"),
                "Invalid input for operation: 'garbage' is not of the form <key>=[value].",
            ),
            (429, "", ErrorKind::RateLimited, None, "Too Many Requests"),
            (
                500,
                r#"{"computeFault": {"code": 500, "message": "Unexpected API Error."}}"#,
                ErrorKind::Server,
                Some("computeFault"),
                "Unexpected API Error.",
            ),
            (
                503,
                "<html><body><h1>503 Service Unavailable</h1></body></html>",
                ErrorKind::Server,
                None,
                "<html><body><h1>503 Service Unavailable</h1></body></html>",
            ),
            (502, "null", ErrorKind::Server, None, "null"),
            (302, "", ErrorKind::Decode, None, "Found"),
        ];
        for (status, body, kind, ty, msg) in table {
            let e = err(*status, body);
            assert_eq!(e.kind, *kind, "{status} {body}");
            assert_eq!(e.error_type.as_deref(), *ty, "{status} {body}");
            assert_eq!(e.message, *msg, "{status} {body}");
            assert_eq!(e.request_id.as_deref(), Some("req-1"));
            assert_eq!(&*e.path, "/ports");
        }
        assert_eq!(err(429, "").retry_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn maps_onto_provider_errors() {
        use ProviderError as P;
        assert!(
            matches!(P::from(err(404, "")), P::Internal(_)),
            "404 is never InstanceNotFound by itself"
        );
        assert!(err(404, "").is_not_found());
        assert!(
            matches!(P::from(err(409, "")), P::RetryAfter { after, .. } if after == CONFLICT_RETRY_AFTER)
        );
        assert!(
            matches!(P::from(err(412, "")), P::RetryAfter { after, .. } if after == PRECONDITION_RETRY_AFTER)
        );
        assert!(matches!(P::from(err(429, "")),
            P::Throttled { retry_after: Some(d), .. } if d == Duration::from_secs(7)));
        // Every quota answer (Neutron 409 OverQuota, Nova's and Octavia's 403, a 413) is a
        // used-up quota, named in the message; never throttling, never an invalid argument.
        for (status, body, names) in [
            (
                409,
                r#"{"NeutronError": {"type": "OverQuota", "message": "Quota exceeded for resources: ['port'].", "detail": ""}}"#,
                "['port']",
            ),
            (
                403,
                r#"{"forbidden": {"code": 403, "message": "Quota exceeded for instances: Requested 1, but already used 0 of 0 instances"}}"#,
                "instances",
            ),
            (
                403,
                r#"{"faultcode": "Client", "faultstring": "Quota has been met for resources: Load Balancer", "debuginfo": null}"#,
                "Load Balancer",
            ),
            (
                413,
                r#"{"overLimit": {"code": 413, "message": "Maximum number of ports exceeded"}}"#,
                "ports",
            ),
        ] {
            let quota = P::from(err(status, body));
            assert!(
                matches!(&quota, P::QuotaExceeded(m) if m.contains(names) && m.contains(&status.to_string())),
                "{status}: {quota:?}"
            );
            assert!(!quota.is_throttled(), "{status}");
        }
        assert!(matches!(P::from(err(400, "")), P::InvalidArgument(_)));
        assert!(matches!(P::from(err(401, "")), P::Internal(m) if m.contains("credentials")));
        assert!(matches!(P::from(err(403, "")), P::Internal(_)));
        assert!(matches!(P::from(err(500, "")), P::Unavailable(_)));
        assert!(matches!(P::from(err(503, "")), P::Unavailable(_)));
        let t = ApiError::local(
            Service::Compute,
            Method::GET,
            "/servers",
            ErrorKind::Transport,
            "connection refused",
        );
        assert!(matches!(P::from(t), P::Unavailable(m) if m.contains("connection refused")));
    }

    #[test]
    fn display_names_everything_useful() {
        let e = err(
            404,
            r#"{"NeutronError": {"type": "PortNotFound", "message": "Port p could not be found.", "detail": ""}}"#,
        );
        assert_eq!(
            e.to_string(),
            "network GET /ports: 404 PortNotFound: Port p could not be found. (request req-1)"
        );
    }

    #[test]
    fn malformed_bodies_never_panic() {
        for body in [
            "",
            "{",
            "[]",
            "{\"NeutronError\": 3}",
            "{\"a\": {\"message\": 5}}",
            "\u{fffd}\u{0}",
            "{\"error\": \"x\"}",
        ] {
            let e = err(400, body);
            assert_eq!(e.kind, ErrorKind::BadRequest);
        }
        let long = "é".repeat(1000);
        assert!(err(500, &long).message.chars().count() <= 301);
    }
}
