//! Watch streams: replay from a resourceVersion, then live events, with bookmarks, a
//! deadline, `410 Gone` for versions the history no longer holds, and closing a watcher that
//! falls too far behind (what the real cacher does to unresponsive watchers).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use crate::errors::ApiError;
use crate::registry::{Registry, parse_rv};
use crate::resources::ResourceDef;
use crate::selectors::Selection;
use crate::store::{Change, EventType, ObjKey, set_rv};
use crate::typed;

#[derive(Debug, Clone)]
pub struct WatchOpts {
    pub sel: Selection,
    pub rv: Option<String>,
    pub bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout: Duration,
    /// Encode objects as single-row `meta.k8s.io/v1` Tables (kubectl get -w).
    pub as_table: bool,
}

/// Validates watch options the way `validateWatchOptions` and the cacher do, before any
/// byte of the stream is written (so these are plain HTTP errors).
pub fn validate(opts: &WatchOpts, rv_match: Option<&str>, cont: Option<&str>) -> Result<(), ApiError> {
    use crate::errors::Cause;
    let mut causes = Vec::new();
    if opts.send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
        causes.push(Cause::forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if let Some(m) = rv_match {
        if opts.send_initial_events.is_none() {
            causes.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if m != "NotOlderThan" {
            causes.push(Cause::not_supported(
                "resourceVersionMatch",
                &json!(m),
                &["NotOlderThan"],
            ));
        }
        if cont.is_some() {
            causes.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    if opts.send_initial_events == Some(true) && !opts.bookmarks {
        causes.push(Cause::forbidden(
            "allowWatchBookmarks",
            "sendInitialEvents requires allowWatchBookmarks=true",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
    }
    parse_rv(opts.rv.as_deref().unwrap_or("")).map(|_| ())
}

fn line(ty: &str, object: &Value) -> Bytes {
    let mut buf = Vec::with_capacity(512);
    // Serializing a map of strings and values cannot fail.
    let _ = serde_json::to_writer(&mut buf, &json!({"type": ty, "object": object}));
    buf.push(b'\n');
    Bytes::from(buf)
}

fn bookmark(def: &ResourceDef, rv: u64, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta})
}

struct Watcher {
    def: &'static ResourceDef,
    ns: Option<String>,
    opts: WatchOpts,
    out: mpsc::Sender<Bytes>,
}

impl Watcher {
    fn in_scope(&self, key: &ObjKey) -> bool {
        !self.def.namespaced || self.ns.as_ref().is_none_or(|n| &key.ns == n)
    }

    /// `convertToWatchEvent`: an object that stops matching the selector is reported as
    /// DELETED, one that starts matching as ADDED.
    fn convert(&self, c: &Change) -> Option<(EventType, Arc<Value>)> {
        if !self.in_scope(&c.key) {
            return None;
        }
        let store = self.def.store;
        let cur = c.ty != EventType::Deleted && self.opts.sel.matches(store, &c.object);
        let old = c.prev.as_ref().is_some_and(|p| self.opts.sel.matches(store, p));
        match (cur, old) {
            (true, false) => Some((EventType::Added, c.object.clone())),
            (true, true) => Some((EventType::Modified, c.object.clone())),
            (false, true) => {
                if c.ty == EventType::Deleted {
                    Some((EventType::Deleted, c.object.clone()))
                } else {
                    let mut prev = c.prev.as_deref().cloned().unwrap_or(Value::Null);
                    set_rv(&mut prev, c.rv);
                    Some((EventType::Deleted, Arc::new(prev)))
                }
            }
            (false, false) => None,
        }
    }

    fn encode(&self, ty: EventType, obj: &Value) -> Bytes {
        let presented = typed::present(self.def, obj);
        if self.opts.as_table {
            let t = crate::table::to_table(self.def, &[Arc::new(presented)], None, false);
            line(ty.as_str(), &t)
        } else {
            line(ty.as_str(), &presented)
        }
    }

    async fn send(&self, b: Bytes) -> bool {
        self.out.send(b).await.is_ok()
    }

    async fn send_error(&self, e: ApiError) {
        let _ = self.out.send(line("ERROR", &e.to_status())).await;
    }

    async fn run(self, reg: Arc<Registry>) {
        let deadline = Instant::now() + self.opts.timeout;
        let requested = parse_rv(self.opts.rv.as_deref().unwrap_or("")).unwrap_or(0);
        if requested > reg.db.current_rv() {
            let wait = Duration::from_secs(3).min(self.opts.timeout);
            if !reg.db.wait_for_rv(requested, wait).await {
                self.send_error(ApiError::too_large_resource_version(
                    requested,
                    reg.db.current_rv(),
                ))
                .await;
                return;
            }
        }
        let initial = self.opts.send_initial_events == Some(true)
            || matches!(self.opts.rv.as_deref(), None | Some("") | Some("0"));
        // Subscribe and take the starting point under one read lock, so nothing falls in between.
        let (mut rx, start, snapshot_rv) = {
            let st = reg.db.read();
            let rx = st.subscribe(self.def.store);
            let start: Result<Vec<(EventType, Arc<Value>)>, u64> = if initial {
                Ok(st
                    .table(self.def.store)
                    .objects
                    .iter()
                    .filter(|(k, v)| self.in_scope(k) && self.opts.sel.matches(self.def.store, v))
                    .map(|(_, v)| (EventType::Added, v.clone()))
                    .collect())
            } else {
                st.changes_since(self.def.store, requested)
                    .map(|changes| changes.iter().filter_map(|c| self.convert(c)).collect())
            };
            (rx, start, st.rv)
        };
        let start = match start {
            Ok(s) => s,
            Err(oldest) => {
                reg.db
                    .expired_watches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.send_error(ApiError::expired(format!(
                    "too old resource version: {requested} ({oldest})"
                )))
                .await;
                return;
            }
        };
        for (ty, obj) in &start {
            if !self.send(self.encode(*ty, obj)).await {
                return;
            }
        }
        let mut last_rv = snapshot_rv;
        if self.opts.send_initial_events == Some(true)
            && self.opts.bookmarks
            && !self
                .send(line("BOOKMARK", &bookmark(self.def, snapshot_rv, true)))
                .await
        {
            return;
        }
        let interval = reg.cfg.bookmark_interval;
        let next_bookmark = |now: Instant| -> Option<Instant> {
            let heartbeat = now + interval;
            let pre_timeout = deadline.checked_sub(Duration::from_secs(2));
            let t = match pre_timeout {
                Some(p) if p < heartbeat => p,
                _ => heartbeat,
            };
            (t > now).then_some(t)
        };
        let mut bookmark_at = if self.opts.bookmarks {
            next_bookmark(Instant::now())
        } else {
            None
        };
        let mut closing = reg.db.watch_closings();
        loop {
            let bm_sleep = async {
                match bookmark_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = self.out.closed() => return,
                // The server ends every watch: the stream just stops, as a dropped connection does.
                _ = closing.changed() => return,
                msg = rx.recv() => match msg {
                    Ok(c) => {
                        if c.rv <= last_rv {
                            continue;
                        }
                        last_rv = c.rv;
                        if let Some((ty, obj)) = self.convert(&c)
                            && !self.send(self.encode(ty, &obj)).await
                        {
                            return;
                        }
                    }
                    // Too far behind: the real cacher closes such a watcher; the client re-watches.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        tracing::debug!(resource = self.def.plural, "closing a watcher that fell behind");
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = bm_sleep => {
                    // Deliver everything committed so far, then promise that resourceVersion.
                    let (pending, rv) = {
                        let st = reg.db.read();
                        let mut pending = Vec::new();
                        loop {
                            match rx.try_recv() {
                                Ok(c) => pending.push(c),
                                Err(broadcast::error::TryRecvError::Lagged(_)) => return,
                                Err(_) => break,
                            }
                        }
                        (pending, st.rv)
                    };
                    for c in pending {
                        if c.rv <= last_rv {
                            continue;
                        }
                        last_rv = c.rv;
                        if let Some((ty, obj)) = self.convert(&c)
                            && !self.send(self.encode(ty, &obj)).await
                        {
                            return;
                        }
                    }
                    last_rv = last_rv.max(rv);
                    if !self.send(line("BOOKMARK", &bookmark(self.def, rv, false))).await {
                        return;
                    }
                    bookmark_at = next_bookmark(Instant::now());
                }
            }
        }
    }
}

/// Starts a watch; the returned receiver yields newline-delimited JSON watch events.
pub fn start(
    reg: Arc<Registry>,
    def: &'static ResourceDef,
    ns: Option<String>,
    opts: WatchOpts,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(256);
    let w = Watcher {
        def,
        ns,
        opts,
        out: tx,
    };
    tokio::spawn(w.run(reg));
    rx
}
