//! Finding the server of a Node that has no providerID yet, by name (OCCM's `getServerByName`),
//! for one Node or for a batch in one Nova list call.
//!
//! Nova's `name` filter is a regular expression run by the database, so the name is anchored and
//! escaped (`^<QuoteMeta(name)>$`). The database may still answer near-matches (MySQL's usual
//! collations compare case-insensitively), so the answer is matched again here.
//!
//! # Not found (OCCM fault F1, #2999)
//! OCCM answers a missing server with a generic error, so a Node whose server was deleted
//! before it got a providerID stays NotReady forever. Here a complete, successful list without
//! the name is a definite [`ByNameMatch::NotFound`] (the lifecycle controller may delete the
//! Node). Only a successful list may be decided on: a failed call, or a list whose pages were
//! not all read, is an error of the caller's, never "not found".
//!
//! # Matching
//! A server whose name equals the Node's name wins. Failing that, a single server whose name
//! equals it ignoring case is taken: kubelet lowercases the hostname it registers with, and
//! OCCM on a MySQL-backed Nova finds that server too. More than one candidate at the same level
//! is ambiguous and reported with their IDs; we never guess.

use provider::ProviderError;

use crate::nova::Server;

/// Go's `regexp.QuoteMeta`: a backslash before each of `\.+*?()|[]{}^$`.
pub fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if matches!(
            c,
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The Nova `name` filter OCCM sends for one Node: `^<quoted name>$`.
pub fn name_filter(name: &str) -> String {
    format!("^{}$", quote_meta(name))
}

/// The outcome for one Node name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByNameMatch<'a> {
    /// Exactly one server has that name.
    Found(&'a Server),
    /// The (complete, successful) list has no server of that name: definitely not found.
    NotFound,
    /// Several servers have that name; their IDs, in list order.
    Ambiguous(Vec<String>),
    /// An empty name names no Node; refused rather than reported "not found".
    InvalidName,
}

impl<'a> ByNameMatch<'a> {
    /// As a provider result: not found becomes [`ProviderError::InstanceNotFound`] (the fix
    /// of F1); ambiguity and an empty name are errors that delete nothing.
    ///
    /// # Errors
    /// Every outcome but [`ByNameMatch::Found`].
    pub fn into_result(self, name: &str) -> Result<&'a Server, ProviderError> {
        match self {
            Self::Found(s) => Ok(s),
            Self::NotFound => Err(ProviderError::InstanceNotFound(format!(
                "no server named {name:?}"
            ))),
            Self::Ambiguous(ids) => Err(ProviderError::Internal(format!(
                "{} servers are named {name:?} ({}); set the Node's providerID or rename them",
                ids.len(),
                ids.join(", ")
            ))),
            Self::InvalidName => Err(ProviderError::InvalidArgument("empty node name".into())),
        }
    }
}

/// Picks the server of `name` from a complete, successful Nova list (see the module docs).
pub fn match_by_name<'a>(name: &str, servers: &'a [Server]) -> ByNameMatch<'a> {
    if name.is_empty() {
        return ByNameMatch::InvalidName;
    }
    let pick = |same: &dyn Fn(&Server) -> bool| -> Option<ByNameMatch<'a>> {
        let found: Vec<&'a Server> = servers.iter().filter(|s| same(s)).collect();
        match found.as_slice() {
            [] => None,
            [one] => Some(ByNameMatch::Found(one)),
            many => Some(ByNameMatch::Ambiguous(
                many.iter().map(|s| s.id.clone()).collect(),
            )),
        }
    };
    let lower = name.to_lowercase();
    pick(&|s| s.name == name)
        .or_else(|| pick(&|s| s.name.to_lowercase() == lower))
        .unwrap_or(ByNameMatch::NotFound)
}

/// A safe default for [`batch_name_filters`], in bytes of the URL-encoded filter: API front ends
/// commonly refuse request lines over 8 KiB (eventlet, Apache, nginx), and the rest of the line
/// (method, path, version) stays well under 2 KiB. About 200 names of 27 characters, so a
/// gateway batch of 100 Nodes is one Nova list.
pub const DEFAULT_MAX_NAME_FILTER_LEN: usize = 6144;

/// Bytes of `s` once percent-encoded in a query (unreserved characters stay as they are; every
/// other byte counts 3, the most it takes).
pub fn encoded_len(s: &str) -> usize {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                1
            } else {
                3
            }
        })
        .sum()
}

