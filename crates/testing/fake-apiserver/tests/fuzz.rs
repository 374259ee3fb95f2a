//! Property tests of what fake-apiserver parses from its clients: label and field selectors,
//! the three patch formats, and whole HTTP requests (paths, query strings, bodies, continue
//! tokens). Each input gets a clear error or the right answer, never a panic.
//!
//! 256 cases per property by default; `PROPTEST_CASES=100000` (what `make fuzz` sets) for the
//! full run.

use std::sync::Arc;

use axum::body::Body;
use fake_apiserver::{
    Config, Registry,
    http::{AppState, router},
    metrics::RequestCounter,
    patch::{json_patch, strategic_merge},
    resources::Store,
    selectors::{FieldSelector, LabelSelector, Op},
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use tower::ServiceExt as _;

/// Text rich in the characters selectors give a meaning to.
fn selector_text() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r"[a-z0-9./_\-!=<>(), \\]{0,40}|in|notin|.{0,20}").expect("regex")
}

/// A valid label name (the part after an optional prefix): 1-63 of [a-z0-9._-], alphanumeric
/// at both ends; never a selector keyword.
fn label_name() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?")
        .expect("regex")
        .prop_filter("keywords are operators", |s| s != "in" && s != "notin")
}

fn label_key() -> impl Strategy<Value = String> {
    (
        proptest::option::of("[a-z]{1,5}(\\.[a-z]{1,5}){0,2}"),
        label_name(),
    )
        .prop_map(|(prefix, name)| match prefix {
            Some(p) => format!("{p}/{name}"),
            None => name,
        })
}

/// A label value: empty, or a label name.
fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), label_name()]
}

#[derive(Debug, Clone)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    Gt(String, i64),
    Lt(String, i64),
}

fn requirement() -> impl Strategy<Value = Req> {
    let values = || proptest::collection::vec(label_name(), 1..4);
    prop_oneof![
        (label_key(), label_value()).prop_map(|(k, v)| Req::Eq(k, v)),
        (label_key(), label_value()).prop_map(|(k, v)| Req::NotEq(k, v)),
        (label_key(), values()).prop_map(|(k, v)| Req::In(k, v)),
        (label_key(), values()).prop_map(|(k, v)| Req::NotIn(k, v)),
        label_key().prop_map(Req::Exists),
        label_key().prop_map(Req::DoesNotExist),
        (label_key(), -1000i64..1000).prop_map(|(k, n)| Req::Gt(k, n)),
        (label_key(), -1000i64..1000).prop_map(|(k, n)| Req::Lt(k, n)),
    ]
}

impl Req {
    /// As kubectl writes it (spaces where the grammar allows them, to exercise the lexer).
    fn render(&self) -> String {
        match self {
            Req::Eq(k, v) => format!("{k}={v}"),
            Req::NotEq(k, v) => format!("{k} != {v}"),
            Req::In(k, vs) => format!("{k} in ({})", vs.join(", ")),
            Req::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
            Req::Exists(k) => k.clone(),
            Req::DoesNotExist(k) => format!("!{k}"),
            Req::Gt(k, n) => format!("{k}>{n}"),
            Req::Lt(k, n) => format!("{k}<{n}"),
        }
    }

    /// What the requirement says of a set of labels (the semantics of labels.Selector).
    fn holds(&self, labels: &Map<String, Value>) -> bool {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        let int = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        match self {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Req::Exists(k) => get(k).is_some(),
            Req::DoesNotExist(k) => get(k).is_none(),
            Req::Gt(k, n) => int(k).is_some_and(|v| v > *n),
            Req::Lt(k, n) => int(k).is_some_and(|v| v < *n),
        }
    }

    fn key(&self) -> &str {
        match self {
            Req::Eq(k, _)
            | Req::NotEq(k, _)
            | Req::In(k, _)
            | Req::NotIn(k, _)
            | Req::Exists(k)
            | Req::DoesNotExist(k)
            | Req::Gt(k, _)
            | Req::Lt(k, _) => k,
        }
    }
}

/// Labels that hit the generated keys often: some of the requirements' keys, with values that
/// are numbers or names.
fn labels_for(reqs: &[Req]) -> impl Strategy<Value = Map<String, Value>> + use<> {
    let keys: Vec<String> = reqs.iter().map(|r| r.key().to_owned()).collect();
    let value = prop_oneof![label_value(), (-1000i64..1000).prop_map(|n| n.to_string())];
    proptest::collection::vec((proptest::sample::select(keys), value), 0..6)
        .prop_map(|pairs| pairs.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

/// JSON values of a few levels, with keys from a small set so that patches meet their targets.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z$/]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(json_key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("spec".to_owned()),
        Just("status".to_owned()),
        Just("metadata".to_owned()),
        Just("conditions".to_owned()),
        Just("ports".to_owned()),
        Just("finalizers".to_owned()),
        Just("type".to_owned()),
        Just("port".to_owned()),
        Just("$patch".to_owned()),
        Just("$retainKeys".to_owned()),
        Just("$setElementOrder/conditions".to_owned()),
        Just("$deleteFromPrimitiveList/finalizers".to_owned()),
        "[a-z]{1,3}",
    ]
}

