//! The generic registry: create, get, list, update, patch and delete with the real server's
//! ordering of steps (admission, defaulting, preparation, validation, allocation, storage)
//! and its optimistic concurrency, finalizer and deletion rules.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::Config;
use crate::errors::{ApiError, ApiResult, Cause, success_status};
use crate::patch;
use crate::resources::{ResourceDef, Store, primary};
use crate::selectors::Selection;
use crate::store::{Db, ObjKey, State, rv_of};
use crate::strategy::{self, Taken, s};
use crate::typed;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
}

/// `fieldValidation`: what to do with fields the type does not have.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// A written object and the warnings for the `Warning` response header.
pub struct Written {
    pub object: Value,
    pub warnings: Vec<String>,
}

#[derive(Debug, Default, Clone)]
pub struct ListOpts {
    pub sel: Selection,
    pub limit: Option<usize>,
    pub cont: Option<String>,
    pub rv: Option<String>,
    pub rv_match: Option<String>,
}

pub struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub cont: Option<String>,
    pub remaining: Option<u64>,
}

#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    pub uid: Option<String>,
    pub rv: Option<String>,
    pub dry_run: bool,
}

/// Namespaces the real server refuses to delete.
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn meta_mut(v: &mut Value) -> &mut serde_json::Map<String, Value> {
    strategy::obj_mut(v, "metadata")
}

fn has_deletion_timestamp(v: &Value) -> bool {
    !s(v, "/metadata/deletionTimestamp").is_empty()
}

fn finalizers_empty(v: &Value) -> bool {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
}

fn key_for(def: &ResourceDef, ns: Option<&str>, name: &str) -> ObjKey {
    ObjKey::new(if def.namespaced { ns.unwrap_or("") } else { "" }, name)
}

const GENERATE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix() -> String {
    (0..5)
        .map(|_| GENERATE_ALPHABET[rand::random_range(0..GENERATE_ALPHABET.len())] as char)
        .collect()
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    /// The list's resourceVersion; negative (the real server writes -1): the latest.
    rv: i64,
    ns: String,
    name: String,
}

fn encode_continue(rv: i64, key: &ObjKey) -> String {
    let t = ContinueToken {
        v: "meta.k8s.io/v1".into(),
        rv,
        ns: key.ns.clone(),
        name: key.name.clone(),
    };
    // The real server's encoding (RawURLEncoding): safe in a query string as it is.
    CONTINUE_ENCODING.encode(serde_json::to_string(&t).unwrap_or_default())
}

const CONTINUE_ENCODING: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The real server's message for a continuation whose version was compacted (etcd3 store).
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent \
     list result. You can start a new list without the continue parameter, or use the continue \
     token in this response to retrieve the remainder of the results. Continuing with the \
     provided token results in an inconsistent list - objects that were created, modified, or \
     deleted between the time the first chunk was returned and now may show up in the list.";

fn decode_continue(s: &str) -> ApiResult<ContinueToken> {
    CONTINUE_ENCODING
        .decode(s)
        .ok()
        .and_then(|b| serde_json::from_slice::<ContinueToken>(&b).ok())
        .filter(|t| t.v == "meta.k8s.io/v1" && t.rv != 0)
        .ok_or_else(|| {
            ApiError::bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
            )
        })
}

pub fn parse_rv(s: &str) -> ApiResult<u64> {
    if s.is_empty() || s == "0" {
        return Ok(0);
    }
    s.parse::<u64>().map_err(|e| {
        // The real server answers this with a 500 (kubernetes#101350); clients treat either as
        // a request error, and 400 is what upstream is moving to.
        ApiError::bad_request(format!(
            "resourceVersion: Invalid value: {s:?}: strconv.ParseUint: parsing {s:?}: {e}"
        ))
    })
}

fn list_options_invalid(causes: Vec<Cause>) -> ApiError {
    ApiError::invalid("meta.k8s.io", "ListOptions", "", causes)
}

pub struct Registry {
    pub db: Arc<Db>,
    pub cfg: Arc<Config>,
}

