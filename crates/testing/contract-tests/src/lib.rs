//! The `cloudgateway.v1` contract, as a test suite any provider must pass.
//!
//! A provider's test file implements [`CloudFixture`] (how to start a gateway on that provider
//! and how to arrange cloud state: a running, a stopped and a terminated instance...) and calls
//! [`contract_suite!`], which expands to one `#[tokio::test]` per contract case. Every case talks
//! to a gateway over a real TCP socket on 127.0.0.1 with the generated tonic clients, exactly as
//! a controller would.
//!
//! # Layout
//! - [`harness`]: spawn a gateway on 127.0.0.1:0 and connect clients that name their caller.
//! - [`fixture`]: what a provider's test supplies.
//! - [`cases`]: the contract cases.

pub mod cases;
pub mod fixture;
pub mod harness;

pub use fixture::{CloudFixture, TestInstance};
pub use harness::{Clients, RunningGateway};

/// Expands to one `#[tokio::test]` per contract case. `$start` is an async expression that
/// returns a fresh fixture implementing [`CloudFixture`] (each case gets its own).
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
            $crate::cases::retry_after_is_typed(&fixture).await;
        }
    };
    (@common $start:expr) => {
        $crate::contract_suite!(@cases $start;
            capabilities_describe_the_provider,
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
            gateway_validation_rejects_bad_requests,
            garbage_bytes_get_a_status_and_the_gateway_lives_on,
            an_unknown_caller_header_is_served_as_anonymous,
        );
    };
    (@cases $start:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = $start.await;
                $crate::cases::$case(&fixture).await;
            }
        )*
    };
}