/// `v` without `$` keys (directives) and with no null inside an array: a patch in which
/// strategic merge has nothing special to do outside the lists it merges (a null inside a
/// replaced list is left to the typed decoding that follows on the real server).
fn plain(v: Value, in_array: bool) -> Value {
    match v {
        Value::Null if in_array => json!(0),
        Value::Array(items) => Value::Array(items.into_iter().map(|i| plain(i, true)).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k, plain(v, in_array)))
                .collect(),
        ),
        other => other,
    }
}

fn store() -> impl Strategy<Value = Store> {
    proptest::sample::select(Store::ALL.to_vec())
}

/// The server the requests go to, one for all the cases (what one creates, the next may
/// patch), on a runtime whose time is paused: no socket is involved, so a request that waits
/// (a resourceVersion the server has not reached) waits no real time.
struct Server {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
}

static SERVER: std::sync::LazyLock<std::sync::Mutex<Server>> = std::sync::LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    let app = runtime.block_on(async {
        let reg = Arc::new(Registry::new(Arc::new(Config::default())));
        router(AppState {
            reg,
            server_address: Arc::from("127.0.0.1:6443"),
            requests: RequestCounter::default(),
        })
    });
    std::sync::Mutex::new(Server { runtime, app })
});

/// Paths the server serves, and near misses.
fn path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("api".to_owned()),
        Just("apis".to_owned()),
        Just("v1".to_owned()),
        Just("namespaces".to_owned()),
        Just("default".to_owned()),
        Just("nodes".to_owned()),
        Just("services".to_owned()),
        Just("status".to_owned()),
        Just("watch".to_owned()),
        Just("coordination.k8s.io".to_owned()),
        Just("events.k8s.io".to_owned()),
        Just("leases".to_owned()),
        Just("events".to_owned()),
        Just("configmaps".to_owned()),
        Just("secrets".to_owned()),
        "[a-z0-9.%-]{0,8}",
    ];
    proptest::collection::vec(segment, 0..7).prop_map(|s| format!("/{}", s.join("/")))
}

