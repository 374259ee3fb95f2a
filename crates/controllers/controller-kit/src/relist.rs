//! The objects a kube-runtime `Controller` reconciles, from a reflected watch, such that a
//! relist's objects reach it only once its store holds them.
//!
//! `WatchStreamExt::applied_objects` passes each object of a relist on as it comes (`InitApply`),
//! but the reflector's store swaps in the relisted state only at its end (`InitDone`). The
//! Controller reconciles what its store holds for an object: until then, nothing for an object
//! created while the watch was down (the reconcile is skipped as `ObjectNotFound`) and the old
//! version of one changed or marked for deletion meanwhile (a reconcile that finds nothing to
//! do). Either way the change is missed until something triggers that object again: after an
//! API server restart or a compaction (a `410 Gone`, then a relist), a new LoadBalancer Service
//! was not provisioned, nor a deleted one released, found by the chaos suite (`watches`).
//!
//! [`applied_objects`] holds a relist's objects back until its end, then passes them all on.

use std::collections::VecDeque;

use futures::{Stream, StreamExt, stream};
use kube::runtime::watcher;

/// What `WatchStreamExt::applied_objects` gives, with a relist's objects held back until the
/// relist ends. `watch` must be reflected already (`reflector`, `WatchStreamExt::reflect`),
/// so that at its `InitDone` the store holds the relisted state.
pub fn applied_objects<K, S>(watch: S) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Send,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut relisted: Vec<K> = Vec::new();
    watch
        .map(move |event| -> VecDeque<Result<K, watcher::Error>> {
            match event {
                Ok(watcher::Event::Apply(obj)) => VecDeque::from([Ok(obj)]),
                Ok(watcher::Event::Delete(_)) => VecDeque::new(),
                Ok(watcher::Event::Init) => {
                    relisted.clear();
                    VecDeque::new()
                }
                Ok(watcher::Event::InitApply(obj)) => {
                    relisted.push(obj);
                    VecDeque::new()
                }
                Ok(watcher::Event::InitDone) => relisted.drain(..).map(Ok).collect(),
                Err(err) => VecDeque::from([Err(err)]),
            }
        })
        .flat_map(stream::iter)
}

#[cfg(test)]
mod tests {
    use futures::{StreamExt, stream};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef},
        watcher::Event,
    };

    use super::*;

    fn cm(name: &str, version: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        cm.metadata.resource_version = Some(version.into());
        cm
    }

    #[tokio::test]
    async fn a_relists_objects_come_once_the_store_holds_them() {
        let (store, writer) = reflector::store::<ConfigMap>();
        // Listed, watched, then a relist (after a 410) finding `a` changed and `b` new.
        let events: Vec<Result<Event<ConfigMap>, watcher::Error>> = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "1"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(cm("a", "2"))),
            Err(watcher::Error::WatchError(
                kube::core::Status::failure("too old resource version", "Expired")
                    .with_code(410)
                    .boxed(),
            )),
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "3"))),
            Ok(Event::InitApply(cm("b", "3"))),
            Ok(Event::InitDone),
        ];
        let reflected = stream::iter(events).reflect(writer);
        let mut objects = std::pin::pin!(applied_objects(reflected));
        let mut seen = Vec::new();
        while let Some(item) = objects.next().await {
            let Ok(obj) = item else { continue };
            // What the Controller reconciles: the store's version of the object.
            let held = store.get(&ObjectRef::from_obj(&obj));
            assert_eq!(
                held.as_deref(),
                Some(&obj),
                "{:?} passed on before the store held it",
                obj.metadata.name
            );
            seen.push(format!(
                "{}@{}",
                obj.metadata.name.unwrap_or_default(),
                obj.metadata.resource_version.unwrap_or_default()
            ));
        }
        assert_eq!(seen, ["a@1", "a@2", "a@3", "b@3"]);
    }

    #[tokio::test]
    async fn kube_runtimes_applied_objects_passes_a_relist_on_before_the_store_has_it() {
        // Why this module exists: with kube-runtime's own, `b` comes while the store lacks it.
        let (store, writer) = reflector::store::<ConfigMap>();
        let events: Vec<Result<Event<ConfigMap>, watcher::Error>> = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("b", "1"))),
            Ok(Event::InitDone),
        ];
        let mut objects = std::pin::pin!(stream::iter(events).reflect(writer).applied_objects());
        let first = objects.next().await.and_then(Result::ok).expect("b");
        assert!(store.get(&ObjectRef::from_obj(&first)).is_none());
    }
}
