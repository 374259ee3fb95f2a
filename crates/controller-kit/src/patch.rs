//! Guarded writes: merge patches that carry the `metadata.resourceVersion` they were computed
//! from, so the API server refuses them with 409 Conflict if the object changed meanwhile
//! (the patch's equivalent of an update precondition). On conflict the object is read again and
//! the change recomputed, like client-go's `RetryOnConflict`. Only the fields a controller owns
//! are in a patch, so it never clobbers what others own (kubelet's conditions, other labels).

use std::time::Duration;

use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Attempts before giving up on a conflicting object (client-go's `UpdateNodeSpecBackoff`).
const CONFLICT_ATTEMPTS: u32 = 20;

/// Which part of the object the patch writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The object (metadata and spec; the server ignores status here).
    Main,
    /// The `/status` subresource.
    Status,
}

/// A guarded write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This replica does not hold a fresh leader lease; it must not write.
    #[error("not writing: this replica does not hold the leader lease")]
    NotLeading,
    /// The API server refused or could not be reached.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl WriteError {
    /// Whether the object is gone (404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Api(err) if is_not_found(err))
    }
}

/// Reads `name`, lets `compute` decide a merge patch from it (`None`: nothing to do), and writes
/// the patch guarded by the resourceVersion read. Retries on conflict with a fresh read.
///
/// Returns the patched object, or `None` when nothing needed doing.
///
/// # Errors
/// [`WriteError::NotLeading`] when the leader lease is not fresh; the API error of the read or
/// the write (404 when the object is gone), or a 409 after [`CONFLICT_ATTEMPTS`] attempts.
pub async fn guarded_merge_patch<K, F>(
    api: &Api<K>,
    name: &str,
    target: Target,
    field_manager: &str,
    mut compute: F,
) -> Result<Option<K>, WriteError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    F: FnMut(&K) -> Option<Value>,
{
    let params = PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..Default::default()
    };
    let mut attempt = 1;
    loop {
        let current = api.get(name).await?;
        let Some(mut body) = compute(&current) else {
            return Ok(None);
        };
        let Some(version) = current.meta().resource_version.clone() else {
            return Err(WriteError::Api(kube::Error::Api(
                kube::core::Status::failure("object has no resourceVersion", "InternalError")
                    .with_code(500)
                    .boxed(),
            )));
        };
        if !crate::leader::may_act() {
            return Err(WriteError::NotLeading);
        }
        with_resource_version(&mut body, &version);
        let written = match target {
            Target::Main => api.patch(name, &params, &Patch::Merge(&body)).await,
            Target::Status => api.patch_status(name, &params, &Patch::Merge(&body)).await,
        };
        match written {
            Ok(object) => return Ok(Some(object)),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                tracing::debug!(name, attempt, "conflict; reading the object again");
                tokio::time::sleep(conflict_backoff()).await;
                attempt += 1;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

fn with_resource_version(body: &mut Value, version: &str) {
    if !body.is_object() {
        *body = json!({});
    }
    let metadata = body
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| json!({})));
    if let Some(Value::Object(metadata)) = metadata {
        metadata.insert("resourceVersion".into(), Value::String(version.to_owned()));
    }
}

/// 50 ms with full jitter, as client-go's backoff.
fn conflict_backoff() -> Duration {
    Duration::from_millis(50).mul_f64(1.0 + rand::random::<f64>())
}

/// Whether a kube error is an API 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_precondition_joins_the_patch_metadata() {
        let mut body = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"x": 1}});
        with_resource_version(&mut body, "42");
        assert_eq!(
            body,
            json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "42"}, "spec": {"x": 1}})
        );
        let mut body = json!({"status": {"addresses": []}});
        with_resource_version(&mut body, "7");
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7"}, "status": {"addresses": []}})
        );
    }
}
