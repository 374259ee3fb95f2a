//! `apiserver_request_total{verb,resource,subresource,code}` on `/metrics`, as the real server
//! counts requests, so a benchmark can count what a controller costs the API server.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use axum::{
    extract::{Request, State},
    http::Method,
    middleware::Next,
    response::Response,
};

/// Requests served, by verb, resource, subresource and status code.
#[derive(Clone, Default)]
pub struct RequestCounter(Arc<Mutex<BTreeMap<RequestKey, u64>>>);

/// What a request is counted under.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestKey {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `DELETE`, `DELETECOLLECTION`.
    pub verb: &'static str,
    /// e.g. `nodes`; empty for non-resource paths.
    pub resource: String,
    /// e.g. `status`.
    pub subresource: String,
    /// HTTP status code.
    pub code: u16,
}

impl RequestCounter {
    fn count(&self, key: RequestKey) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key)
            .or_default() += 1;
    }

    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<RequestKey, u64> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Prometheus text, with the real server's metric name and labels.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, resource, subresource and HTTP response code.\n# TYPE apiserver_request_total counter\n",
        );
        for (key, count) in self.snapshot() {
            out.push_str(&format!(
                "apiserver_request_total{{code=\"{}\",resource=\"{}\",subresource=\"{}\",verb=\"{}\"}} {count}\n",
                key.code, key.resource, key.subresource, key.verb
            ));
        }
        out
    }
}

/// Counts every request to a resource path by the verb the real server would name it.
pub async fn count_requests(State(counter): State<RequestCounter>, request: Request, next: Next) -> Response {
    let target = classify(request.method(), request.uri().path(), request.uri().query());
    let response = next.run(request).await;
    if let Some((verb, resource, subresource)) = target {
        counter.count(RequestKey {
            verb,
            resource,
            subresource,
            code: response.status().as_u16(),
        });
    }
    response
}

/// `(verb, resource, subresource)` of a request to `/api/v1/...` or `/apis/<group>/<version>/...`.
fn classify(method: &Method, path: &str, query: Option<&str>) -> Option<(&'static str, String, String)> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let mut rest = match segs.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] if !rest.is_empty() => rest,
        _ => return None,
    };
    let mut watch = query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    if rest.first() == Some(&"watch") {
        watch = true;
        rest = &rest[1..];
    }
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        rest = &rest[2..];
    }
    let (resource, named, subresource) = match rest {
        [resource] => (*resource, false, ""),
        [resource, _name] => (*resource, true, ""),
        [resource, _name, sub, ..] => (*resource, true, *sub),
        [] => return None,
    };
    let verb = match (method.as_str(), named, watch) {
        ("GET", _, true) => "WATCH",
        ("GET", true, false) => "GET",
        ("GET", false, false) => "LIST",
        ("POST", ..) => "POST",
        ("PUT", ..) => "PUT",
        ("PATCH", ..) => "PATCH",
        ("DELETE", true, _) => "DELETE",
        ("DELETE", false, _) => "DELETECOLLECTION",
        _ => "OTHER",
    };
    Some((verb, resource.to_owned(), subresource.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_as_the_real_server_names_them() {
        let cases = [
            ("GET", "/api/v1/nodes", None, Some(("LIST", "nodes", ""))),
            (
                "GET",
                "/api/v1/nodes",
                Some("watch=true&resourceVersion=1"),
                Some(("WATCH", "nodes", "")),
            ),
            ("GET", "/api/v1/watch/nodes", None, Some(("WATCH", "nodes", ""))),
            ("GET", "/api/v1/nodes/n1", None, Some(("GET", "nodes", ""))),
            (
                "PATCH",
                "/api/v1/nodes/n1/status",
                None,
                Some(("PATCH", "nodes", "status")),
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                None,
                Some(("POST", "events", "")),
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
                None,
                Some(("PUT", "leases", "")),
            ),
            (
                "GET",
                "/api/v1/namespaces/default",
                None,
                Some(("GET", "namespaces", "")),
            ),
            (
                "DELETE",
                "/api/v1/nodes",
                None,
                Some(("DELETECOLLECTION", "nodes", "")),
            ),
            ("GET", "/version", None, None),
            ("GET", "/apis/apps/v1", None, None),
        ];
        for (method, path, query, want) in cases {
            let got = classify(&method.parse().unwrap(), path, query);
            let want = want.map(|(v, r, s)| (v, r.to_owned(), s.to_owned()));
            assert_eq!(got, want, "{method} {path}");
        }
    }
}
