//! Shadow mode: provider writes recorded as "woulds" instead of made.
//!
//! The gateway runs a write call inside [`scope`] when it is in dry-run (`--dry-run`) or the
//! caller asked for it (the `cloudgateway-dry-run: true` request header). A provider calls
//! [`intercept`] right before each write it would make to the cloud: outside a scope the
//! answer is `true` (make the write); inside one the write is recorded and the answer is
//! `false` (skip it, and answer as if it had succeeded, or stop where later steps need the
//! write's result). Reads are made as usual, so what is recorded is exactly what the real call
//! would change, planned from the cloud as it is.
//!
//! The scope is a tokio task-local: it follows the call through every `.await` of the task that
//! runs it (and through futures joined within that task), but **not** into a task started with
//! `tokio::spawn` or `spawn_blocking`. A provider that spawns work that may write wraps that
//! work in [`carry`], which takes the current scope along (the woulds recorded there join the
//! call's, in the order they are recorded). Work started outside the call (a background task
//! the provider runs on its own) is never in a scope and writes for real.

use std::{
    future::Future,
    sync::{Arc, Mutex},
};

/// One write a provider would have made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Would {
    /// The provider (`simulator`, `aws`).
    pub provider: String,
    /// The cloud call, as the provider names it (`CreateLoadBalancer`, `ensure_load_balancer`).
    pub call: String,
    /// What it acts on (a load balancer's name, a route's CIDR, a security group ID).
    pub target: String,
    /// The request it would send, as text (compact and deterministic: the same change gives the
    /// same text, so planned changes can be compared and deduplicated).
    pub request: String,
}

type Recorded = Arc<Mutex<Vec<Would>>>;

tokio::task_local! {
    static SCOPE: Recorded;
}

/// Runs `fut` with writes recorded instead of made (a tokio task-local scope); returns its
/// output and the woulds, in order. Scopes nest: an inner scope's woulds are its own.
pub async fn scope<F: Future>(fut: F) -> (F::Output, Vec<Would>) {
    let recorded: Recorded = Arc::default();
    let output = SCOPE.scope(recorded.clone(), fut).await;
    let woulds = std::mem::take(&mut *lock(&recorded));
    (output, woulds)
}

/// Whether the current task is in a dry-run scope.
pub fn active() -> bool {
    SCOPE.try_with(|_| ()).is_ok()
}

/// A provider calls this right before each write. Outside a scope: returns `true` (make the
/// write). In a scope: records the would and returns `false` (skip the write; the provider
/// answers as if it had succeeded, or stops where later steps need the write's result).
/// `request` is only called in a scope.
pub fn intercept(provider: &str, call: &str, target: &str, request: impl FnOnce() -> String) -> bool {
    SCOPE
        .try_with(|recorded| {
            let would = Would {
                provider: provider.to_owned(),
                call: call.to_owned(),
                target: target.to_owned(),
                request: request(),
            };
            lock(recorded).push(would);
        })
        .is_err()
}

/// `fut` in the dry-run scope of the task that calls `carry` (none if it is in none): for work
/// a provider spawns within a call, which a task-local would not follow by itself.
pub fn carry<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let recorded = SCOPE.try_with(Clone::clone).ok();
    async move {
        match recorded {
            Some(recorded) => SCOPE.scope(recorded, fut).await,
            None => fut.await,
        }
    }
}

fn lock(recorded: &Recorded) -> std::sync::MutexGuard<'_, Vec<Would>> {
    recorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider's write as the contract asks it to be written: intercepted, made otherwise.
    async fn write(made: &Mutex<Vec<String>>, target: &str) -> &'static str {
        tokio::task::yield_now().await;
        if intercept("test", "create", target, || format!("create {target}")) {
            made.lock().unwrap().push(target.to_owned());
            "made"
        } else {
            "would"
        }
    }

    #[tokio::test]
    async fn outside_a_scope_writes_are_made_and_nothing_is_recorded() {
        let made = Mutex::new(Vec::new());
        assert!(!active());
        assert_eq!(write(&made, "a").await, "made");
        assert_eq!(*made.lock().unwrap(), ["a"]);
    }

    #[tokio::test]
    async fn in_a_scope_writes_are_recorded_in_order_and_not_made() {
        let made = Mutex::new(Vec::new());
        let ((first, second, inside), woulds) = scope(async {
            let first = write(&made, "a").await;
            let second = write(&made, "b").await;
            (first, second, active())
        })
        .await;
        assert_eq!((first, second, inside), ("would", "would", true));
        assert!(made.lock().unwrap().is_empty());
        let targets: Vec<_> = woulds.iter().map(|w| w.target.as_str()).collect();
        assert_eq!(targets, ["a", "b"]);
        assert_eq!(
            woulds[0],
            Would {
                provider: "test".into(),
                call: "create".into(),
                target: "a".into(),
                request: "create a".into(),
            }
        );
        // The scope ends with its future.
        assert!(!active());
        assert_eq!(write(&made, "c").await, "made");
    }

    #[tokio::test]
    async fn concurrent_calls_keep_their_own_woulds() {
        let made = Mutex::new(Vec::new());
        let (dry, real) = tokio::join!(scope(write(&made, "dry")), write(&made, "real"));
        assert_eq!(dry.0, "would");
        assert_eq!(dry.1.len(), 1);
        assert_eq!(real, "made");
        assert_eq!(*made.lock().unwrap(), ["real"]);
    }

    #[tokio::test]
    async fn a_spawned_task_is_outside_the_scope_unless_carried() {
        let ((plain, carried), woulds) = scope(async {
            let plain = tokio::spawn(async { active() }).await.unwrap();
            let carried = tokio::spawn(carry(async {
                intercept("test", "delete", "x", || "delete x".into())
            }))
            .await
            .unwrap();
            (plain, carried)
        })
        .await;
        assert!(!plain, "task-locals do not cross tokio::spawn");
        assert!(!carried, "carried: intercepted, not made");
        assert_eq!(woulds.len(), 1);
        assert_eq!(woulds[0].call, "delete");
        // Carried outside any scope: writes are made.
        assert!(
            tokio::spawn(carry(async { intercept("t", "c", "x", String::new) }))
                .await
                .unwrap()
        );
    }
}
