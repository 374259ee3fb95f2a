//! Objects, the global resourceVersion counter, per-resource watch history and fan-out.
//!
//! One lock guards everything: a write takes the next resourceVersion, stores the object,
//! appends to the resource's history ring and broadcasts, all before releasing the lock, so
//! every watcher sees the events of one resource in resourceVersion order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast, watch};

use crate::alloc::Allocators;
use crate::resources::Store;

/// Objects are ordered by namespace, then name: the order of etcd keys, hence of lists.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    pub ns: String,
    pub name: String,
}

impl ObjKey {
    pub fn new(ns: &str, name: &str) -> Self {
        ObjKey {
            ns: ns.to_string(),
            name: name.to_string(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change. For DELETED, `object` is the last state carrying the deletion's
/// resourceVersion, as the real watch cache reports it.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub ty: EventType,
    pub key: ObjKey,
    pub object: Arc<Value>,
    pub prev: Option<Arc<Value>>,
}

pub struct Table {
    pub objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    /// Every change with a larger resourceVersion is still in `history`.
    evicted_rv: u64,
    tx: broadcast::Sender<Arc<Change>>,
}

pub struct State {
    pub rv: u64,
    tables: HashMap<Store, Table>,
    pub alloc: Allocators,
    history_cap: usize,
}

pub fn rv_of(v: &Value) -> u64 {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

pub fn set_rv(v: &mut Value, rv: u64) {
    if let Some(Value::Object(m)) = v.get_mut("metadata") {
        m.insert("resourceVersion".into(), json!(rv.to_string()));
    } else if let Value::Object(m) = v {
        m.insert("metadata".into(), json!({"resourceVersion": rv.to_string()}));
    }
}

impl State {
    pub fn table(&self, store: Store) -> &Table {
        // Every store has a table from construction on.
        &self.tables[&store]
    }

    fn table_mut(&mut self, store: Store) -> &mut Table {
        self.tables.entry(store).or_insert_with(|| Table {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            evicted_rv: 0,
            tx: broadcast::channel(1).0,
        })
    }

    pub fn get(&self, store: Store, key: &ObjKey) -> Option<&Arc<Value>> {
        self.table(store).objects.get(key)
    }

    fn record(&mut self, store: Store, change: Change) {
        let cap = self.history_cap;
        let t = self.table_mut(store);
        let change = Arc::new(change);
        t.history.push_back(change.clone());
        while t.history.len() > cap {
            if let Some(old) = t.history.pop_front() {
                t.evicted_rv = old.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = t.tx.send(change);
    }

    /// Stores `obj` under a fresh resourceVersion and emits ADDED or MODIFIED.
    pub fn put(&mut self, store: Store, key: ObjKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        set_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        let prev = self.table_mut(store).objects.insert(key.clone(), obj.clone());
        let ty = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(
            store,
            Change {
                rv,
                ty,
                key,
                object: obj.clone(),
                prev,
            },
        );
        obj
    }

    /// Removes an object and emits DELETED.
    pub fn remove(&mut self, store: Store, key: &ObjKey) -> Option<Arc<Value>> {
        let prev = self.table_mut(store).objects.remove(key)?;
        self.rv += 1;
        let rv = self.rv;
        let mut last = (*prev).clone();
        set_rv(&mut last, rv);
        let last = Arc::new(last);
        self.record(
            store,
            Change {
                rv,
                ty: EventType::Deleted,
                key: key.clone(),
                object: last.clone(),
                prev: Some(prev),
            },
        );
        Some(last)
    }

    pub fn subscribe(&self, store: Store) -> broadcast::Receiver<Arc<Change>> {
        self.table(store).tx.subscribe()
    }

    /// Changes after `rv`, or `Err(oldest_known)` when history no longer reaches back that far.
    pub fn changes_since(&self, store: Store, rv: u64) -> Result<Vec<Arc<Change>>, u64> {
        let t = self.table(store);
        if rv < t.evicted_rv {
            return Err(t.evicted_rv);
        }
        Ok(t.history.iter().filter(|c| c.rv > rv).cloned().collect())
    }

    /// The objects of `store` as they were at `rv` (for continue tokens and exact lists):
    /// the keys changed since then, mapped to their state at `rv` (None: did not exist).
    pub fn overlay_at(&self, store: Store, rv: u64) -> Result<HashMap<ObjKey, Option<Arc<Value>>>, u64> {
        let changes = self.changes_since(store, rv)?;
        let mut overlay = HashMap::new();
        // Newest first, so the oldest change after `rv` decides: its `prev` is the state at `rv`.
        for c in changes.iter().rev() {
            overlay.insert(c.key.clone(), c.prev.clone());
        }
        Ok(overlay)
    }
}

pub struct Db {
    state: RwLock<State>,
    rv_tx: watch::Sender<u64>,
    /// Woken after every write (the namespace controller waits on it).
    pub changed: Notify,
    pub channel_capacity: usize,
    /// Bumped to end every open watch (a restart, a load balancer dropping connections).
    watch_epoch: watch::Sender<u64>,
    /// The next list continuation finds its version compacted (one-shot).
    expire_next_continue: AtomicBool,
    /// What clients were told had expired: watches from a compacted version, continuations.
    pub expired_watches: AtomicU64,
    pub expired_continues: AtomicU64,
}

impl Db {
    pub fn new(alloc: Allocators, history_cap: usize, channel_capacity: usize) -> Self {
        let mut tables = HashMap::new();
        for s in Store::ALL {
            tables.insert(
                s,
                Table {
                    objects: BTreeMap::new(),
                    history: VecDeque::new(),
                    evicted_rv: 0,
                    tx: broadcast::channel(channel_capacity.max(1)).0,
                },
            );
        }
        Db {
            state: RwLock::new(State {
                rv: 1,
                tables,
                alloc,
                history_cap: history_cap.max(1),
            }),
            rv_tx: watch::channel(1).0,
            changed: Notify::new(),
            channel_capacity,
            watch_epoch: watch::channel(0).0,
            expire_next_continue: AtomicBool::new(false),
            expired_watches: AtomicU64::new(0),
            expired_continues: AtomicU64::new(0),
        }
    }

    /// What etcd's compaction (and a new watch cache after a restart) does to the history: every
    /// change up to now is forgotten, so a watch from an older resourceVersion gets `410 Gone`
    /// and so does a list continuation or an exact list at one.
    pub fn compact(&self) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let rv = st.rv;
        for table in st.tables.values_mut() {
            table.history.clear();
            table.evicted_rv = rv;
        }
    }

    /// What etcd does between two pages of a list in a live cluster: its revision moves on (a
    /// write to any key moves it: a lease renewed, an event) and a compaction reaches the new
    /// one, so the version the first page was read at is gone even when nothing of this
    /// resource changed. ([`Db::compact`] alone, at the very version of the list, would leave
    /// that version readable, as in etcd.)
    pub fn advance_and_compact(&self) {
        self.write(|st| st.rv += 1);
        self.compact();
    }

    /// Ends every open watch, as a restarting server or a dropped connection does; clients
    /// watch again from the last version they saw.
    pub fn close_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// A receiver that changes when [`Db::close_watches`] is called.
    pub fn watch_closings(&self) -> watch::Receiver<u64> {
        self.watch_epoch.subscribe()
    }

    /// Compacts right before the next list continuation is served, so that it expires: what
    /// happens when etcd compacts between two pages of a client's list. It expires even when
    /// nothing was written between the pages (see [`Db::advance_and_compact`]).
    pub fn expire_next_continue(&self) {
        self.expire_next_continue.store(true, Ordering::SeqCst);
    }

    /// Whether a continuation was armed to expire (and disarms it).
    pub fn take_continue_expiry(&self) -> bool {
        self.expire_next_continue.swap(false, Ordering::SeqCst)
    }

    pub fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` under the write lock, then wakes whoever waits for a newer resourceVersion.
    pub fn write<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (r, rv) = {
            let mut g: RwLockWriteGuard<'_, State> = self.state.write().unwrap_or_else(|e| e.into_inner());
            let r = f(&mut g);
            (r, g.rv)
        };
        self.rv_tx.send_if_modified(|cur| {
            if *cur != rv {
                *cur = rv;
                true
            } else {
                false
            }
        });
        self.changed.notify_waiters();
        r
    }

    pub fn current_rv(&self) -> u64 {
        *self.rv_tx.borrow()
    }

    /// Waits (bounded) until the store has reached `rv`; false on timeout.
    pub async fn wait_for_rv(&self, rv: u64, within: std::time::Duration) -> bool {
        let mut rx = self.rv_tx.subscribe();
        let fut = rx.wait_for(|cur| *cur >= rv);
        matches!(tokio::time::timeout(within, fut).await, Ok(Ok(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(cap: usize) -> Db {
        Db::new(
            Allocators::new("10.0.0.0/24".parse().unwrap(), 30000..=30010),
            cap,
            16,
        )
    }

    #[test]
    fn one_counter_across_kinds_and_history_expiry() {
        let db = db(2);
        db.write(|s| {
            let a = s.put(
                Store::Nodes,
                ObjKey::new("", "a"),
                json!({"metadata": {"name": "a"}}),
            );
            let b = s.put(
                Store::Services,
                ObjKey::new("d", "b"),
                json!({"metadata": {"name": "b"}}),
            );
            assert_eq!(rv_of(&b), rv_of(&a) + 1);
            s.put(
                Store::Nodes,
                ObjKey::new("", "a"),
                json!({"metadata": {"name": "a"}}),
            );
            s.put(
                Store::Nodes,
                ObjKey::new("", "a"),
                json!({"metadata": {"name": "a", "labels": {"x": "y"}}}),
            );
            // 3 node changes, history of 2: the first is gone.
            assert!(s.changes_since(Store::Nodes, rv_of(&a) - 1).is_err());
            assert_eq!(s.changes_since(Store::Nodes, rv_of(&a)).map(|c| c.len()), Ok(2));
        });
    }

    #[test]
    fn overlay_reconstructs_past_state() {
        let db = db(10);
        db.write(|s| {
            let a1 = s.put(
                Store::Nodes,
                ObjKey::new("", "a"),
                json!({"metadata": {"name": "a"}, "v": 1}),
            );
            let at = s.rv;
            s.put(
                Store::Nodes,
                ObjKey::new("", "a"),
                json!({"metadata": {"name": "a"}, "v": 2}),
            );
            s.put(
                Store::Nodes,
                ObjKey::new("", "b"),
                json!({"metadata": {"name": "b"}}),
            );
            s.remove(Store::Nodes, &ObjKey::new("", "a"));
            let o = s.overlay_at(Store::Nodes, at).unwrap();
            assert_eq!(o[&ObjKey::new("", "a")].as_deref(), Some(&*a1));
            assert_eq!(o[&ObjKey::new("", "b")], None);
        });
    }
}