fn query() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("labelSelector"),
        Just("fieldSelector"),
        Just("limit"),
        Just("continue"),
        Just("resourceVersion"),
        Just("resourceVersionMatch"),
        Just("watch"),
        Just("timeoutSeconds"),
        Just("allowWatchBookmarks"),
        Just("sendInitialEvents"),
        Just("dryRun"),
        Just("fieldValidation"),
        Just("fieldManager"),
        Just("propagationPolicy"),
        Just("x"),
    ];
    let value = prop_oneof![
        "[a-zA-Z0-9=,!()%+ .-]{0,16}",
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("true".to_owned()),
        Just("-1".to_owned()),
        Just("99999999999999999999".to_owned()),
        Just("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwibnMiOiIiLCJuYW1lIjoiIn0".to_owned()),
    ];
    proptest::collection::vec((name, value), 0..5).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={}", v.replace(' ', "+")))
            .collect::<Vec<_>>()
            .join("&")
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        Just(br#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"a":"b"}}}"#.to_vec()),
        Just(br#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"type":"LoadBalancer","ports":[{"port":80}]}}"#.to_vec()),
        Just(br#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#.to_vec()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

fn content_type() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("application/json"),
        Just("application/yaml"),
        Just("application/merge-patch+json"),
        Just("application/strategic-merge-patch+json"),
        Just("application/json-patch+json"),
        Just("application/apply-patch+yaml"),
        Just("text/plain"),
    ]
}

proptest! {
    #[test]
    fn fuzz_label_selector_text_parses_or_says_why(text in selector_text()) {
        let _ = LabelSelector::parse(&text);
    }

    #[test]
    fn fuzz_label_selector_means_what_it_says(
        (reqs, labels) in proptest::collection::vec(requirement(), 1..5)
            .prop_flat_map(|reqs| { let labels = labels_for(&reqs); (Just(reqs), labels) })
    ) {
        let text = reqs.iter().map(Req::render).collect::<Vec<_>>().join(",");
        let parsed = LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(parsed.requirements.len(), reqs.len(), "{}", text);
        for (got, want) in parsed.requirements.iter().zip(&reqs) {
            prop_assert_eq!(got.key.as_str(), want.key());
            let op_matches = matches!(
                (&got.op, want),
                (Op::Equals, Req::Eq(..))
                    | (Op::NotEquals, Req::NotEq(..))
                    | (Op::In, Req::In(..))
                    | (Op::NotIn, Req::NotIn(..))
                    | (Op::Exists, Req::Exists(_))
                    | (Op::DoesNotExist, Req::DoesNotExist(_))
                    | (Op::GreaterThan, Req::Gt(..))
                    | (Op::LessThan, Req::Lt(..))
            );
            prop_assert!(op_matches, "{:?} for {:?}", got.op, want);
        }
        let want = reqs.iter().all(|r| r.holds(&labels));
        prop_assert_eq!(parsed.matches(Some(&labels)), want, "{} on {:?}", text, labels);
    }

    #[test]
    fn fuzz_field_selector_text_parses_or_says_why(text in selector_text()) {
        let _ = FieldSelector::parse(&text);
    }

    #[test]
    fn fuzz_field_selector_escapes_round_trip(
        terms in proptest::collection::vec(("[a-z.]{1,12}", "[a-z0-9=,\\\\ !-]{0,10}", any::<bool>()), 1..4)
    ) {
        let escape = |s: &str| s.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=");
        let text = terms
            .iter()
            .map(|(f, v, negated)| format!("{}{}{}", escape(f), if *negated { "!=" } else { "=" }, escape(v)))
            .collect::<Vec<_>>()
            .join(",");
        let parsed = FieldSelector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let got: Vec<(String, String, bool)> =
            parsed.terms.into_iter().map(|t| (t.field, t.value, t.negated)).collect();
        prop_assert_eq!(got, terms, "{}", text);
    }

    #[test]
    fn fuzz_strategic_merge_patch_answers_or_says_why(
        store in store(), original in json_value(), patch in json_value()
    ) {
        if let Err(e) = strategic_merge(store, &original, &patch) {
            prop_assert!(matches!(e.code, 400 | 422 | 500), "{:?}", e);
        }
    }

    #[test]
    fn fuzz_strategic_merge_of_a_plain_patch_is_a_merge_patch(
        original in json_value(), patch in json_value()
    ) {
        // Config maps declare no list merge keys: with no directive, strategic merge is RFC 7386.
        // (metadata.finalizers and ownerReferences merge by key in every kind: left out.)
        let original = json!({"a": original, "b": {"c": 1}});
        let mut patch = json!({"a": plain(patch, false), "b": {"c": null}});
        if let Some(a) = patch.get_mut("a").and_then(Value::as_object_mut) {
            a.remove("metadata");
        }
        let got = strategic_merge(Store::ConfigMaps, &original, &patch)
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let mut want = original.clone();
        json_patch::merge(&mut want, &patch);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn fuzz_json_patch_applies_or_says_why(
        doc in json_value(),
        ops in proptest::collection::vec(
            (
                prop_oneof![Just("add"), Just("remove"), Just("replace"), Just("move"), Just("copy"), Just("test"), Just("nope")],
                "(/[a-z0-9~]{0,3}){0,3}|-",
                json_value(),
            ),
            0..4,
        ),
        raw in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let patch: Vec<Value> = ops
            .iter()
            .map(|(op, path, value)| json!({"op": op, "path": path, "from": path, "value": value}))
            .collect();
        let mut d = doc.clone();
        if let Err(e) = json_patch(&mut d, &serde_json::to_vec(&patch).unwrap_or_default()) {
            prop_assert!(matches!(e.code, 400 | 422), "{:?}", e);
        }
        let mut d = doc;
        if let Err(e) = json_patch(&mut d, &raw) {
            prop_assert!(matches!(e.code, 400 | 422), "{:?}", e);
        }
    }
}

proptest! {
    #[test]
    fn fuzz_any_request_gets_an_answer(
        method in prop_oneof![Just("GET"), Just("POST"), Just("PUT"), Just("PATCH"), Just("DELETE")],
        path in path(),
        query in query(),
        content_type in content_type(),
        body in body(),
    ) {
        let server = SERVER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let uri = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
        let Ok(request) = http::Request::builder()
            .method(method)
            .uri(&uri)
            .header("content-type", content_type)
            .body(Body::from(body))
        else {
            // Not a URI the HTTP layer would hand the server.
            return Ok(());
        };
        let app = server.app.clone();
        let answer = server.runtime.block_on(async {
            let response = app.oneshot(request).await?;
            let status = response.status().as_u16();
            // A watch streams until dropped: its status line is the answer.
            if status == 200 && uri.contains("watch") {
                return Ok::<_, std::convert::Infallible>((status, Value::Null));
            }
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 24).await.unwrap_or_default();
            Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
        });
        let (status, body) = answer.map_err(|e| TestCaseError::fail(format!("{e}")))?;
        if status >= 400 {
            // A clear error: a Status object saying what, as the real server answers.
            prop_assert_eq!(&body["kind"], "Status", "{} {}: {} {}", method, uri, status, body);
            prop_assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{} {}: {}", method, uri, body);
            // The real server's only 500 here: a strategic merge patch whose list item lacks
            // its merge key (mergepatch.ErrNoMergeKey is not mapped).
            if status == 500 {
                prop_assert!(
                    content_type == "application/strategic-merge-patch+json"
                        && body["message"].as_str().is_some_and(|m| m.contains("merge key")),
                    "{} {}: {}", method, uri, body
                );
            }
        }
    }
}
