//! Guarded writes: merge patches that carry the `metadata.resourceVersion` they were planned
//! from, so the API server refuses them with 409 Conflict if the object changed meanwhile
//! (the patch's equivalent of an update precondition). On conflict the object is read again and
//! the change planned anew, like client-go's `RetryOnConflict`. Only the fields a controller owns
//! are in a patch, so it never clobbers what others own (kubelet's conditions, other labels).
//! Every write and delete checks the replica's leadership right before it goes out.
//!
//! In dry-run ([`Writer::with_dry_run`]) nothing is written: each patch or delete is a planned
//! change ([`crate::dry_run`]), and the write answers the object as the patch would have made
//! it (applied here, in memory), so the sync goes on as after a real write.

use std::time::Duration;

use kube::{
    Api, Resource,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{
    dry_run::{DryRun, object_name},
    leader::Leadership,
};

/// Attempts before giving up on a conflicting object (client-go's `UpdateNodeSpecBackoff`).
const CONFLICT_ATTEMPTS: u32 = 20;

/// The merge patches a plan wants written to one object: its main resource (metadata and
/// spec) and its `/status`. Either may be absent; both absent means there is nothing to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Patches {
    /// Merge patch of the `/status` subresource, written second.
    pub status: Option<Value>,
    /// Merge patch of the object (the server ignores status here), written first.
    pub main: Option<Value>,
}

impl Patches {
    /// Only a main-resource patch.
    pub fn main(patch: Value) -> Self {
        Self {
            status: None,
            main: Some(patch),
        }
    }

    /// Only a status patch.
    pub fn status(patch: Value) -> Self {
        Self {
            status: Some(patch),
            main: None,
        }
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.main.is_none()
    }

    /// The patches in the order they are written.
    fn into_steps(self) -> Vec<Step> {
        [(Target::Main, self.main), (Target::Status, self.status)]
            .into_iter()
            .filter_map(|(target, patch)| Some((target, patch?)))
            .collect()
    }
}

/// A guarded write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError<E = std::convert::Infallible> {
    /// This replica does not hold a fresh leader lease; it must not write.
    #[error("not writing: this replica does not hold the leader lease")]
    NotLeading,
    /// The API server refused or could not be reached.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The change could not be planned from the object as read.
    #[error(transparent)]
    Plan(E),
}

impl<E> WriteError<E> {
    /// Whether the object is gone (404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Api(err) if is_not_found(err))
    }

    /// Separates the plan's error (`Err`) from a failed write (`Ok`).
    pub fn into_write_error(self) -> Result<WriteError, E> {
        match self {
            Self::Plan(err) => Err(err),
            Self::NotLeading => Ok(WriteError::NotLeading),
            Self::Api(err) => Ok(WriteError::Api(err)),
        }
    }
}

/// Who writes (the field manager) and whether they may (the leadership, checked right before
/// every write and every delete). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Writer {
    field_manager: String,
    leadership: Leadership,
    dry_run: DryRun,
    bookkeeping: &'static [&'static str],
}

impl Writer {
    /// Writes as `field_manager` (the controller's ID) while `leadership` allows.
    pub fn new(field_manager: &str, leadership: Leadership) -> Self {
        Self {
            field_manager: field_manager.to_owned(),
            leadership,
            dry_run: DryRun::off(),
            bookkeeping: &[],
        }
    }