/// One Nova list call for several Nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameBatch {
    /// The `name` filter: `^(a|b|c)$` with each name quoted (`^a$` for a single name, as OCCM).
    pub filter: String,
    /// The names it covers, in request order.
    pub names: Vec<String>,
}

/// Groups Node names into as few `name` filters as fit in `max_filter_len` bytes each, counted
/// URL-encoded ([`encoded_len`]). Empty and repeated names are left out (an empty name is
/// [`ByNameMatch::InvalidName`]); a name too long for the limit on its own still gets a filter of
/// its own.
pub fn batch_name_filters<S: AsRef<str>>(names: &[S], max_filter_len: usize) -> Vec<NameBatch> {
    fn finish(quoted: &[String], names: Vec<String>) -> NameBatch {
        let filter = match quoted {
            [one] => format!("^{one}$"),
            many => format!("^({})$", many.join("|")),
        };
        NameBatch { filter, names }
    }
    let mut batches = Vec::new();
    let (mut quoted, mut members, mut len) = (Vec::<String>::new(), Vec::<String>::new(), 0usize);
    let mut seen = std::collections::BTreeSet::new();
    for name in names.iter().map(AsRef::as_ref) {
        if name.is_empty() || !seen.insert(name) {
            continue;
        }
        let q = quote_meta(name);
        // "^(" + ")$" around, "|" between: 3 bytes each once encoded.
        let added = encoded_len(&q) + 3 * usize::from(!quoted.is_empty());
        if !quoted.is_empty() && len + added + 12 > max_filter_len {
            batches.push(finish(&quoted, std::mem::take(&mut members)));
            quoted.clear();
            len = 0;
        }
        len += encoded_len(&q) + 3 * usize::from(!quoted.is_empty());
        quoted.push(q);
        members.push(name.to_owned());
    }
    if !quoted.is_empty() {
        batches.push(finish(&quoted, members));
    }
    batches
}

