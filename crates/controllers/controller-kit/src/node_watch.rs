//! A Node watch into a cache that signals when what a controller derives from the nodes
//! changed, comparing each node with what it was rather than the whole set on every event.

use std::{collections::HashMap, sync::Arc};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::{sync::Notify, task::JoinHandle};

/// Watches the Nodes into a cache and notifies `changed` when `derive` (`None`: the node does
/// not count) gives something new for a node, or a counted node goes. A re-list after the
/// watch fell behind signals only if it found such a change; the first list signals only with
/// `signal_first_list` (else the controller's first pass starts from it anyway).
pub fn watch_node_changes<V, F>(
    api: Api<Node>,
    derive: F,
    signal_first_list: bool,
) -> (Store<Node>, Arc<Notify>, JoinHandle<()>)
where
    V: PartialEq + Send + 'static,
    F: Fn(&Node) -> Option<V> + Send + 'static,
{
    let (store, writer) = reflector::store();
    let changed = Arc::new(Notify::new());
    let notify = changed.clone();
    let mut known: HashMap<String, V> = HashMap::new();
    let mut relisting: Option<HashMap<String, V>> = None;
    let mut listed = signal_first_list;
    let name = |node: &Node| node.metadata.name.clone().unwrap_or_default();
    let watch = crate::watch_backoff::retrying(watcher(api, watcher::Config::default()))
        .reflect(writer)
        .for_each(move |event| {
            let changed = match event {
                Ok(watcher::Event::Apply(node)) => match derive(&node) {
                    Some(value) => {
                        let name = name(&node);
                        let differs = known.get(&name) != Some(&value);
                        known.insert(name, value);
                        differs
                    }
                    None => known.remove(&name(&node)).is_some(),
                },
                Ok(watcher::Event::Delete(node)) => known.remove(&name(&node)).is_some(),
                Ok(watcher::Event::Init) => {
                    relisting = Some(HashMap::new());
                    false
                }
                Ok(watcher::Event::InitApply(node)) => {
                    if let (Some(list), Some(value)) = (relisting.as_mut(), derive(&node)) {
                        list.insert(name(&node), value);
                    }
                    false
                }
                Ok(watcher::Event::InitDone) => {
                    let list = relisting.take().unwrap_or_default();
                    let differs = listed && list != known;
                    known = list;
                    listed = true;
                    differs
                }
                Err(err) => {
                    tracing::warn!(error = %err, "node watch failed; retrying");
                    false
                }
            };
            if changed {
                notify.notify_one();
            }
            std::future::ready(())
        });
    (store, changed, tokio::spawn(watch))
}
