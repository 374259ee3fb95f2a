//! HTTP: path routing, query parameters, content negotiation, and rendering of results and
//! errors. One fallback handler parses Kubernetes paths itself, as the real mux does.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::registry::{DeleteOpts, FieldValidation, ListOpts, PatchType, Registry, Written};
use crate::resources::{self, ResourceDef};
use crate::selectors::{FieldSelector, LabelSelector, Selection, convert_field_selector};
use crate::watch::{self, WatchOpts};
use crate::{discovery, metrics, table, typed};

#[derive(Clone)]
pub struct AppState {
    pub reg: Arc<Registry>,
    pub server_address: Arc<str>,
    /// What `/metrics` reports.
    pub requests: metrics::RequestCounter,
}

pub fn router(state: AppState) -> Router {
    let requests = state.requests.clone();
    Router::new()
        .route(
            "/metrics",
            axum::routing::get(|State(app): State<AppState>| async move { app.requests.render() }),
        )
        .fallback(handle)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            requests,
            metrics::count_requests,
        ))
        .layer(axum::middleware::map_response(with_priority_and_fairness))
}

/// The FlowSchema and PriorityLevel a real server's API Priority and Fairness classified the
/// request into (on by default since v1.20; every response carries them, and clients such as
/// controller-runtime and Flux read them to turn their own client-side limit off).
pub const HEADER_PF_FLOW_SCHEMA_UID: &str = "x-kubernetes-pf-flowschema-uid";
/// See [`HEADER_PF_FLOW_SCHEMA_UID`].
pub const HEADER_PF_PRIORITY_LEVEL_UID: &str = "x-kubernetes-pf-prioritylevel-uid";

async fn with_priority_and_fairness(mut response: Response) -> Response {
    let headers = response.headers_mut();
    // The UIDs of the suggested "global-default" FlowSchema and PriorityLevelConfiguration, fixed.
    headers.insert(
        HEADER_PF_FLOW_SCHEMA_UID,
        header::HeaderValue::from_static("9e1d2cbc-8f8a-4b1f-9c3b-4e5f6a7b8c9d"),
    );
    headers.insert(
        HEADER_PF_PRIORITY_LEVEL_UID,
        header::HeaderValue::from_static("0f6d3e2a-1b4c-4d5e-8f9a-0b1c2d3e4f5a"),
    );
    response
}

fn json_response(code: u16, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => Response::builder()
            .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(bytes))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// A write's response, with unknown-field warnings in `Warning` headers as the real server sends.
fn written_response(code: u16, w: &Written) -> Response {
    let mut r = json_response(code, &w.object);
    for msg in &w.warnings {
        if let Ok(v) = header::HeaderValue::from_str(&format!("299 - {:?}", msg)) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.to_status())
}

/// The query parameters, decoded as Go's `url.ParseQuery` does (`+` is a space, `%XX` a byte).
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Query(
            form_urlencoded::parse(q.unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        )
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
    fn flag(&self, k: &str) -> Result<Option<bool>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some("true" | "1" | "True" | "TRUE") => Ok(Some(true)),
            Some("false" | "0" | "False" | "FALSE" | "") => Ok(Some(false)),
            Some(v) => Err(ApiError::bad_request(format!(
                "strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))),
        }
    }
    fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        self.get(k)
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("strconv.ParseInt: parsing {v:?}: invalid syntax"))
                })
            })
            .transpose()
    }
    fn field_validation(&self) -> Result<FieldValidation, ApiError> {
        match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(v) => Err(ApiError::invalid(
                "meta.k8s.io",
                "CreateOptions",
                "",
                vec![crate::errors::Cause::not_supported(
                    "fieldValidation",
                    &json!(v),
                    &["Ignore", "Strict", "Warn"],
                )],
            )),
        }
    }
    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(v) => Err(ApiError::invalid(
                "meta.k8s.io",
                "CreateOptions",
                "",
                vec![crate::errors::Cause::not_supported(
                    "dryRun",
                    &json!([v]),
                    &["All"],
                )],
            )),
        }
    }
}

/// The Table content type kubectl asks for (`application/json;as=Table;v=v1;g=meta.k8s.io`).
fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|m| m.contains("as=Table") && m.contains("g=meta.k8s.io"))
}

/// Serializes a stored object as a list item: the real server leaves `kind`/`apiVersion` off
/// the items of typed lists.
struct Item<'a>(&'a Value);

