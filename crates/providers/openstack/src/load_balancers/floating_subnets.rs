//! A floating IP's subnet chosen by name pattern and tags (`floating-subnet`,
//! `floating-subnet-tags`, in annotations, `[LoadBalancer]` or a `[LoadBalancerClass]`), as OCCM's
//! `loadbalancer_subnet_match.go` chooses it (reference §3.9): the external network's subnets
//! are listed once with the tag filter pushed to Neutron, the name pattern is matched here, and
//! the floating IP is made on the first matching subnet that has one to give.
//!
//! - A name pattern is a glob (`public-*`, `{a,b}`, `[0-9]`), or a regular expression after `~`
//!   that must match the whole name; a leading `!` negates either.
//! - Tags are comma-separated: any one of them (`a,b`), all of them (`&a,b`); a leading `!`
//!   negates (`!a,b`: none of them, `!&a,b`: not all of them).
//!
//! Where this differs from OCCM: a pattern that does not compile is an error naming it before
//! any write (OCCM fails at the floating IP, after making the load balancer), and the tags are
//! checked on the listed subnets too (a Neutron without tag filters would list them all).

use globset::{GlobBuilder, GlobMatcher};
use regex::Regex;

use crate::{
    client::{ApiError, Client},
    neutron::subnets::{self, Subnet},
};

/// How a subnet's name is matched.
#[derive(Debug, Clone)]
enum Name {
    Glob(GlobMatcher),
    Regex(Regex),
}

impl Name {
    fn matches(&self, name: &str) -> bool {
        match self {
            Self::Glob(g) => g.is_match(name),
            // Go's `FindString(name) == name`: the leftmost match is the whole name.
            Self::Regex(r) => r
                .find(name)
                .is_some_and(|m| m.start() == 0 && m.end() == name.len()),
        }
    }
}

/// A parsed `floating-subnet-tags`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tags {
    list: Vec<String>,
    not: bool,
    all: bool,
}

impl Tags {
    fn parse(text: &str) -> Self {
        let (not, text) = text.strip_prefix('!').map_or((false, text), |t| (true, t));
        let (all, text) = text.strip_prefix('&').map_or((false, text), |t| (true, t));
        Self {
            list: text
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
            not,
            all,
        }
    }

    /// OCCM's `subnetTagMatcher`.
    fn matches(&self, tags: &[String]) -> bool {
        let has = |t: &String| tags.contains(t);
        let matched = if self.all {
            self.list.iter().all(has)
        } else {
            self.list.iter().any(has)
        };
        matched != self.not
    }

    /// Neutron's list filter for them: `not-tags` leaves out what has all of them, `not-tags-any`
    /// what has any of them. (OCCM's `tweakListOpts` swaps the two negated ones, so Neutron
    /// leaves out subnets `!&a,b` matches; here the filter only narrows, [`Tags::matches`]
    /// decides.)
    fn filter(&self) -> (&'static str, String) {
        let key = match (self.all, self.not) {
            (true, false) => "tags",
            (true, true) => "not-tags",
            (false, false) => "tags-any",
            (false, true) => "not-tags-any",
        };
        (key, self.list.join(","))
    }
}

/// Which subnets of the external network a floating IP may come from.
#[derive(Debug, Clone)]
pub struct SubnetMatch {
    name: Option<(Name, bool)>,
    tags: Option<Tags>,
    /// As written, for messages.
    text: String,
}

