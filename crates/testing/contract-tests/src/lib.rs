//! The `cloudgateway.v1` contract suite, run in-process against our gateway on each provider.
//!
//! The cases live in `cloudgateway-conformance` (re-exported here): they talk to a gateway at
//! an address, so the same cases check our gateway in a provider's tests and any gateway from
//! the `cloudgateway-conformance` binary. A provider's test file implements [`CloudFixture`]
//! (start a gateway on that provider with [`RunningGateway`], arrange cloud state: a running, a
//! stopped and a terminated instance...) and calls [`contract_suite!`], which expands to one
//! `#[tokio::test]` per contract case.
//!
//! # Layout
//! - [`harness`]: spawn our gateway on 127.0.0.1:0; its [`Target`] for the cases.
//! - [`cases`], [`CloudFixture`], [`runner`]: from `cloudgateway-conformance`.

pub mod harness;

pub use cloudgateway_conformance::{
    Capability, CaseResult, Clients, CloudFixture, ExpectedCapabilities, Pass, Skip, Target, TestInstance,
    cases, runner,
};
pub use harness::RunningGateway;

/// The cases a full provider's in-process suite does not run: they need a gateway that lacks a
/// capability (the conformance binary's tests, and `contract_suite!`'s `instances_only`).
pub const NOT_IN_PROCESS: &[&str] = &["missing_capabilities_answer_unimplemented"];

/// Fails unless `expanded` names every case of [`cases::ALL`] but `except`: a case added to the
/// suite must be added to [`contract_suite!`] too.
pub fn assert_covers(expanded: &[&str], except: &[&str]) {
    let mut want: Vec<&str> = cases::ALL
        .iter()
        .map(|c| c.name)
        .filter(|n| !except.contains(n))
        .collect();
    let mut got = expanded.to_vec();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "contract_suite! must expand every case of cases::ALL");
}

/// For in-process suites: `case` must skip, and for a reason that contains `why`.
pub fn must_skip(case: &str, result: CaseResult, why: &str) {
    match result {
        Err(Skip(reason)) => assert!(
            reason.contains(why),
            "{case} skipped for another reason: {reason}"
        ),
        Ok(pass) => panic!("{case} passed ({pass:?}); it must skip: {why}"),
    }
}

/// Expands to one `#[tokio::test]` per contract case. `$start` is an async expression that
/// returns a fresh fixture implementing [`CloudFixture`] (each case gets its own). A case the
/// fixture skips fails: a provider's own tests must play every case.
///
/// A cloud that cannot be made to provision load balancers slowly (moto) declares it with
/// `slow_provisioning: unsupported("why")`: that case is then `#[ignore]`d with the reason, so the
/// test report shows it as not run instead of counting it as passed.
///
/// A cloud that serves instances only (vSphere, as CPI) declares it with `instances_only,
/// throttled: skips(why)`: its fixture expects no load balancers and no routes, so
/// `missing_capabilities_answer_unimplemented` must pass and every load balancer and route case
/// must skip for that reason alone; `throttled_is_typed` must skip for `why` (a cloud with no
/// answer that means "slow down").
#[macro_export]
macro_rules! contract_suite {
    ($start:expr) => {
        $crate::contract_suite!($start, slow_provisioning: supported);
    };
    ($start:expr, slow_provisioning: supported) => {
        $crate::contract_suite!(@common $start);
        $crate::contract_suite!(@cases $start; retry_after_is_typed);
    };
    ($start:expr, slow_provisioning: unsupported($why:literal)) => {
        $crate::contract_suite!(@common $start);
        #[ignore = $why]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn retry_after_is_typed() {
            let fixture = $start.await;
            $crate::runner::must_pass("retry_after_is_typed", $crate::cases::retry_after_is_typed(&fixture).await);
        }
    };
    ($start:expr, instances_only, throttled: skips($why:expr)) => {
        $crate::contract_suite!(@groups instances_only [$start, $why]);
    };
    // The cases by what they need of the cloud: [instances and the gateway alone] [load
    // balancers, but retry_after_is_typed, which each arm expands its own way] [routes]; handed
    // to the arm `@$then` after `$args`.
    (@groups $then:ident [$($args:tt)*]) => {
        $crate::contract_suite!(@$then $($args)*;
            [
                capabilities_describe_the_provider,
                every_answer_names_the_provider,
                running_instance_exists_and_is_not_shut_down,
                stopped_instance_exists_and_is_shut_down,
                terminated_instance_does_not_exist,
                unknown_provider_id_does_not_exist,
                metadata_describes_the_instance,
                lookup_by_name_when_provider_id_is_empty,
                batch_lookup_answers_each_node_in_order,
                gateway_validation_rejects_bad_requests,
                garbage_bytes_get_a_status_and_the_gateway_lives_on,
                an_unknown_caller_header_is_served_as_anonymous,
                an_unknown_caller_header_reaches_no_metric,
            ]
            [
                load_balancer_lifecycle,
                ensure_twice_creates_one_load_balancer,
                update_changes_backends,
                implemented_elsewhere_is_typed,
                provider_invalid_argument_is_typed,
            ]
            [routes_lifecycle, routes_lifecycle_as_the_route_controller_sends]
        );
    };
    (@common $start:expr) => {
        $crate::contract_suite!(@groups every_capability [$start]);
    };
    (@every_capability $start:expr;
        [$($instances:ident),* $(,)?] [$($load_balancers:ident),* $(,)?] [$($routes:ident),* $(,)?]
    ) => {
        $crate::contract_suite!(@cases $start;
            $($instances,)* $($load_balancers,)* throttled_is_typed, $($routes,)*
        );

        #[test]
        fn the_suite_expands_every_case() {
            $crate::assert_covers(
                &[
                    $(stringify!($instances),)*
                    $(stringify!($load_balancers),)*
                    "throttled_is_typed",
                    $(stringify!($routes),)*
                    "retry_after_is_typed",
                ],
                $crate::NOT_IN_PROCESS,
            );
        }
    };
    (@instances_only $start:expr, $why:expr;
        [$($instances:ident),* $(,)?] [$($load_balancers:ident),* $(,)?] [$($routes:ident),* $(,)?]
    ) => {
        // GetLoadBalancer and ListRoutes answer UNIMPLEMENTED: the service and route controllers
        // then stay idle.
        $crate::contract_suite!(@cases $start; $($instances,)* missing_capabilities_answer_unimplemented);
        $crate::contract_suite!(@skips $start, "expects no load_balancers capability";
            $($load_balancers,)* retry_after_is_typed
        );
        $crate::contract_suite!(@skips $start, "expects no routes capability"; $($routes),*);
        $crate::contract_suite!(@skips $start, $why; throttled_is_typed);

        #[test]
        fn the_suite_expands_every_case() {
            $crate::assert_covers(
                &[
                    $(stringify!($instances),)*
                    "missing_capabilities_answer_unimplemented",
                    $(stringify!($load_balancers),)*
                    "retry_after_is_typed",
                    $(stringify!($routes),)*
                    "throttled_is_typed",
                ],
                &[],
            );
        }
    };
    (@skips $start:expr, $why:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = $start.await;
                $crate::must_skip(stringify!($case), $crate::cases::$case(&fixture).await, $why);
            }
        )*
    };
    (@cases $start:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = $start.await;
                $crate::runner::must_pass(stringify!($case), $crate::cases::$case(&fixture).await);
            }
        )*
    };
}