impl Serialize for Item<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(m) => {
                let mut map = s.serialize_map(None)?;
                for (k, v) in m {
                    if k != "kind" && k != "apiVersion" {
                        map.serialize_entry(k, v)?;
                    }
                }
                map.end()
            }
            other => other.serialize(s),
        }
    }
}

#[derive(Serialize)]
struct ListBody<'a> {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: Value,
    items: Vec<Item<'a>>,
}

/// A parsed resource path.
struct Target {
    def: &'static ResourceDef,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    watch_path: bool,
}

fn parse_target(group: &str, version: &str, segs: &[&str]) -> Result<Target, ApiError> {
    let (watch_path, segs) = match segs.first() {
        Some(&"watch") => (true, &segs[1..]),
        _ => (false, segs),
    };
    let nf = ApiError::path_not_found;
    let find = |r: &str| resources::find(group, version, r).ok_or_else(nf);
    let t = match segs {
        [res] => Target {
            def: find(res)?,
            ns: None,
            name: None,
            sub: None,
            watch_path,
        },
        ["namespaces", ns, res] if resources::find(group, version, res).is_some_and(|d| d.namespaced) => {
            Target {
                def: find(res)?,
                ns: Some((*ns).to_string()),
                name: None,
                sub: None,
                watch_path,
            }
        }
        [res, name] => Target {
            def: find(res)?,
            ns: None,
            name: Some((*name).to_string()),
            sub: None,
            watch_path,
        },
        [res, name, sub] if !(*res == "namespaces" && resources::find(group, version, sub).is_some()) => {
            Target {
                def: find(res)?,
                ns: None,
                name: Some((*name).to_string()),
                sub: Some((*sub).to_string()),
                watch_path,
            }
        }
        ["namespaces", ns, res, name] => Target {
            def: find(res)?,
            ns: Some((*ns).to_string()),
            name: Some((*name).to_string()),
            sub: None,
            watch_path,
        },
        ["namespaces", ns, res, name, sub] => Target {
            def: find(res)?,
            ns: Some((*ns).to_string()),
            name: Some((*name).to_string()),
            sub: Some((*sub).to_string()),
            watch_path,
        },
        _ => return Err(nf()),
    };
    // A namespaced resource under no namespace is a cluster-wide list/watch only; a
    // cluster-scoped resource never sits under /namespaces/<ns>/.
    if t.def.namespaced && t.ns.is_none() && t.name.is_some() {
        return Err(nf());
    }
    if !t.def.namespaced && t.ns.is_some() {
        return Err(nf());
    }
    if let Some(sub) = &t.sub
        && !(sub == "status" && t.def.has_status)
    {
        return Err(nf());
    }
    Ok(t)
}

async fn handle(
    State(app): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/');
    let q = Query::parse(uri.query());
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let is_get = method == Method::GET;
    match segs.as_slice() {
        ["version"] if is_get => return json_response(200, &discovery::version()),
        ["healthz" | "readyz" | "livez"] if is_get => {
            return Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(Body::from("ok"))
                .unwrap_or_else(|_| StatusCode::OK.into_response());
        }
        ["api"] if is_get => return json_response(200, &discovery::api_versions(&app.server_address)),
        ["api", "v1"] if is_get => {
            return json_response(200, &discovery::resource_list("", "v1").unwrap_or(Value::Null));
        }
        ["apis"] if is_get => return json_response(200, &discovery::api_group_list()),
        ["apis", g] if is_get => {
            return match discovery::api_group(g) {
                Some(d) => json_response(200, &d),
                None => error_response(&ApiError::path_not_found()),
            };
        }
        ["apis", g, v] if is_get => {
            return match discovery::resource_list(g, v) {
                Some(d) => json_response(200, &d),
                None => error_response(&ApiError::path_not_found()),
            };
        }
        ["openapi", "v3"] if is_get => return json_response(200, &discovery::openapi_v3_index()),
        ["openapi", "v3", "api", v] if is_get => {
            return match discovery::openapi_v3_gv("", v) {
                Some(d) => json_response(200, &d),
                None => error_response(&ApiError::path_not_found()),
            };
        }
        ["openapi", "v3", "apis", g, v] if is_get => {
            return match discovery::openapi_v3_gv(g, v) {
                Some(d) => json_response(200, &d),
                None => error_response(&ApiError::path_not_found()),
            };
        }
        _ => {}
    }
    let target = match segs.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => parse_target("", "v1", rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => parse_target(g, v, rest),
        _ => Err(ApiError::path_not_found()),
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    match serve(&app, &method, &headers, &q, &target, body).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn selection(def: &ResourceDef, q: &Query) -> Result<Selection, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let fields = convert_field_selector(def, fields).map_err(ApiError::bad_request)?;
    Ok(Selection { labels, fields })
}

fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let base = ct.split(';').next().unwrap_or("").trim();
    match base {
        "application/json" | "" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))),
        "application/yaml" => serde_saphyr::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("error converting YAML to JSON: {}", e.without_snippet()))
        }),
        _ => Err(ApiError::unsupported_media_type(&[
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
        ])),
    }
}