    /// Annotations that only record what the controller knows (e.g. which provider holds a
    /// Service's load balancer): in dry-run, a patch setting nothing but these is logged and
    /// not planned, since it changes nothing the cluster or the cloud does. The real run
    /// writes them.
    #[must_use]
    pub fn with_bookkeeping_annotations(mut self, keys: &'static [&'static str]) -> Self {
        self.bookkeeping = keys;
        self
    }

    /// Whether `body` sets nothing but bookkeeping annotations.
    fn only_bookkeeping(&self, body: &Value) -> bool {
        let Some(top) = body.as_object() else {
            return false;
        };
        let Some(metadata) = top.get("metadata").and_then(Value::as_object) else {
            return false;
        };
        let Some(annotations) = metadata.get("annotations").and_then(Value::as_object) else {
            return false;
        };
        top.len() == 1
            && metadata.len() == 1
            && !annotations.is_empty()
            && annotations.keys().all(|k| self.bookkeeping.contains(&k.as_str()))
    }

    /// Plans instead of writing when `dry_run` is on: every patch and delete becomes a planned
    /// change, and answers as if it had been made.
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: DryRun) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// The leadership the writes are fenced by.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// Reads `name`, lets `plan` decide the patches from it (`Err`: the change cannot be made,
    /// returned as [`WriteError::Plan`]) and writes them guarded by the resourceVersion read:
    /// the main patch first, then the status patch guarded by the version the first write
    /// returned (upstream's order: update the node, then patch its status). A conflict on
    /// either starts over with a fresh read and a fresh plan.
    ///
    /// Returns the object as last written, or `None` when there was nothing to do.
    ///
    /// # Errors
    /// [`WriteError::NotLeading`] when the leader lease is not fresh; [`WriteError::Plan`]; the
    /// API error of the read or a write (404 when the object is gone), or a 409 after
    /// [`CONFLICT_ATTEMPTS`] attempts.
    pub async fn write<K, F, E>(
        &self,
        api: &Api<K>,
        name: &str,
        mut plan: F,
    ) -> Result<Option<K>, WriteError<E>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
        F: FnMut(&K) -> Result<Patches, E>,
    {
        self.write_planned(api, name, None, |k| plan(k).map(Patches::into_steps))
            .await
    }

    /// [`Writer::write`], planned first from `known`, the object as the watch delivered it: a
    /// write costs no read, and nothing to do costs no request at all. A stale copy only costs
    /// a 409, then a fresh read and plan.
    ///
    /// # Errors
    /// As [`Writer::write`].
    pub async fn write_from<K, F, E>(
        &self,
        api: &Api<K>,
        known: &K,
        mut plan: F,
    ) -> Result<Option<K>, WriteError<E>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
        F: FnMut(&K) -> Result<Patches, E>,
    {
        let name = known.meta().name.clone().unwrap_or_default();
        self.write_planned(api, &name, Some(known.clone()), |k| {
            plan(k).map(Patches::into_steps)
        })
        .await
    }

    /// The write loop behind every guarded write: plan from `known` (else a fresh read), write
    /// the planned steps, and start over with a fresh read on a conflict.
    async fn write_planned<K, F, E>(
        &self,
        api: &Api<K>,
        name: &str,
        mut known: Option<K>,
        mut plan: F,
    ) -> Result<Option<K>, WriteError<E>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
        F: FnMut(&K) -> Result<Vec<Step>, E>,
    {
        let mut attempt = 1;
        loop {
            let current = match known.take() {
                Some(known) => known,
                None => api.get(name).await?,
            };
            let steps = plan(&current).map_err(WriteError::Plan)?;
            if steps.is_empty() {
                return Ok(None);
            }
            match self.write_once(api, name, current, steps).await {
                Err(WriteError::Api(kube::Error::Api(status)))
                    if status.code == 409 && attempt < CONFLICT_ATTEMPTS =>
                {
                    tracing::debug!(name, attempt, "conflict; reading the object again");
                    tokio::time::sleep(conflict_backoff()).await;
                    attempt += 1;
                }
                written => return written.map(Some),
            }
        }
    }

    async fn write_once<K, E>(
        &self,
        api: &Api<K>,
        name: &str,
        current: K,
        steps: Vec<Step>,
    ) -> Result<K, WriteError<E>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..Default::default()
        };
        let mut object = current;
        for (target, mut body) in steps {
            let Some(version) = object.meta().resource_version.clone() else {
                return Err(WriteError::Api(kube::Error::Api(
                    kube::core::Status::failure("object has no resourceVersion", "InternalError")
                        .with_code(500)
                        .boxed(),
                )));
            };
            if !self.leadership.may_act() {
                return Err(WriteError::NotLeading);
            }
            if self.dry_run.enabled() {
                object = self.plan_patch(object, target, body);
                continue;
            }
            with_resource_version(&mut body, &version);
            object = match target {
                Target::Main => {
                    self.fenced(api.patch(name, &params, &Patch::Merge(&body)))
                        .await??
                }
                Target::Status => {
                    self.fenced(api.patch_status(name, &params, &Patch::Merge(&body)))
                        .await??
                }
                Target::StatusStrategic => {
                    self.fenced(api.patch_status(name, &params, &Patch::Strategic(&body)))
                        .await??
                }
            };
        }
        Ok(object)
    }

    /// [`Writer::write_from`] for a strategic merge patch of `/status` that `plan` returns
    /// (`None`: nothing to do). A strategic merge patch merges list items by their key (a
    /// Node's conditions by `type`, as upstream's `SetNodeCondition` writes them), so a patch
    /// carrying one condition leaves the others (kubelet's) as they are, where a merge patch
    /// would replace the whole list. Like every write here it carries the resourceVersion it was
    /// planned from: a concurrent change is a 409, then a fresh read and a fresh plan.
    ///
    /// # Errors
    /// As [`Writer::write`].
    pub async fn write_status_strategic_from<K, F, E>(
        &self,
        api: &Api<K>,
        known: &K,
        mut plan: F,
    ) -> Result<Option<K>, WriteError<E>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
        F: FnMut(&K) -> Result<Option<Value>, E>,
    {
        let name = known.meta().name.clone().unwrap_or_default();
        self.write_planned(api, &name, Some(known.clone()), |k| {
            Ok(plan(k)?
                .map(|body| (Target::StatusStrategic, body))
                .into_iter()
                .collect())
        })
        .await
    }

    /// In dry-run: `body` planned as a change of `object` instead of written, and `object` as
    /// the write would have returned it.
    fn plan_patch<K>(&self, object: K, target: Target, body: Value) -> K
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + serde::Serialize,
    {
        let kind = K::kind(&()).to_lowercase();
        if target == Target::Main && self.only_bookkeeping(&body) {
            tracing::info!(
                object = ?object.meta().name,
                patch = %body,
                "dry-run: would record bookkeeping annotations (not a planned change)"
            );
            return apply_locally(object, &body, false);
        }
        let touches_finalizers = body.pointer("/metadata/finalizers").is_some();
        let (change_kind, subresource) = match target {
            Target::Main if touches_finalizers => ("finalizer".to_owned(), ""),
            Target::Main => (format!("{kind}_patch"), ""),
            Target::Status | Target::StatusStrategic => (format!("{kind}_status"), "status"),
        };
        let meta = object.meta();
        let name = object_name(
            &K::kind(&()),
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
        let strategic = target == Target::StatusStrategic;
        let change = json!({
            "subresource": subresource,
            "patch_type": if strategic { "strategic" } else { "merge" },
            "patch": body,
        });
        self.dry_run.plan(&change_kind, &name, change);
        apply_locally(object, &body, strategic)
    }

    /// Runs a request only while this replica may act: a request still waiting (at the
    /// client-side rate limit, for a connection) when the lease could be taken over is dropped
    /// unsent, so a delay between the leadership check and the wire never lets a former leader
    /// write after the new one started.
    async fn fenced<T, E>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, WriteError<E>> {
        tokio::select! {
            result = request => Ok(result),
            () = self.leadership.lost() => Err(WriteError::NotLeading),
        }
    }

    /// Deletes `name` if it is still the object with `uid`, checking leadership right before
    /// the request. `Ok(false)` when it was already gone.
    ///
    /// # Errors
    /// [`WriteError::NotLeading`], or the API's error (409 when the uid no longer matches).
    pub async fn delete<K>(&self, api: &Api<K>, name: &str, uid: Option<String>) -> Result<bool, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        if !self.leadership.may_act() {
            return Err(WriteError::NotLeading);
        }
        if self.dry_run.enabled() {
            let kind = K::kind(&()).to_lowercase();
            let object = object_name(&K::kind(&()), api.namespace(), name);
            self.dry_run
                .plan(&format!("{kind}_delete"), &object, json!({ "uid": uid }));
            return Ok(true);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.fenced(api.delete(name, &params)).await? {
            Ok(_) => Ok(true),
            Err(err) if is_not_found(&err) => Ok(false),
            Err(err) => Err(err.into()),
        }
    }
}

