//! Batched load-balancer reads: many names per Describe call, and one name's absence answered
//! as that name's, not its neighbours'.
//!
//! DescribeLoadBalancers and DescribeTags (Classic ELB by name, ELBv2 by name or ARN) take up to
//! [`MAX_NAMES`] names, but AWS fails the whole call with `LoadBalancerNotFound` when one of them
//! does not exist, and its message does not reliably say which one (ELBv2 never does; moto's
//! Classic ELB names an arbitrary one of the request). So a chunk that fails not-found is split
//! in halves and each half asked again, until the missing names stand alone ([`split`]): one
//! missing among 20 costs 11 calls instead of 20 single ones, and a chunk of found names costs one.
//! A call failing for another reason (throttled, unreachable) fails that chunk's names only.

use std::{collections::HashMap, future::Future};

use provider::ProviderError;

/// Most names per DescribeLoadBalancers or DescribeTags call (Classic ELB and ELBv2 alike).
pub const MAX_NAMES: usize = 20;

/// What one Describe call of a chunk of names answered.
#[derive(Debug)]
pub enum Described<T> {
    /// The call succeeded: what it found, by the name asked. A name asked and not answered
    /// does not exist (moto's ELBv2 leaves some out instead of failing).
    Found(Vec<(String, T)>),
    /// The call failed because at least one name does not exist.
    NotFound,
    /// The call failed for another reason.
    Failed(ProviderError),
}

/// What to ask after a chunk failed not-found: its two halves, or nothing when the chunk is a
/// single name (that one is missing).
pub fn split(chunk: &[String]) -> Option<(Vec<String>, Vec<String>)> {
    if chunk.len() < 2 {
        return None;
    }
    let (a, b) = chunk.split_at(chunk.len() / 2);
    Some((a.to_vec(), b.to_vec()))
}

/// Every name's answer: `Some` found, `None` missing, `Err` its chunk's call failed. `describe`
/// is called with chunks of at most [`MAX_NAMES`] distinct names.
pub async fn describe_by_chunks<T, F, Fut>(
    names: &[String],
    describe: F,
) -> HashMap<String, Result<Option<T>, ProviderError>>
where
    F: Fn(Vec<String>) -> Fut,
    Fut: Future<Output = Described<T>>,
{
    let mut distinct: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        if !distinct.contains(n) {
            distinct.push(n.clone());
        }
    }
    let mut out = HashMap::with_capacity(distinct.len());
    let mut work: Vec<Vec<String>> = distinct.chunks(MAX_NAMES).rev().map(<[String]>::to_vec).collect();
    while let Some(chunk) = work.pop() {
        match describe(chunk.clone()).await {
            Described::Found(found) => {
                let mut found: HashMap<String, T> = found.into_iter().collect();
                for name in chunk {
                    let answer = found.remove(&name);
                    out.insert(name, Ok(answer));
                }
            }
            Described::NotFound => match split(&chunk) {
                Some((a, b)) => {
                    work.push(b);
                    work.push(a);
                }
                None => {
                    out.extend(chunk.into_iter().map(|name| (name, Ok(None))));
                }
            },
            Described::Failed(err) => {
                out.extend(chunk.into_iter().map(|name| (name, Err(err.clone()))));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn names(range: std::ops::Range<u32>) -> Vec<String> {
        range.map(|i| format!("lb{i}")).collect()
    }

    #[test]
    fn a_failed_chunk_splits_in_halves_down_to_single_names() {
        // (chunk size, halves' sizes)
        let cases = [
            (0, None),
            (1, None),
            (2, Some((1, 1))),
            (5, Some((2, 3))),
            (20, Some((10, 10))),
        ];
        for (size, want) in cases {
            let chunk = names(0..size);
            let got = split(&chunk).map(|(a, b)| {
                assert_eq!(
                    [a.clone(), b.clone()].concat(),
                    chunk,
                    "nothing lost or reordered"
                );
                (a.len(), b.len())
            });
            assert_eq!(got, want, "{size}");
        }
    }

    /// A cloud with `exists`, failing a whole call not-found as AWS does, or with `fail_on` in it
    /// throttled; records every call's size.
    async fn run(
        asked: &[String],
        exists: &[String],
        fail_on: Option<&str>,
    ) -> (HashMap<String, Result<Option<String>, ProviderError>>, Vec<usize>) {
        let calls = Mutex::new(Vec::new());
        let out = describe_by_chunks(asked, |chunk| {
            calls.lock().unwrap().push(chunk.len());
            let answer = if fail_on.is_some_and(|f| chunk.iter().any(|n| n == f)) {
                Described::Failed(ProviderError::Throttled {
                    retry_after: None,
                    message: "slow down".into(),
                })
            } else if chunk.iter().all(|n| exists.contains(n)) {
                Described::Found(chunk.iter().map(|n| (n.clone(), format!("{n}.dns"))).collect())
            } else {
                Described::NotFound
            };
            async move { answer }
        })
        .await;
        (out, calls.into_inner().unwrap())
    }

    #[tokio::test]
    async fn one_missing_among_20_is_answered_missing_and_the_19_found() {
        let asked = names(0..20);
        let exists: Vec<String> = asked.iter().filter(|n| *n != "lb13").cloned().collect();
        let (out, calls) = run(&asked, &exists, None).await;
        assert_eq!(out.len(), 20);
        for name in &asked {
            let want = (name != "lb13").then(|| format!("{name}.dns"));
            assert_eq!(out[name].as_ref().unwrap(), &want, "{name}");
        }
        // 20 → 10 + 10 → 5 + 5 → 2 + 3 → 1 + 2 → 1 + 1, depth first: 11 calls.
        assert_eq!(calls, [20, 10, 10, 5, 2, 3, 1, 2, 1, 1, 5]);
    }

    #[tokio::test]
    async fn found_names_cost_one_call_per_20_and_a_failed_call_fails_its_chunk_only() {
        let asked = names(0..45);
        let (out, calls) = run(&asked, &asked, None).await;
        assert_eq!(calls, [20, 20, 5]);
        assert!(out.values().all(|a| matches!(a, Ok(Some(_)))));

        let (out, calls) = run(&asked, &asked, Some("lb25")).await;
        assert_eq!(calls, [20, 20, 5]);
        for (name, answer) in &out {
            let in_failed_chunk = (20..40).any(|i| *name == format!("lb{i}"));
            assert_eq!(
                matches!(answer, Err(ProviderError::Throttled { .. })),
                in_failed_chunk,
                "{name}: {answer:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_name_asked_twice_is_described_once() {
        let asked = vec!["a".to_owned(), "b".to_owned(), "a".to_owned()];
        let (out, calls) = run(&asked, &asked, None).await;
        assert_eq!(calls, [2]);
        assert_eq!(out.len(), 2);
    }
}
