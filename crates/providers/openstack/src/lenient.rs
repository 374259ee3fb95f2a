//! How the API modules ([`crate::nova`], [`crate::neutron`]) read what the cloud answers.
//!
//! Every field of a model is lenient: absent, `null` or of the wrong JSON type, it takes its
//! default instead of failing the whole answer (a cloud with an extension we never saw must not
//! stop node initialization). Only what we cannot do without fails, as a [`ModelError`]: a body
//! that is not JSON, and an object without the `id` a caller needs.
//!
//! A caller that writes a read value back whole (a port's allowed address pairs or security
//! groups) must not lose what leniency would drop: it reads through [`Strict`], which refuses
//! an answer in which any lenient field had to fall back to its default. So each resource has
//! one model, lenient or strict by how it is read.

use std::{cell::Cell, collections::BTreeMap};

use serde::{
    Deserialize,
    de::{DeserializeOwned, Deserializer, Error as _},
};
use serde_json::Value;

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The body is not the JSON document expected (not JSON, or the wrong top-level shape).
    #[error("malformed {what} answer: {message}")]
    Malformed {
        /// Which answer (`server`, `servers`, `ports`, ...).
        what: &'static str,
        /// The parser's complaint.
        message: String,
    },
    /// An object that must carry an `id` has none.
    #[error("{what} without an id in the answer")]
    MissingId {
        /// Which object (`server`, `flavor`, ...).
        what: &'static str,
    },
}

thread_local! {
    /// Values the lenient readers replaced by a default on this thread (deserializing is
    /// synchronous, so a [`Strict`] read sees exactly its own).
    static DROPPED: Cell<u64> = const { Cell::new(0) };
}

fn dropped<T: Default>() -> T {
    DROPPED.set(DROPPED.get() + 1);
    T::default()
}

/// Reads any JSON value into `T`, falling back to `T::default()` when it does not fit.
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_else(|_| dropped()))
}

/// A JSON array read item by item: items that do not fit `T` are dropped, not the whole list.
pub(crate) fn lenient_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|i| serde_json::from_value(i).map_err(|_| dropped::<()>()).ok())
            .collect(),
        _ => dropped(),
    })
}

/// A string map keeping only the string values (Nova metadata is string → string).
pub(crate) fn lenient_string_map<'de, D>(d: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(match Value::deserialize(d)? {
        Value::Object(m) => m
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s)),
                _ => dropped(),
            })
            .collect(),
        _ => dropped(),
    })
}

/// A model read strictly: a value that a lenient field would replace by its default fails the
/// read instead (see the module's doc). Absent fields still take their defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strict<T>(pub T);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Strict<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let before = DROPPED.get();
        let read = serde_json::from_value(value).map_err(D::Error::custom)?;
        if DROPPED.get() != before {
            return Err(D::Error::custom(
                "a field does not have the type expected, and the value is written back whole",
            ));
        }
        Ok(Strict(read))
    }
}

/// A link of a paged list (`servers_links`, `ports_links`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Link {
    /// `next`, `previous`, `self`...
    #[serde(deserialize_with = "lenient")]
    pub rel: String,
    /// The URL.
    #[serde(deserialize_with = "lenient")]
    pub href: String,
}

pub(crate) fn next_href(links: &[Link]) -> Option<&str> {
    links
        .iter()
        .find(|l| l.rel == "next" && !l.href.is_empty())
        .map(|l| l.href.as_str())
}

pub(crate) fn malformed(what: &'static str, e: serde_json::Error) -> ModelError {
    ModelError::Malformed {
        what,
        message: e.to_string(),
    }
}

/// Reads `{"<key>": <object>}`: an absent key or a non-object is malformed.
pub(crate) fn envelope<T: DeserializeOwned>(body: &[u8], key: &'static str) -> Result<T, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| malformed(key, e))?;
    match v {
        Value::Object(mut m) => match m.remove(key) {
            Some(inner @ Value::Object(_)) => serde_json::from_value(inner).map_err(|e| malformed(key, e)),
            _ => Err(ModelError::Malformed {
                what: key,
                message: format!("no `{key}` object"),
            }),
        },
        _ => Err(ModelError::Malformed {
            what: key,
            message: "not a JSON object".into(),
        }),
    }
}

/// Reads a list page, insisting that the list key is present and an array: a page without it
/// must not read as "no servers", which would mean "not found".
pub(crate) fn page<T: DeserializeOwned>(body: &[u8], key: &'static str) -> Result<T, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| malformed(key, e))?;
    if !v.get(key).is_some_and(Value::is_array) {
        return Err(ModelError::Malformed {
            what: key,
            message: format!("no `{key}` array"),
        });
    }
    serde_json::from_value(v).map_err(|e| malformed(key, e))
}

/// Every item of a paged list, each read as `T`; an item that cannot be read fails the list.
pub(crate) async fn list<T: DeserializeOwned>(
    client: &crate::client::Client,
    service: crate::client::Service,
    path: &str,
    query: &[(&str, &str)],
    key: &str,
    max_pages: usize,
) -> provider::Result<Vec<T>> {
    let items: Vec<Value> = client
        .get(service, path)
        .query(query)
        .send_paginated(key, max_pages)
        .await?;
    items
        .into_iter()
        .map(|v| {
            serde_json::from_value(v)
                .map_err(|e| provider::ProviderError::Internal(format!("an item of {path}: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        neutron::ports::PortPage,
        nova::{Flavor, Server, ServerPage},
    };

    #[test]
    fn refusals() {
        assert!(Server::from_get_body(b"not json").is_err());
        assert!(Server::from_get_body(b"[]").is_err());
        assert!(Server::from_get_body(br#"{"servers": []}"#).is_err());
        assert_eq!(
            Server::from_get_body(br#"{"server": {"name": "a"}}"#),
            Err(ModelError::MissingId { what: "server" })
        );
        assert!(
            ServerPage::from_body(br#"{}"#).is_err(),
            "no list is not an empty list"
        );
        assert!(ServerPage::from_body(br#"{"servers": null}"#).is_err());
        assert_eq!(
            ServerPage::from_body(br#"{"servers": [{"id": "a"}, {"name": "b"}]}"#),
            Err(ModelError::MissingId { what: "server" })
        );
        assert!(PortPage::from_body(br#"{"port": {}}"#).is_err());
        assert!(Flavor::from_get_body(br#"{"flavor": {"name": "x"}}"#).is_err());
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Item {
        #[serde(deserialize_with = "lenient")]
        name: String,
        #[serde(deserialize_with = "lenient_vec")]
        pairs: Vec<String>,
    }

    #[test]
    fn strict_refuses_what_lenient_drops_and_keeps_absent_defaults() {
        let read = |v: Value| serde_json::from_value::<Strict<Item>>(v).map(|s| s.0);
        let lenient = |v: Value| serde_json::from_value::<Item>(v).unwrap();
        let cases = [
            (serde_json::json!({}), true),
            (serde_json::json!({"name": "a", "pairs": ["x"]}), true),
            (serde_json::json!({"name": 5}), false),
            (serde_json::json!({"name": null}), false),
            (serde_json::json!({"pairs": ["x", 1]}), false),
            (serde_json::json!({"pairs": {}}), false),
        ];
        for (value, ok) in cases {
            assert_eq!(read(value.clone()).is_ok(), ok, "{value}");
            let _ = lenient(value);
        }
        assert_eq!(lenient(serde_json::json!({"pairs": ["x", 1]})).pairs, ["x"]);
    }
}