/// Where a patch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The object, merge patch.
    Main,
    /// `/status`, merge patch.
    Status,
    /// `/status`, strategic merge patch.
    StatusStrategic,
}

/// One patch of a write.
type Step = (Target, Value);

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

/// `object` with `patch` applied as the API server would: a JSON merge patch (RFC 7386), or for
/// a strategic merge patch, the same with list items under `conditions` merged by their `type`
/// (the only strategic lists written here: a Node's conditions). An object the result no longer
/// reads as is returned unchanged.
fn apply_locally<K: DeserializeOwned + serde::Serialize>(object: K, patch: &Value, strategic: bool) -> K {
    let Ok(mut value) = serde_json::to_value(&object) else {
        return object;
    };
    merge(&mut value, patch, strategic);
    serde_json::from_value(value).unwrap_or(object)
}

fn merge(target: &mut Value, patch: &Value, strategic: bool) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(into) = target else { return };
    for (key, value) in fields {
        match (value, into.get_mut(key)) {
            (Value::Null, _) => {
                into.remove(key);
            }
            (Value::Array(items), Some(Value::Array(existing))) if strategic && key == "conditions" => {
                for item in items {
                    let kind = item.get("type");
                    match existing
                        .iter_mut()
                        .find(|e| kind.is_some() && e.get("type") == kind)
                    {
                        Some(found) => merge(found, item, strategic),
                        None => existing.push(item.clone()),
                    }
                }
            }
            (_, Some(existing)) => merge(existing, value, strategic),
            (_, None) => {
                let mut fresh = Value::Null;
                merge(&mut fresh, value, strategic);
                into.insert(key.clone(), fresh);
            }
        }
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
    fn a_planned_patch_is_applied_as_the_server_would() {
        let mut node = json!({
            "metadata": {"name": "n1", "labels": {"a": "1", "b": "2"}},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated"}
            ]}
        });
        merge(
            &mut node,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
            false,
        );
        assert_eq!(node["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        let condition = json!({"status": {"conditions": [
            {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"}
        ]}});
        let mut strategic = node.clone();
        merge(&mut strategic, &condition, true);
        let conditions = strategic["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2, "merged by type: {conditions:?}");
        assert_eq!(conditions[1]["reason"], "RouteCreated");
        assert_eq!(conditions[0]["type"], "Ready");
        // A merge patch replaces the list whole.
        merge(&mut node, &condition, false);
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn only_a_patch_of_nothing_but_bookkeeping_annotations_is_bookkeeping() {
        let writer = Writer::new("c", Leadership::unconditional())
            .with_bookkeeping_annotations(&["example.io/record"]);
        let rows = [
            (
                json!({"metadata": {"annotations": {"example.io/record": "aws"}}}),
                true,
            ),
            (
                json!({"metadata": {"annotations": {"example.io/record": "aws", "user": "x"}}}),
                false,
            ),
            (json!({"metadata": {"annotations": {}}}), false),
            (
                json!({"metadata": {"annotations": {"example.io/record": "aws"}, "finalizers": ["f"]}}),
                false,
            ),
            (
                json!({"metadata": {"annotations": {"example.io/record": "aws"}}, "spec": {}}),
                false,
            ),
            (
                json!({"metadata": {"labels": {"example.io/record": "aws"}}}),
                false,
            ),
            (json!([]), false),
        ];
        for (body, bookkeeping) in rows {
            assert_eq!(writer.only_bookkeeping(&body), bookkeeping, "{body}");
        }
        // Without bookkeeping keys, nothing is bookkeeping.
        let record = json!({"metadata": {"annotations": {"example.io/record": "aws"}}});
        assert!(!Writer::new("c", Leadership::unconditional()).only_bookkeeping(&record));
    }

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