impl Registry {
    pub fn new(cfg: Arc<Config>) -> Self {
        let alloc = crate::alloc::Allocators::new(cfg.service_cluster_ip_range, cfg.node_port_range.clone());
        let db = Arc::new(Db::new(alloc, cfg.watch_history_size, cfg.watch_channel_capacity));
        let reg = Registry { db, cfg };
        reg.bootstrap();
        reg
    }

    /// What a fresh cluster has: the system namespaces and the `kubernetes` service.
    fn bootstrap(&self) {
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let body = json!({"metadata": {"name": ns}});
            if let Err(e) = self.create(primary(Store::Namespaces), None, body, false) {
                tracing::error!(namespace = ns, error = %e, "bootstrap namespace");
            }
        }
        if self.cfg.kubernetes_service {
            let ip = self
                .db
                .read()
                .alloc
                .first_ip()
                .map(|ip| ip.to_string())
                .unwrap_or_default();
            let body = json!({
                "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"clusterIP": ip, "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}
            });
            if let Err(e) = self.create(primary(Store::Services), Some("default"), body, false) {
                tracing::error!(error = %e, "bootstrap kubernetes service");
            }
        }
    }

    pub fn get(&self, def: &ResourceDef, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        let st = self.db.read();
        match st.get(def.store, &key_for(def, ns, name)) {
            Some(v) => Ok(typed::present(def, v)),
            None => Err(ApiError::not_found(def, name)),
        }
    }

    pub async fn list(&self, def: &ResourceDef, ns: Option<&str>, opts: &ListOpts) -> ApiResult<ListPage> {
        let rv_str = opts.rv.clone().unwrap_or_default();
        let mut causes = Vec::new();
        if let Some(m) = &opts.rv_match {
            if rv_str.is_empty() {
                causes.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if opts.cont.is_some() {
                causes.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                causes.push(Cause::not_supported(
                    "resourceVersionMatch",
                    &json!(m),
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if m == "Exact" && rv_str == "0" {
                causes.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if !causes.is_empty() {
            return Err(list_options_invalid(causes));
        }
        if opts.cont.is_some() && !rv_str.is_empty() && rv_str != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let rv = parse_rv(&rv_str)?;
        let exact = opts.rv_match.as_deref() == Some("Exact");
        // A version the server has not reached yet: wait briefly, as the watch cache does.
        if rv > self.db.current_rv() && !self.db.wait_for_rv(rv, Duration::from_secs(3)).await {
            return Err(ApiError::too_large_resource_version(rv, self.db.current_rv()));
        }
        let token = opts.cont.as_deref().map(decode_continue).transpose()?;
        if token.is_some() && self.db.take_continue_expiry() {
            self.db.advance_and_compact();
        }
        let st = self.db.read();
        let (at, start) = match &token {
            Some(t) => (
                u64::try_from(t.rv).unwrap_or(st.rv),
                Some(ObjKey::new(&t.ns, &t.name)),
            ),
            None if exact => (rv, None),
            None => (st.rv, None),
        };
        let overlay = if at < st.rv {
            st.overlay_at(def.store, at).map_err(|_| match &token {
                // etcd3's handleCompactedErrorForPaging: 410, and a token that continues the
                // list at the latest version, for a client that accepts an inconsistent list.
                Some(t) => {
                    self.db
                        .expired_continues
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut e = ApiError::expired(INCONSISTENT_CONTINUE);
                    e.list_continue = Some(encode_continue(-1, &ObjKey::new(&t.ns, &t.name)));
                    e
                }
                None => ApiError::expired("The resourceVersion for the provided list is too old."),
            })?
        } else {
            Default::default()
        };
        let table = &st.table(def.store).objects;
        let in_scope = |k: &ObjKey| {
            (!def.namespaced || ns.is_none_or(|n| k.ns == n)) && start.as_ref().is_none_or(|s| k > s)
        };
        let lower = match (&start, ns.filter(|_| def.namespaced)) {
            (Some(s), _) => std::ops::Bound::Excluded(s.clone()),
            (None, Some(n)) => std::ops::Bound::Included(ObjKey::new(n, "")),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let candidates: Box<dyn Iterator<Item = (ObjKey, Arc<Value>)> + '_> = if overlay.is_empty() {
            Box::new(
                table
                    .range((lower, std::ops::Bound::Unbounded))
                    .take_while(|(k, _)| !def.namespaced || ns.is_none_or(|n| k.ns == n))
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
        } else {
            let mut merged: std::collections::BTreeMap<ObjKey, Arc<Value>> = table
                .iter()
                .filter(|(k, _)| in_scope(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, v) in &overlay {
                if !in_scope(k) {
                    continue;
                }
                match v {
                    Some(v) => merged.insert(k.clone(), v.clone()),
                    None => merged.remove(k),
                };
            }
            Box::new(merged.into_iter())
        };
        let mut items = Vec::new();
        let mut last_key = None;
        let mut cont = None;
        let mut remaining = None;
        let limit = opts.limit.filter(|l| *l > 0);
        let mut iter = candidates.filter(|(_, v)| opts.sel.matches(def.store, v));
        for (k, v) in iter.by_ref() {
            items.push(v);
            last_key = Some(k);
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        if limit.is_some_and(|l| items.len() >= l) {
            let rest = if opts.sel.is_everything() {
                let n = iter.count() as u64;
                remaining = Some(n).filter(|n| *n > 0);
                n
            } else {
                iter.next().map_or(0, |_| 1)
            };
            if rest > 0
                && let Some(k) = &last_key
            {
                cont = Some(encode_continue(i64::try_from(at).unwrap_or(i64::MAX), k));
            }
        }
        Ok(ListPage {
            items,
            rv: at,
            cont,
            remaining,
        })
    }

    fn check_namespace_admission(st: &State, def: &ResourceDef, ns: &str) -> ApiResult<()> {
        match st.get(Store::Namespaces, &ObjKey::new("", ns)) {
            None => Err(ApiError::not_found_gr("", "namespaces", ns)),
            Some(n) if has_deletion_timestamp(n) || s(n, "/status/phase") == "Terminating" => {
                let mut e = ApiError::forbidden(
                    def.group,
                    def.plural,
                    "",
                    format!("unable to create new content in namespace {ns} because it is being terminated"),
                );
                if let Some(d) = e.details.as_mut() {
                    d.insert(
                        "causes".into(),
                        json!([{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]),
                    );
                }
                Err(e)
            }
            Some(_) => Ok(()),
        }
    }

    /// Decodes a request body for `def` and reconciles its namespace with the URL's.
    fn decode_body(
        def: &ResourceDef,
        ns: Option<&str>,
        body: Value,
        fv: FieldValidation,
        warnings: &mut Vec<String>,
    ) -> ApiResult<Value> {
        let input = body.clone();
        let mut obj = typed::decode(def, body)?;
        let unknown = if fv == FieldValidation::Ignore {
            Vec::new()
        } else {
            typed::unknown_fields(&input, &obj)
        };
        if !unknown.is_empty() {
            let msgs: Vec<String> = unknown.iter().map(|u| format!("unknown field {u:?}")).collect();
            if fv == FieldValidation::Strict {
                return Err(ApiError::bad_request(format!(
                    "{kind} in version {ver:?} cannot be handled as a {kind}: strict decoding error: {}",
                    msgs.join(", "),
                    kind = def.kind,
                    ver = def.version
                )));
            }
            warnings.extend(msgs);
        }
        let meta = meta_mut(&mut obj);
        let body_ns = meta
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if def.namespaced {
            let url_ns = ns.unwrap_or("");
            if body_ns.is_empty() {
                meta.insert("namespace".into(), json!(url_ns));
            } else if body_ns != url_ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        } else {
            meta.remove("namespace");
        }
        Ok(typed::to_storage(def, obj))
    }

    pub fn create(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        self.create_with(def, ns, body, dry_run, FieldValidation::Ignore)
            .map(|w| w.object)
    }

    pub fn create_with(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        body: Value,
        dry_run: bool,
        fv: FieldValidation,
    ) -> ApiResult<Written> {
        let mut warnings = Vec::new();
        let mut obj = Self::decode_body(def, ns, body, fv, &mut warnings)?;
        strategy::defaults(def.store, &mut obj);
        strategy::admit_create(def.store, &mut obj);
        let store = def.store;
        self.db
            .write(|st| {
                if def.namespaced {
                    Self::check_namespace_admission(st, def, ns.unwrap_or(""))?;
                }
                let meta = meta_mut(&mut obj);
                if meta.get("name").and_then(Value::as_str).unwrap_or("").is_empty()
                    && let Some(g) = meta
                        .get("generateName")
                        .and_then(Value::as_str)
                        .filter(|g| !g.is_empty())
                {
                    let mut base = g.to_string();
                    base.truncate(58);
                    meta.insert("name".into(), json!(format!("{base}{}", random_suffix())));
                }
                if meta
                    .get("resourceVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|r| !r.is_empty())
                {
                    return Err(ApiError::internal_unknown(
                        "resourceVersion should not be set on objects to be created",
                    ));
                }
                meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
                meta.insert("creationTimestamp".into(), json!(now()));
                meta.remove("deletionTimestamp");
                meta.remove("deletionGracePeriodSeconds");
                meta.remove("managedFields");
                meta.remove("selfLink");
                let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                strategy::prepare_create(store, &mut obj);
                // Namespaces get their name label from defaulting, which needs the generated name.
                strategy::defaults(store, &mut obj);
                let causes = strategy::validate(store, def.namespaced, &obj, def.events_v1);
                if !causes.is_empty() {
                    return Err(ApiError::invalid_for(def, &name, causes));
                }
                let key = key_for(def, ns, &name);
                if st.get(store, &key).is_some() {
                    return Err(ApiError::already_exists(def, &name));
                }
                if store == Store::Services {
                    let taken = strategy::allocate_service(&mut st.alloc, &mut obj, None)?;
                    if dry_run {
                        strategy::release(&mut st.alloc, &taken);
                    }
                }
                if dry_run {
                    return Ok(typed::present(def, &obj));
                }
                let stored = st.put(store, key, obj);
                Ok(typed::present(def, &stored))
            })
            .map(|object| Written { object, warnings })
    }

    /// Update (PUT) of the main resource or `/status`.
    pub fn update(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
        dry_run: bool,
    ) -> ApiResult<Value> {
        self.update_with(def, ns, name, body, status, dry_run, FieldValidation::Ignore)
            .map(|w| w.object)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn update_with(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
        dry_run: bool,
        fv: FieldValidation,
    ) -> ApiResult<Written> {
        let mut warnings = Vec::new();
        let obj = Self::decode_body(def, ns, body, fv, &mut warnings)?;
        let body_name = s(&obj, "/metadata/name").to_string();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        self.db
            .write(|st| Self::update_locked(st, def, ns, name, obj, status, dry_run))
            .map(|object| Written { object, warnings })
    }

    fn update_locked(
        st: &mut State,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        mut new: Value,
        status: bool,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let store = def.store;
        let key = key_for(def, ns, name);
        let Some(old) = st.get(store, &key).cloned() else {
            return Err(ApiError::not_found(def, name));
        };
        strategy::defaults(store, &mut new);
        let new_rv = s(&new, "/metadata/resourceVersion").to_string();
        if !new_rv.is_empty() {
            let parsed = new_rv.parse::<u64>().map_err(|_| {
                ApiError::invalid_for(
                    def,
                    name,
                    vec![Cause::invalid(
                        "metadata.resourceVersion",
                        &json!(new_rv),
                        "must be a valid resource version",
                    )],
                )
            })?;
            if parsed != rv_of(&old) {
                return Err(ApiError::stale(def, name));
            }
        }
        // rest.BeforeUpdate: identity and lifecycle fields come from the stored object.
        {
            let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
            let meta = meta_mut(&mut new);
            meta.insert("name".into(), json!(name));
            match old_meta.get("generation") {
                Some(g) => meta.insert("generation".into(), g.clone()),
                None => meta.remove("generation"),
            };
            if meta.get("uid").and_then(Value::as_str).unwrap_or("").is_empty() {
                meta.insert("uid".into(), old_meta.get("uid").cloned().unwrap_or(json!("")));
            }
            if let Some(c) = old_meta.get("creationTimestamp") {
                meta.insert("creationTimestamp".into(), c.clone());
            }
            match old_meta.get("deletionTimestamp") {
                Some(d) => meta.insert("deletionTimestamp".into(), d.clone()),
                None => meta.remove("deletionTimestamp"),
            };
            match old_meta.get("deletionGracePeriodSeconds") {
                Some(d) => meta.insert("deletionGracePeriodSeconds".into(), d.clone()),
                None => meta.remove("deletionGracePeriodSeconds"),
            };
            meta.remove("managedFields");
            meta.remove("selfLink");
            meta.insert("resourceVersion".into(), json!(rv_of(&old).to_string()));
        }
        strategy::prepare_update(store, status, &mut new, &old);
        strategy::defaults(store, &mut new);
        let causes = strategy::validate_update(store, def.namespaced, &new, &old, def.events_v1);
        if !causes.is_empty() {
            return Err(ApiError::invalid_for(def, name, causes));
        }
        let mut taken: Vec<Taken> = Vec::new();
        if store == Store::Services && !status {
            taken = strategy::allocate_service(&mut st.alloc, &mut new, Some(&old))?;
        }
        if dry_run {
            strategy::release(&mut st.alloc, &taken);
            return Ok(typed::present(def, &new));
        }
        // Identical bytes are not written: no new resourceVersion, no watch event.
        if new == *old {
            return Ok(typed::present(def, &old));
        }
        if store == Store::Services {
            let keep = strategy::held(&new);
            let gone: Vec<Taken> = strategy::held(&old)
                .into_iter()
                .filter(|t| !keep.contains(t))
                .collect();
            strategy::release(&mut st.alloc, &gone);
        }
        // An update that empties the finalizers of an object being deleted deletes it.
        if has_deletion_timestamp(&new) && finalizers_empty(&new) && store != Store::Namespaces {
            Self::remove_locked(st, store, &key);
            return Ok(typed::present(def, &new));
        }
        let stored = st.put(store, key, new);
        Ok(typed::present(def, &stored))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        ptype: PatchType,
        bytes: &[u8],
        status: bool,
        dry_run: bool,
    ) -> ApiResult<Value> {
        self.patch_with(
            def,
            ns,
            name,
            ptype,
            bytes,
            status,
            dry_run,
            FieldValidation::Ignore,
        )
        .map(|w| w.object)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn patch_with(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        ptype: PatchType,
        bytes: &[u8],
        status: bool,
        dry_run: bool,
        fv: FieldValidation,
    ) -> ApiResult<Written> {
        let mut warnings = Vec::new();
        let patch_doc = match ptype {
            PatchType::Json => None,
            _ => Some(
                serde_json::from_slice::<Value>(bytes).map_err(|e| ApiError::bad_request(e.to_string()))?,
            ),
        };
        self.db.write(|st| {
            let key = key_for(def, ns, name);
            let Some(old) = st.get(def.store, &key).cloned() else {
                return Err(ApiError::not_found(def, name));
            };
            let mut cur = typed::present(def, &old);
            let patched = match (ptype, &patch_doc) {
                (PatchType::Json, _) => {
                    patch::json_patch(&mut cur, bytes)?;
                    cur
                }
                (PatchType::Merge, Some(p)) => {
                    json_patch::merge(&mut cur, p);
                    cur
                }
                (PatchType::Strategic, Some(p)) => {
                    // The strategic schema is keyed by the stored (core) field names.
                    let base = typed::to_storage(def, cur);
                    let p = if def.events_v1 { typed::event_v1_to_core(p) } else { p.clone() };
                    typed::present(def, &patch::strategic_merge(def.store, &base, &p)?)
                }
                _ => return Err(ApiError::bad_request("invalid patch")),
            };
            // checkName / namespace agreement after the patch.
            let pname = s(&patched, "/metadata/name");
            if pname != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({pname}) does not match the name on the URL ({name})"
                )));
            }
            let pns = s(&patched, "/metadata/namespace");
            if def.namespaced && pns != ns.unwrap_or("") {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            let input = patched.clone();
            let obj = typed::decode(def, patched).map_err(|e| {
                ApiError::invalid("", "", "", vec![Cause::invalid("patch", &json!(""), e.message)])
            })?;
            if fv != FieldValidation::Ignore {
                let unknown: Vec<String> =
                    typed::unknown_fields(&input, &obj).iter().map(|u| format!("unknown field {u:?}")).collect();
                if !unknown.is_empty() && fv == FieldValidation::Strict {
                    return Err(ApiError::invalid(
                        "",
                        "",
                        "",
                        vec![Cause::invalid("patch", &json!(""), format!("strict decoding error: {}", unknown.join(", ")))],
                    ));
                }
                warnings.extend(unknown);
            }
            let obj = typed::to_storage(def, obj);
            Self::update_locked(st, def, ns, name, obj, status, dry_run)
        })
        .map(|object| Written { object, warnings })
    }

    fn remove_locked(st: &mut State, store: Store, key: &ObjKey) -> Option<Arc<Value>> {
        let gone = st.remove(store, key)?;
        if store == Store::Services {
            let held = strategy::held(&gone);
            strategy::release(&mut st.alloc, &held);
        }
        Some(gone)
    }

    /// Delete: honours preconditions; with finalizers, marks the object and keeps it.
    /// Returns the response body.
    pub fn delete(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<Value> {
        self.db.write(|st| Self::delete_locked(st, def, ns, name, opts))
    }

    fn delete_locked(
        st: &mut State,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<Value> {
        let store = def.store;
        let key = key_for(def, ns, name);
        let Some(old) = st.get(store, &key).cloned() else {
            return Err(ApiError::not_found(def, name));
        };
        if let Some(uid) = &opts.uid {
            let have = s(&old, "/metadata/uid");
            if uid != have {
                return Err(ApiError::conflict(
                    def,
                    name,
                    format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"),
                ));
            }
        }
        if let Some(rv) = &opts.rv {
            let have = rv_of(&old).to_string();
            if *rv != have {
                return Err(ApiError::conflict(
                    def,
                    name,
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {have}"
                    ),
                ));
            }
        }
        if store == Store::Namespaces {
            if IMMORTAL_NAMESPACES.contains(&name) {
                return Err(ApiError::forbidden(
                    "",
                    "namespaces",
                    name,
                    "this namespace may not be deleted",
                ));
            }
            // The namespace stays, Terminating, until the namespace controller empties it.
            if has_deletion_timestamp(&old) || opts.dry_run {
                return Ok(typed::present(def, &old));
            }
            let mut new = (*old).clone();
            meta_mut(&mut new).insert("deletionTimestamp".into(), json!(now()));
            meta_mut(&mut new).insert("deletionGracePeriodSeconds".into(), json!(0));
            if let Value::Object(m) = &mut new {
                let st_obj = m.entry("status").or_insert_with(|| json!({}));
                if let Value::Object(so) = st_obj {
                    so.insert("phase".into(), json!("Terminating"));
                }
            }
            let stored = st.put(store, key, new);
            return Ok(typed::present(def, &stored));
        }
        if has_deletion_timestamp(&old) {
            return Ok(typed::present(def, &old));
        }
        if !finalizers_empty(&old) {
            if opts.dry_run {
                return Ok(typed::present(def, &old));
            }
            let mut new = (*old).clone();
            meta_mut(&mut new).insert("deletionTimestamp".into(), json!(now()));
            meta_mut(&mut new).insert("deletionGracePeriodSeconds".into(), json!(0));
            let stored = st.put(store, key, new);
            return Ok(typed::present(def, &stored));
        }
        if opts.dry_run {
            return Ok(Self::deleted_response(def, &old));
        }
        let gone = Self::remove_locked(st, store, &key).unwrap_or(old);
        Ok(Self::deleted_response(def, &gone))
    }

    /// Services and namespaces return the deleted object (`ReturnDeletedObject`); the other
    /// kinds a `Status` naming it.
    fn deleted_response(def: &ResourceDef, obj: &Value) -> Value {
        if matches!(def.store, Store::Services | Store::Namespaces) {
            typed::present(def, obj)
        } else {
            success_status(def, s(obj, "/metadata/name"), s(obj, "/metadata/uid"))
        }
    }

    /// DELETE on a collection: deletes every selected object; answers the list of them.
    pub async fn delete_collection(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        sel: &Selection,
        dry_run: bool,
    ) -> ApiResult<Vec<Value>> {
        let page = self
            .list(
                def,
                ns,
                &ListOpts {
                    sel: sel.clone(),
                    ..Default::default()
                },
            )
            .await?;
        let mut out = Vec::new();
        for item in page.items {
            let name = s(&item, "/metadata/name").to_string();
            let ins = s(&item, "/metadata/namespace").to_string();
            let ns2 = if def.namespaced { Some(ins.as_str()) } else { None };
            match self.delete(
                def,
                ns2,
                &name,
                &DeleteOpts {
                    dry_run,
                    ..Default::default()
                },
            ) {
                Ok(_) => out.push(typed::present(def, &item)),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// One pass of the namespace controller: empties terminating namespaces, then removes
    /// the `kubernetes` finalizer and the namespace itself.
    pub fn reconcile_namespaces(&self) {
        let terminating: Vec<String> = {
            let st = self.db.read();
            st.table(Store::Namespaces)
                .objects
                .values()
                .filter(|n| has_deletion_timestamp(n))
                .map(|n| s(n, "/metadata/name").to_string())
                .collect()
        };
        for ns in terminating {
            self.db.write(|st| {
                for def in crate::resources::RESOURCES
                    .iter()
                    .filter(|d| d.namespaced && !d.events_v1)
                {
                    let keys: Vec<ObjKey> = st
                        .table(def.store)
                        .objects
                        .range(ObjKey::new(&ns, "")..)
                        .take_while(|(k, _)| k.ns == ns)
                        .filter(|(_, v)| !has_deletion_timestamp(v))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in keys {
                        let _ = Self::delete_locked(st, def, Some(&ns), &k.name, &DeleteOpts::default());
                    }
                }
                let left: usize = crate::resources::RESOURCES
                    .iter()
                    .filter(|d| d.namespaced && !d.events_v1)
                    .map(|d| {
                        st.table(d.store)
                            .objects
                            .range(ObjKey::new(&ns, "")..)
                            .take_while(|(k, _)| k.ns == ns)
                            .count()
                    })
                    .sum();
                if left > 0 {
                    return;
                }
                let key = ObjKey::new("", &ns);
                let Some(cur) = st.get(Store::Namespaces, &key).cloned() else {
                    return;
                };
                let has_kube_finalizer = cur
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|x| x == "kubernetes"));
                if has_kube_finalizer {
                    let mut new = (*cur).clone();
                    if let Some(Value::Array(f)) = new.pointer_mut("/spec/finalizers") {
                        f.retain(|x| x != "kubernetes");
                    }
                    st.put(Store::Namespaces, key.clone(), new);
                }
                let cur = st.get(Store::Namespaces, &key).cloned();
                if let Some(cur) = cur
                    && finalizers_empty(&cur)
                    && cur
                        .pointer("/spec/finalizers")
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
                {
                    st.remove(Store::Namespaces, &key);
                }
            });
        }
    }

    /// Names of all namespaces, for quick admission checks from tests.
    pub fn namespaces(&self) -> HashSet<String> {
        self.db
            .read()
            .table(Store::Namespaces)
            .objects
            .keys()
            .map(|k| k.name.clone())
            .collect()
    }
}
