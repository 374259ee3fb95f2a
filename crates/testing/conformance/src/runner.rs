//! Runs cases one after the other and says how each went: a panic inside a case is a failure
//! of the gateway (its message says what it got wrong), a [`Skip`] is not.

use std::{fmt, sync::Arc, time::Duration};

use crate::{CloudFixture, Pass, Skip, cases::Case};

/// How one case went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The gateway kept the contract.
    Pass(Pass),
    /// The gateway broke it; the reason says how.
    Fail(String),
    /// The fixture lacks what the case needs.
    Skip(String),
}

/// A case and its verdict.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The case.
    pub case: &'static Case,
    /// How it went.
    pub verdict: Verdict,
    /// How long it took.
    pub elapsed: Duration,
}

impl Outcome {
    /// Whether the case failed.
    pub fn failed(&self) -> bool {
        matches!(self.verdict, Verdict::Fail(_))
    }
}

/// `PASS <case>: <what it checked>`, `FAIL <case>: <what went wrong>`, `SKIP <case>: <why>`,
/// always on one line.
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.case.name;
        match &self.verdict {
            Verdict::Pass(Pass { note: None }) => write!(f, "PASS {name}: {}", self.case.about),
            Verdict::Pass(Pass { note: Some(note) }) => {
                write!(f, "PASS {name}: {} ({})", self.case.about, one_line(note))
            }
            Verdict::Fail(reason) => write!(f, "FAIL {name}: {}", one_line(reason)),
            Verdict::Skip(reason) => write!(f, "SKIP {name}: {}", one_line(reason)),
        }
    }
}

/// `text` on one line: lines joined with "; ", runs of blanks squeezed.
fn one_line(text: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The message of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "the case panicked".to_owned()
    }
}

/// Runs `case` against `fixture` within `timeout`, then lets the fixture undo what the case
/// arranged.
pub async fn run_case(case: &'static Case, fixture: Arc<dyn CloudFixture>, timeout: Duration) -> Outcome {
    let started = tokio::time::Instant::now();
    let task = {
        let fixture = fixture.clone();
        tokio::spawn(async move { case.run(&*fixture).await })
    };
    let abort = task.abort_handle();
    let mut verdict = match tokio::time::timeout(timeout, task).await {
        Ok(Ok(Ok(pass))) => Verdict::Pass(pass),
        Ok(Ok(Err(Skip(reason)))) => Verdict::Skip(reason),
        Ok(Err(e)) if e.is_panic() => Verdict::Fail(panic_message(&*e.into_panic())),
        Ok(Err(e)) => Verdict::Fail(format!("the case was cancelled: {e}")),
        Err(_) => {
            abort.abort();
            Verdict::Fail(format!(
                "no verdict within {timeout:?} (a call that never returns?)"
            ))
        }
    };
    if let Err(e) = fixture.after_case().await {
        verdict = match verdict {
            Verdict::Fail(reason) => Verdict::Fail(format!("{reason}; then {e}")),
            _ => Verdict::Fail(e),
        };
    }
    Outcome {
        case,
        verdict,
        elapsed: started.elapsed(),
    }
}

/// Runs `cases` in order, calling `report` as each one ends.
pub async fn run(
    cases: &[&'static Case],
    fixture: Arc<dyn CloudFixture>,
    timeout: Duration,
    mut report: impl FnMut(&Outcome),
) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(cases.len());
    for case in cases {
        let outcome = run_case(case, fixture.clone(), timeout).await;
        report(&outcome);
        outcomes.push(outcome);
    }
    outcomes
}

/// For in-process suites: a skip fails the test, since a provider's own tests must play every
/// case (declare what the cloud cannot play in `contract_suite!` instead).
pub fn must_pass(case: &str, result: crate::CaseResult) {
    if let Err(Skip(reason)) = result {
        panic!("{case} was skipped: {reason}; an in-process fixture must support every case it runs");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_fit_on_one_line() {
        let text = "assertion `left == right` failed: provider name\n  left: \"a\"\n right: \"b\"";
        assert_eq!(
            one_line(text),
            "assertion `left == right` failed: provider name; left: \"a\"; right: \"b\""
        );
    }
}