async fn serve(
    app: &AppState,
    method: &Method,
    headers: &HeaderMap,
    q: &Query,
    t: &Target,
    body: Bytes,
) -> Result<Response, ApiError> {
    let reg = &app.reg;
    let def = t.def;
    let ns = t.ns.as_deref();
    let status = t.sub.as_deref() == Some("status");
    let as_table = wants_table(headers);
    let include_object = q.get("includeObject") == Some("Object");
    match (method, &t.name) {
        (&Method::GET, None) => {
            let sel = selection(def, q)?;
            let watching = t.watch_path || q.flag("watch")?.unwrap_or(false);
            if watching {
                let timeout = q
                    .int("timeoutSeconds")?
                    .filter(|t| *t > 0)
                    .map_or(Duration::from_secs(1800), |t| Duration::from_secs(t as u64));
                let opts = WatchOpts {
                    sel,
                    rv: q.get("resourceVersion").map(str::to_string),
                    bookmarks: q.flag("allowWatchBookmarks")?.unwrap_or(false),
                    send_initial_events: q.flag("sendInitialEvents")?,
                    timeout,
                    as_table,
                };
                watch::validate(&opts, q.get("resourceVersionMatch"), q.get("continue"))?;
                let rx = watch::start(reg.clone(), def, t.ns.clone(), opts);
                let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
                let body = Body::from_stream(futures::StreamExt::map(
                    stream,
                    Ok::<Bytes, std::convert::Infallible>,
                ));
                return Response::builder()
                    .status(200)
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(header::CACHE_CONTROL, "no-cache, private")
                    .body(body)
                    .map_err(ApiError::internal);
            }
            if q.get("sendInitialEvents").is_some() {
                return Err(ApiError::invalid(
                    "meta.k8s.io",
                    "ListOptions",
                    "",
                    vec![crate::errors::Cause::forbidden(
                        "sendInitialEvents",
                        "sendInitialEvents is forbidden for list",
                    )],
                ));
            }
            let limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
            let opts = ListOpts {
                sel,
                limit,
                cont: q.get("continue").filter(|c| !c.is_empty()).map(str::to_string),
                rv: q.get("resourceVersion").map(str::to_string),
                rv_match: q
                    .get("resourceVersionMatch")
                    .filter(|m| !m.is_empty())
                    .map(str::to_string),
            };
            let page = reg.list(def, ns, &opts).await?;
            let mut meta = serde_json::Map::new();
            meta.insert("resourceVersion".into(), json!(page.rv.to_string()));
            if let Some(c) = &page.cont {
                meta.insert("continue".into(), json!(c));
            }
            if let Some(r) = page.remaining {
                meta.insert("remainingItemCount".into(), json!(r));
            }
            let presented: Vec<std::sync::Arc<Value>> = if def.events_v1 {
                page.items
                    .iter()
                    .map(|v| std::sync::Arc::new(typed::present(def, v)))
                    .collect()
            } else {
                page.items
            };
            if as_table {
                return Ok(json_response(
                    200,
                    &table::to_table(def, &presented, Some(Value::Object(meta)), include_object),
                ));
            }
            let body = ListBody {
                kind: def.list_kind(),
                api_version: def.api_version(),
                metadata: Value::Object(meta),
                items: presented.iter().map(|v| Item(v)).collect(),
            };
            Ok(json_response(200, &body))
        }
        (&Method::GET, Some(name)) => {
            let obj = reg.get(def, ns, name)?;
            if as_table {
                return Ok(json_response(
                    200,
                    &table::to_table(def, &[std::sync::Arc::new(obj)], None, include_object),
                ));
            }
            Ok(json_response(200, &obj))
        }
        (&Method::POST, None) => {
            if t.ns.is_none() && def.namespaced {
                return Err(ApiError::method_not_allowed(def, "create"));
            }
            let obj = parse_body(headers, &body)?;
            let created = reg.create_with(def, ns, obj, q.dry_run()?, q.field_validation()?)?;
            Ok(written_response(201, &created))
        }
        (&Method::PUT, Some(name)) => {
            let obj = parse_body(headers, &body)?;
            let updated = reg.update_with(def, ns, name, obj, status, q.dry_run()?, q.field_validation()?)?;
            Ok(written_response(200, &updated))
        }
        (&Method::PATCH, Some(name)) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let ct = ct.split(';').next().unwrap_or("").trim();
            let ptype = match ct {
                "application/json-patch+json" => PatchType::Json,
                "application/merge-patch+json" => PatchType::Merge,
                "application/strategic-merge-patch+json" => PatchType::Strategic,
                // Server-side apply is refused rather than approximated.
                _ => {
                    return Err(ApiError::unsupported_media_type(&[
                        "application/json-patch+json",
                        "application/merge-patch+json",
                        "application/strategic-merge-patch+json",
                    ]));
                }
            };
            let patched = reg.patch_with(
                def,
                ns,
                name,
                ptype,
                &body,
                status,
                q.dry_run()?,
                q.field_validation()?,
            )?;
            Ok(written_response(200, &patched))
        }
        (&Method::DELETE, Some(name)) if !status => {
            let mut opts = DeleteOpts {
                dry_run: q.dry_run()?,
                ..Default::default()
            };
            if !body.is_empty() {
                let v: Value =
                    serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?;
                if let Some(p) = v.get("preconditions") {
                    opts.uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
                    opts.rv = p
                        .get("resourceVersion")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                }
                if v.get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|d| d.iter().any(|x| x == "All"))
                {
                    opts.dry_run = true;
                }
            }
            let out = reg.delete(def, ns, name, &opts)?;
            Ok(json_response(200, &out))
        }
        (&Method::DELETE, None) => {
            let sel = selection(def, q)?;
            let items = reg.delete_collection(def, ns, &sel, q.dry_run()?).await?;
            let body = ListBody {
                kind: def.list_kind(),
                api_version: def.api_version(),
                metadata: json!({"resourceVersion": reg.db.current_rv().to_string()}),
                items: items.iter().map(Item).collect(),
            };
            Ok(json_response(200, &body))
        }
        _ => {
            let action = match *method {
                Method::POST => "create",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "this method",
            };
            Err(ApiError::method_not_allowed(def, action))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let t = parse_target("", "v1", &["namespaces", "default", "services", "a", "status"])
            .ok()
            .unwrap();
        assert_eq!(
            (t.def.plural, t.ns.as_deref(), t.name.as_deref(), t.sub.as_deref()),
            ("services", Some("default"), Some("a"), Some("status"))
        );
        let t = parse_target("", "v1", &["namespaces", "x"]).ok().unwrap();
        assert_eq!((t.def.plural, t.name.as_deref()), ("namespaces", Some("x")));
        let t = parse_target("", "v1", &["namespaces", "x", "status"])
            .ok()
            .unwrap();
        assert_eq!(t.sub.as_deref(), Some("status"));
        let t = parse_target("", "v1", &["namespaces", "x", "services"])
            .ok()
            .unwrap();
        assert_eq!((t.def.plural, t.ns.as_deref()), ("services", Some("x")));
        assert!(parse_target("", "v1", &["pods"]).is_err());
        assert!(parse_target("", "v1", &["configmaps", "a", "status"]).is_err());
        assert!(parse_target("", "v1", &["namespaces", "d", "nodes", "n"]).is_err());
        assert!(parse_target("", "v1", &["services", "a"]).is_err());
        let t = parse_target("", "v1", &["watch", "nodes"]).ok().unwrap();
        assert!(t.watch_path);
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some("labelSelector=a%3Db%2Cc+in+(x)&watch=1&limit=5"));
        assert_eq!(q.get("labelSelector"), Some("a=b,c in (x)"));
        assert_eq!(q.flag("watch").ok().flatten(), Some(true));
        assert_eq!(q.int("limit").ok().flatten(), Some(5));
        assert!(Query::parse(Some("limit=x")).int("limit").is_err());
    }
}