impl SubnetMatch {
    /// Parses a name pattern and a tag spec (either may be absent).
    ///
    /// # Errors
    /// A glob or regular expression that does not compile, naming it.
    pub fn parse(name: Option<&str>, tags: Option<&str>) -> Result<Self, String> {
        let text = [
            name.map(|n| format!("name {n:?}")),
            tags.map(|t| format!("tags {t:?}")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        let name = match name.filter(|n| !n.is_empty()) {
            None => None,
            Some(pattern) => {
                let (negate, pattern) = pattern.strip_prefix('!').map_or((false, pattern), |p| (true, p));
                let matcher = if let Some(re) = pattern.strip_prefix('~') {
                    Name::Regex(Regex::new(re).map_err(|e| format!("floating subnet pattern ~{re}: {e}"))?)
                } else {
                    Name::Glob(
                        GlobBuilder::new(pattern)
                            .literal_separator(true)
                            .build()
                            .map_err(|e| format!("floating subnet glob {pattern:?}: {e}"))?
                            .compile_matcher(),
                    )
                };
                Some((matcher, negate))
            }
        };
        Ok(Self {
            name,
            tags: tags.filter(|t| !t.is_empty()).map(Tags::parse),
            text,
        })
    }

    /// Whether a subnet named `name` and tagged `tags` matches.
    pub fn matches(&self, name: &str, tags: &[String]) -> bool {
        self.name
            .as_ref()
            .is_none_or(|(m, negate)| m.matches(name) != *negate)
            && self.tags.as_ref().is_none_or(|t| t.matches(tags))
    }
}

impl std::fmt::Display for SubnetMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The subnets of `network_id` that `spec` matches, in Neutron's order (one call: the tags
/// narrow Neutron's listing, [`SubnetMatch::matches`] decides).
pub async fn matching(
    client: &Client,
    network_id: &str,
    spec: &SubnetMatch,
) -> Result<Vec<Subnet>, ApiError> {
    let subnets = subnets::of_network(client, network_id, spec.tags.as_ref().map(Tags::filter)).await?;
    Ok(subnets
        .into_iter()
        .filter(|s| spec.matches(&s.name, &s.tags))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| (*s).to_owned()).collect()
    }

    fn matches(name: Option<&str>, tag_spec: Option<&str>) -> bool {
        SubnetMatch::parse(name, tag_spec)
            .unwrap()
            .matches("test-123", &tags(&["alice", "bob"]))
    }

    /// OCCM's TestMatchSubnet: runName/runNameNeg/runTag on subnet "test-123" tagged alice, bob.
    #[test]
    fn subnets_match_as_occm_matches_them() {
        // runName for glob, regexp and name+tags: the pattern, its negation, other patterns.
        for (pattern, tag_spec) in [("test-*", None), ("~test-.*", None), ("test-*", Some("alice"))] {
            assert!(matches(Some(pattern), tag_spec), "{pattern}");
            assert!(!matches(Some(&format!("!{pattern}")), tag_spec), "!{pattern}");
            for other in ["other*", "~other.*"] {
                assert!(!matches(Some(other), tag_spec), "{other}");
                assert!(matches(Some(&format!("!{other}")), tag_spec), "!{other}");
            }
            for any in ["*", "~.*"] {
                assert!(matches(Some(any), tag_spec), "{any}");
                assert!(!matches(Some(&format!("!{any}")), tag_spec), "!{any}");
            }
        }
        // runTag: the tags, negated, another tag, negated.
        assert!(matches(None, Some("alice")));
        assert!(!matches(None, Some("!alice")));
        assert!(!matches(None, Some("other")));
        assert!(matches(None, Some("!other")));
        assert!(matches(Some("test-*"), Some("alice")));
        // Any one of them, all of them.
        assert!(matches(None, Some("alice,bob")));
        assert!(matches(None, Some("alice,peter")));
        assert!(!matches(None, Some("!alice,bob")));
        assert!(!matches(None, Some("!alice,peter")));
        assert!(matches(None, Some("&alice,bob")));
        assert!(!matches(None, Some("&alice,peter")));
        assert!(!matches(None, Some("!&alice,bob")));
        assert!(matches(None, Some("!&alice,peter")));
    }

    #[test]
    fn a_regexp_matches_the_whole_name_and_globs_have_their_forms() {
        assert!(!matches(Some("~test"), None), "a prefix is not the name");
        assert!(matches(Some("~t.st-\\d+"), None));
        assert!(matches(Some("test-{123,456}"), None));
        assert!(matches(Some("test-[0-9]??"), None));
        assert!(!matches(Some("test"), None));
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_named() {
        let e = SubnetMatch::parse(Some("~("), None).unwrap_err();
        assert!(e.contains("~("), "{e}");
        let e = SubnetMatch::parse(Some("pub-[a"), None).unwrap_err();
        assert!(e.contains("pub-[a"), "{e}");
    }

    #[test]
    fn tags_go_to_neutron_as_its_filters() {
        let f = |t: &str| Tags::parse(t).filter();
        assert_eq!(f("a, b"), ("tags-any", "a,b".to_owned()));
        assert_eq!(f("&a,b"), ("tags", "a,b".to_owned()));
        // "None of them": leave out what has any; "not all of them": what has all.
        assert_eq!(f("!a,b"), ("not-tags-any", "a,b".to_owned()));
        assert_eq!(f("!&a,b"), ("not-tags", "a,b".to_owned()));
    }
}
