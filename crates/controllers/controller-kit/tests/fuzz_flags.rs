//! Property test of the flags every controller takes: the Kubernetes client's, the gateway
//! client's and leader election's. Any command line gets a clear error or a configuration the
//! controller can run with (it does arithmetic on every duration it accepts), never a panic.
//!
//! 256 cases by default; `PROPTEST_CASES=100000` (what `make fuzz` sets) for the full run.

use std::time::{Duration, Instant};

use clap::Parser;
use controller_kit::{gateway::GatewayClient, runner::CommonArgs};
use proptest::prelude::*;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("2.5".to_owned()),
        Just("NaN".to_owned()),
        Just("-0".to_owned()),
        Just("inf".to_owned()),
        Just("4294967296".to_owned()),
        Just("0s".to_owned()),
        Just("1ms".to_owned()),
        Just("15s".to_owned()),
        Just("10s".to_owned()),
        Just("2s".to_owned()),
        Just("3000000000s".to_owned()),
        Just("18446744073709551615s".to_owned()),
        Just("http://cloud-gateway:50051".to_owned()),
        Just("https://[::1]:50051".to_owned()),
        Just("dns:///gateway".to_owned()),
        Just("http://".to_owned()),
        Just("true".to_owned()),
        Just("json".to_owned()),
        Just(String::new()),
        "[ -~]{0,12}",
    ]
}

const FLAGS: &[&str] = &[
    "--kube-api-qps",
    "--kube-api-burst",
    "--gateway-address",
    "--gateway-timeout",
    "--gateway-retries",
    "--leader-elect",
    "--leader-elect-lease-duration",
    "--leader-elect-renew-deadline",
    "--leader-elect-retry-period",
    "--leader-elect-resource-name",
    "--leader-elect-identity",
    "--http-listen",
    "--cluster-name",
    "--log-format",
    "--otlp-endpoint",
];

fn argv() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec((proptest::sample::select(FLAGS), value()), 0..8).prop_map(|pairs| {
        std::iter::once("controller".to_owned())
            .chain(pairs.into_iter().map(|(flag, value)| format!("{flag}={value}")))
            .collect()
    })
}

proptest! {
    #[test]
    fn fuzz_common_flags_configure_or_say_why(argv in argv()) {
        let Ok(cli) = Cli::try_parse_from(&argv) else {
            return Ok(());
        };
        let args = cli.common;
        let _ = args.kube.rate_limit();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let _ = runtime.block_on(async { GatewayClient::new(&args.gateway, "fuzz").map(|_| ()) });
        if args.leader.validate().is_ok() {
            // What the elector computes with the accepted durations.
            let now = Instant::now();
            prop_assert!(now.checked_add(args.leader.lease_duration).is_some());
            prop_assert!(now.checked_add(args.leader.renew_deadline).is_some());
            prop_assert!(args.leader.lease_duration <= Duration::from_secs(i32::MAX as u64), "{:?}", argv);
            prop_assert!(!args.leader.retry_period.is_zero());
        }
    }
}
