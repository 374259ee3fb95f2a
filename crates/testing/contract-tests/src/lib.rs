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

/// The cases an in-process suite does not run: they need a fixture unlike a provider's full
/// one (a gateway that lacks a capability), and the conformance binary's tests run them.
pub const NOT_IN_PROCESS: &[&str] = &["missing_capabilities_answer_unimplemented"];

/// Fails unless `expanded` names every case of [`cases::ALL`] but [`NOT_IN_PROCESS`]: a case
/// added to the suite must be added to [`contract_suite!`] too.
pub fn assert_covers(expanded: &[&str]) {
    let mut want: Vec<&str> = cases::ALL
        .iter()
        .map(|c| c.name)
        .filter(|n| !NOT_IN_PROCESS.contains(n))
        .collect();
    let mut got = expanded.to_vec();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "contract_suite! must expand every case of cases::ALL");
}

/// Expands to one `#[tokio::test]` per contract case. `$start` is an async expression that
/// returns a fresh fixture implementing [`CloudFixture`] (each case gets its own). A case the
/// fixture skips fails: a provider's own tests must play every case.
///
/// A cloud that cannot be made to provision load balancers slowly (moto) declares it with
/// `slow_provisioning: unsupported("why")`: that case is then `#[ignore]`d with the reason, so the
/// test report shows it as not run instead of counting it as passed.
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
    (@common $start:expr) => {
        $crate::contract_suite!(@suite $start;
            capabilities_describe_the_provider,
            every_answer_names_the_provider,
            running_instance_exists_and_is_not_shut_down,
            stopped_instance_exists_and_is_shut_down,
            terminated_instance_does_not_exist,
            unknown_provider_id_does_not_exist,
            metadata_describes_the_instance,
            lookup_by_name_when_provider_id_is_empty,
            batch_lookup_answers_each_node_in_order,
            load_balancer_lifecycle,
            ensure_twice_creates_one_load_balancer,
            update_changes_backends,
            implemented_elsewhere_is_typed,
            provider_invalid_argument_is_typed,
            throttled_is_typed,
            routes_lifecycle,
            routes_lifecycle_as_the_route_controller_sends,
            gateway_validation_rejects_bad_requests,
            garbage_bytes_get_a_status_and_the_gateway_lives_on,
            an_unknown_caller_header_is_served_as_anonymous,
            an_unknown_caller_header_reaches_no_metric,
        );
    };
    (@suite $start:expr; $($case:ident),* $(,)?) => {
        $crate::contract_suite!(@cases $start; $($case),*);

        #[test]
        fn the_suite_expands_every_case() {
            $crate::assert_covers(&[$(stringify!($case),)* "retry_after_is_typed"]);
        }
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
