//! Legacy discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>`,
//! `/apis/<group>/<version>`. Clients asking for aggregated discovery get these with a plain
//! `application/json` content type, which client-go and kubectl treat as "fall back".

use serde_json::{Value, json};

use crate::resources::{GROUPS, STATUS_VERBS, VERBS, in_group_version};

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_doc(group: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

pub fn api_group_list() -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": GROUPS.iter().map(|g| group_doc(g)).collect::<Vec<_>>()
    })
}

pub fn api_group(group: &str) -> Option<Value> {
    GROUPS.contains(&group).then(|| {
        let mut d = group_doc(group);
        d["kind"] = json!("APIGroup");
        d["apiVersion"] = json!("v1");
        d
    })
}

pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in in_group_version(group, version) {
        let mut e = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        resources.push(e);
        if r.has_status {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": STATUS_VERBS,
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of per-group-version documents.
pub fn openapi_v3_index() -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs = vec![(String::new(), "v1")];
    gvs.extend(GROUPS.iter().map(|g| ((*g).to_string(), "v1")));
    for (g, v) in gvs {
        let p = gv_path(&g, v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=FAKE0001")}),
        );
    }
    json!({"paths": paths})
}

/// A per-group-version OpenAPI v3 document with just what kubectl reads from it: which
/// PATCH operations exist per kind and that they take `fieldValidation` (so kubectl leaves
/// validation to the server). Without a request body schema, kubectl computes strategic
/// merge patches from its compiled-in types, as it does for any built-in kind.
pub fn openapi_v3_gv(group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for r in in_group_version(group, version) {
        let base = format!("/{}", gv_path(group, version));
        let item = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": r.kind});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
        ]);
        paths.insert(
            item,
            json!({
                "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get", "responses": {}},
                "put": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "put", "parameters": params, "responses": {}},
                "patch": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "patch", "parameters": params, "responses": {}},
                "delete": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "delete", "responses": {}},
            }),
        );
        let coll = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        paths.insert(
            coll,
            json!({
                "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "list", "responses": {}},
                "post": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "post", "parameters": params, "responses": {}},
            }),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}
