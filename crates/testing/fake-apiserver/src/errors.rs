//! Errors as the real apiserver reports them: `meta.k8s.io/v1` `Status` objects with the
//! code, reason, message and details that `k8s.io/apimachinery/pkg/api/errors` produces.

use serde_json::{Map, Value, json};

use crate::resources::{ResourceDef, qualified};

/// One field error, the way `field.Error` becomes a `StatusCause`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// The error body, e.g. `Invalid value: 0: must be between 1 and 65535, inclusive`.
    pub message: String,
    /// The field path, e.g. `spec.ports[0].port`.
    pub field: String,
}

/// Renders a bad value the way Go's `%#v` does for the common cases (strings quoted).
pub fn fmt_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

impl Cause {
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl AsRef<str>) -> Self {
        let detail = detail.as_ref();
        let mut message = format!("Invalid value: {}", fmt_value(value));
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(detail);
        }
        Cause {
            reason: "FieldValueInvalid",
            message,
            field: field.into(),
        }
    }
    pub fn required(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        let detail = detail.as_ref();
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Cause {
            reason: "FieldValueRequired",
            message,
            field: field.into(),
        }
    }
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Cause {
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: {}", fmt_value(value)),
            field: field.into(),
        }
    }
    pub fn forbidden(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {}", detail.as_ref()),
            field: field.into(),
        }
    }
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {}",
                fmt_value(value),
                list.join(", ")
            ),
            field: field.into(),
        }
    }
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Cause {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max} bytes"),
            field: field.into(),
        }
    }
    /// `field.Invalid(..., "field is immutable")`, as `ValidateImmutableField` reports it.
    pub fn immutable(field: impl Into<String>, value: &Value) -> Self {
        Cause::invalid(field, value, "field is immutable")
    }
}

/// An API error carried to the HTTP layer and rendered as a `Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    /// Empty for `StatusReasonUnknown` (the field is then omitted, as Go's omitempty does).
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Map<String, Value>>,
    /// `metadata.continue` of the Status (used by an expired continue token).
    pub list_continue: Option<String>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

pub type ApiResult<T> = Result<T, ApiError>;

fn details(group: &str, kind: &str, name: &str) -> Map<String, Value> {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        d.insert("kind".into(), json!(kind));
    }
    d
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            list_continue: None,
        }
    }

    /// `errors.NewNotFound(qualifiedResource, name)`.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::not_found_gr(def.group, def.plural, name)
    }
    pub fn not_found_gr(group: &str, resource: &str, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", qualified(group, resource)),
        );
        e.details = Some(details(group, resource, name));
        e
    }
    /// The 404 for a path the server does not serve at all.
    pub fn path_not_found() -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        e.details = Some(Map::new());
        e
    }
    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", def.qualified()),
        );
        e.details = Some(details(def.group, def.plural, name));
        e
    }
    /// `errors.NewConflict`: the optimistic-concurrency failure and failed preconditions.
    pub fn conflict(def: &ResourceDef, name: &str, why: impl std::fmt::Display) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                def.qualified()
            ),
        );
        e.details = Some(details(def.group, def.plural, name));
        e
    }
    pub fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }
    /// `errors.NewInvalid(groupKind, name, errs)`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let gk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let body: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let message = match body.len() {
            0 => format!("{gk} {name:?} is invalid"),
            1 => format!("{gk} {name:?} is invalid: {}", body[0]),
            _ => format!("{gk} {name:?} is invalid: [{}]", body.join(", ")),
        };
        let mut d = details(group, kind, name);
        d.insert(
            "causes".into(),
            Value::Array(
                causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect(),
            ),
        );
        let mut e = Self::new(422, "Invalid", message);
        e.details = Some(d);
        e
    }
    pub fn invalid_for(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> Self {
        Self::invalid(def.group, def.kind, name, causes)
    }
    /// `NewGenericServerResponse(422, ...)`: what a failed JSON patch (e.g. a `test` op) answers.
    /// The real server drops the patch library's message here.
    pub fn generic_unprocessable() -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        e.details = Some(Map::new());
        e
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn forbidden(group: &str, resource: &str, name: &str, why: impl std::fmt::Display) -> Self {
        let q = qualified(group, resource);
        let message = if name.is_empty() {
            format!("{q} is forbidden: {why}")
        } else {
            format!("{q} {name:?} is forbidden: {why}")
        };
        let mut e = Self::new(403, "Forbidden", message);
        e.details = Some(details(group, resource, name));
        e
    }
    pub fn method_not_allowed(def: &ResourceDef, action: &str) -> Self {
        let mut e = Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind {:?}",
                def.qualified()
            ),
        );
        e.details = Some(details(def.group, def.plural, ""));
        e
    }
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }
    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: {}",
                accepted.join(", ")
            ),
        )
    }
    /// `errors.NewResourceExpired`: 410 with reason `Expired`.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    /// A raw (non-Status) error from deep inside the real server becomes a 500 with no reason.
    pub fn internal_unknown(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }
    pub fn internal(message: impl std::fmt::Display) -> Self {
        let mut e = Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        );
        let mut d = Map::new();
        d.insert("causes".into(), json!([{"message": message.to_string()}]));
        e.details = Some(d);
        e
    }
    /// What the cacher answers when asked for a resourceVersion it has not reached in time.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        );
        let mut d = Map::new();
        d.insert(
            "causes".into(),
            json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]),
        );
        d.insert("retryAfterSeconds".into(), json!(1));
        e.details = Some(d);
        e
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut s = Map::new();
        s.insert("kind".into(), json!("Status"));
        s.insert("apiVersion".into(), json!("v1"));
        let mut meta = Map::new();
        if let Some(c) = &self.list_continue {
            meta.insert("continue".into(), json!(c));
        }
        s.insert("metadata".into(), Value::Object(meta));
        s.insert("status".into(), json!("Failure"));
        s.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            s.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            s.insert("details".into(), Value::Object(d.clone()));
        }
        s.insert("code".into(), json!(self.code));
        Value::Object(s)
    }
}

/// A successful delete's `Status` (what `finalizeDelete` returns when the store does not
/// return the deleted object).
pub fn success_status(def: &ResourceDef, name: &str, uid: &str) -> Value {
    let mut d = details(def.group, def.plural, name);
    if !uid.is_empty() {
        d.insert("uid".into(), json!(uid));
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}