/// Splits one complete, successful list (all pages of all the batch's calls) per Node name, in
/// request order, with the same rules as [`match_by_name`].
pub fn match_batch_by_name<'n, 'a, S: AsRef<str>>(
    names: &'n [S],
    servers: &'a [Server],
) -> Vec<(&'n str, ByNameMatch<'a>)> {
    names
        .iter()
        .map(|n| (n.as_ref(), match_by_name(n.as_ref(), servers)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn srv(id: &str, name: &str) -> Server {
        Server {
            id: id.into(),
            name: name.into(),
            ..Server::default()
        }
    }

    #[test]
    fn quote_meta_table() {
        for (input, want) in [
            ("", ""),
            ("web-1", "web-1"),
            ("node.example.com", r"node\.example\.com"),
            (r"a\b", r"a\\b"),
            ("a+b*c?d", r"a\+b\*c\?d"),
            ("(x|y)", r"\(x\|y\)"),
            ("[a]{2}", r"\[a\]\{2\}"),
            ("^x$", r"\^x\$"),
            ("héllo wörld", "héllo wörld"),
            ("#&~-%", "#&~-%"),
        ] {
            assert_eq!(quote_meta(input), want, "{input:?}");
        }
        assert_eq!(name_filter("k8s.node-1"), r"^k8s\.node-1$");
    }

    #[test]
    fn single_name_decisions() {
        let list = [
            srv("1", "web"),
            srv("2", "web-1"),
            srv("3", "WEB-2"),
            srv("4", "db"),
            srv("5", "db"),
        ];
        assert_eq!(match_by_name("web", &list), ByNameMatch::Found(&list[0]));
        // Only a case-insensitive match: taken, as OCCM on MySQL does.
        assert_eq!(match_by_name("web-2", &list), ByNameMatch::Found(&list[2]));
        assert_eq!(
            match_by_name("db", &list),
            ByNameMatch::Ambiguous(vec!["4".into(), "5".into()])
        );
        assert_eq!(match_by_name("gone", &list), ByNameMatch::NotFound);
        assert_eq!(match_by_name("", &list), ByNameMatch::InvalidName);
        assert_eq!(match_by_name("web", &[]), ByNameMatch::NotFound);
        // Near-matches a regex might let through never count.
        assert_eq!(
            match_by_name("web.1", &[srv("9", "web-1"), srv("8", "webx1")]),
            ByNameMatch::NotFound
        );
    }

    #[test]
    fn exact_beats_case_variants() {
        let list = [srv("1", "Web"), srv("2", "web"), srv("3", "WEB")];
        assert_eq!(match_by_name("web", &list), ByNameMatch::Found(&list[1]));
        let only_variants = [srv("1", "Web"), srv("3", "WEB")];
        assert_eq!(
            match_by_name("web", &only_variants),
            ByNameMatch::Ambiguous(vec!["1".into(), "3".into()])
        );
    }

    #[test]
    fn into_result_maps_to_provider_errors() {
        let list = [srv("1", "a"), srv("2", "b"), srv("3", "b")];
        assert_eq!(match_by_name("a", &list).into_result("a").unwrap().id, "1");
        assert!(matches!(
            match_by_name("z", &list).into_result("z"),
            Err(ProviderError::InstanceNotFound(_))
        ));
        let e = match_by_name("b", &list).into_result("b").unwrap_err();
        assert!(
            matches!(&e, ProviderError::Internal(m) if m.contains("2, 3")),
            "{e}"
        );
        assert!(matches!(
            match_by_name("", &list).into_result(""),
            Err(ProviderError::InvalidArgument(_))
        ));
    }

    #[test]
    fn batch_filters() {
        assert_eq!(
            batch_name_filters(&["a.b", "c", "", "a.b", "d(1)"], DEFAULT_MAX_NAME_FILTER_LEN),
            [NameBatch {
                filter: r"^(a\.b|c|d\(1\))$".into(),
                names: vec!["a.b".into(), "c".into(), "d(1)".into()],
            }]
        );
        // One name: exactly OCCM's filter.
        assert_eq!(batch_name_filters(&["web"], 100)[0].filter, "^web$");
        assert!(batch_name_filters::<&str>(&[], 100).is_empty());
        assert!(batch_name_filters(&[""], 100).is_empty());
        // Split by encoded length: "^(aaaa|bbbb)$" is 23 bytes encoded (^ ( | ) $ take 3).
        let names = ["aaaa", "bbbb", "cccc", "dddddddddddddddddddd"];
        let b = batch_name_filters(&names, 23);
        let filters: Vec<_> = b.iter().map(|b| b.filter.as_str()).collect();
        assert_eq!(filters, [r"^(aaaa|bbbb)$", "^cccc$", "^dddddddddddddddddddd$"]);
        for batch in &b[..2] {
            assert!(encoded_len(&batch.filter) <= 23);
        }
        let covered: Vec<_> = b
            .iter()
            .flat_map(|b| b.names.iter().map(String::as_str))
            .collect();
        assert_eq!(covered, names);
        // The default takes a gateway batch of 100 Nodes named as kubelet names them in one list.
        let hundred: Vec<String> = (0..100)
            .map(|i| format!("k8s-worker-pool-a-{i:03}-x7f2k"))
            .collect();
        assert_eq!(batch_name_filters(&hundred, DEFAULT_MAX_NAME_FILTER_LEN).len(), 1);
    }

    #[test]
    fn batch_filter_matches_exactly_its_names() {
        let names = ["node-1", "node.2", "a+b"];
        let re = regex::Regex::new(&batch_name_filters(&names, 1000)[0].filter).unwrap();
        for n in names {
            assert!(re.is_match(n), "{n}");
        }
        for other in ["node-10", "xnode-1", "node22", "node-1|node.2", "aab", ""] {
            assert!(!re.is_match(other), "{other}");
        }
    }

    #[test]
    fn batch_split_per_node() {
        let list = [
            srv("1", "node-a"),
            srv("2", "node-b"),
            srv("3", "node-b"),
            srv("4", "Node-C"),
            srv("5", "unrelated"),
        ];
        let names = ["node-a", "node-b", "node-c", "node-d", "node-a"];
        let got = match_batch_by_name(&names, &list);
        assert_eq!(
            got,
            [
                ("node-a", ByNameMatch::Found(&list[0])),
                ("node-b", ByNameMatch::Ambiguous(vec!["2".into(), "3".into()])),
                ("node-c", ByNameMatch::Found(&list[3])),
                ("node-d", ByNameMatch::NotFound),
                ("node-a", ByNameMatch::Found(&list[0])),
            ]
        );
    }
}
