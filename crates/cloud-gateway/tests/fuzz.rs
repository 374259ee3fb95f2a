//! Property tests of what the gateway reads at start: its command line (flags, durations, the
//! simulator's `RATE/BURST` and `OP=P`) and the authorization policy file. Each input gets a
//! clear error or the right answer, never a panic, and a configuration that is accepted can
//! run (the gateway does arithmetic on every duration it accepts).
//!
//! 256 cases per property by default; `PROPTEST_CASES=100000` (what `make fuzz` sets) for the
//! full run. Requests over a socket are fuzzed in `contract-tests` (`fuzz_requests`).

use std::collections::BTreeSet;

use clap::Parser as _;
use cloud_gateway::{
    auth::{Group, Policy},
    cli::Args,
    peers::Membership,
};
use proptest::prelude::*;

/// A flag's value as a user might type it, or mistype it.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("-1".to_owned()),
        Just("0.5".to_owned()),
        Just("NaN".to_owned()),
        Just("inf".to_owned()),
        Just("1e309".to_owned()),
        Just("0s".to_owned()),
        Just("10ms".to_owned()),
        Just("2m".to_owned()),
        Just("18446744073709551615s".to_owned()),
        Just("584942417355y".to_owned()),
        Just("50/100".to_owned()),
        Just("NaN/1".to_owned()),
        Just("*=0.5".to_owned()),
        Just("describe_instances=2".to_owned()),
        Just("=".to_owned()),
        Just("127.0.0.1:0".to_owned()),
        Just("[::1]:1".to_owned()),
        Just("host:99999".to_owned()),
        Just("true".to_owned()),
        Just("routes".to_owned()),
        Just(String::new()),
        "[ -~]{0,12}",
    ]
}

const FLAGS: &[&str] = &[
    "--grpc-listen",
    "--http-listen",
    "--read-rate",
    "--read-burst",
    "--write-rate",
    "--write-burst",
    "--instance-batch-size",
    "--instance-coalescing",
    "--instance-cache-ttl",
    "--throttle-decrease",
    "--throttle-min-factor",
    "--throttle-recovery-per-second",
    "--max-call-duration",
    "--shutdown-grace",
    "--peers",
    "--peer-probe-interval",
    "--log-format",
    "--otlp-endpoint",
    "--simulator-latency",
    "--simulator-rate-limit",
    "--simulator-error-rate",
    "--simulator-lb-provision-delay",
    "--simulator-disable",
    "--simulator-max-batch",
];

fn argv() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec((proptest::sample::select(FLAGS), value()), 0..8).prop_map(|pairs| {
        let mut argv = vec!["cloud-gateway".to_owned(), "--insecure-plaintext".to_owned()];
        for (flag, value) in pairs {
            argv.push(format!("{flag}={value}"));
        }
        argv
    })
}

/// A policy as a model: callers with unique names, identities and groups.
fn policy_model() -> impl Strategy<Value = Vec<(String, Vec<String>, BTreeSet<&'static str>)>> {
    let identity = prop_oneof![
        "[a-z][a-z0-9-]{0,12}",
        "[a-z]{1,8}".prop_map(|sa| format!("spiffe://cluster.local/ns/kube-system/sa/{sa}")),
        "[a-z]{1,8}".prop_map(|cn| format!("CN={cn}")),
    ];
    let group = proptest::sample::select(vec!["identity", "instances", "load-balancers", "routes"]);
    proptest::collection::btree_map(
        "[a-z][a-z0-9-]{0,20}",
        (
            proptest::collection::vec(identity, 1..4),
            proptest::collection::btree_set(group, 0..4),
        ),
        0..4,
    )
    .prop_map(|callers| {
        callers
            .into_iter()
            .map(|(name, (ids, allow))| (name, ids, allow))
            .collect()
    })
}

fn render_policy(model: &[(String, Vec<String>, BTreeSet<&'static str>)]) -> String {
    if model.is_empty() {
        return "callers: []\n".into();
    }
    let mut text = String::from("callers:\n");
    for (name, ids, allow) in model {
        text.push_str(&format!("  - name: {name}\n    identities:\n"));
        for id in ids {
            text.push_str(&format!("      - \"{id}\"\n"));
        }
        let allow: Vec<&str> = allow.iter().copied().collect();
        text.push_str(&format!("    allow: [{}]\n", allow.join(", ")));
    }
    text
}

fn group_name(g: Group) -> &'static str {
    match g {
        Group::Identity => "identity",
        Group::Instances => "instances",
        Group::LoadBalancers => "load-balancers",
        Group::Routes => "routes",
    }
}

/// Who the policy says `identity` is (the first caller one of whose patterns matches: a full
/// identity exactly, a bare name as a CN or a SPIFFE ID's service account).
fn model_caller<'a>(
    model: &'a [(String, Vec<String>, BTreeSet<&'static str>)],
    identity: &str,
) -> Option<&'a str> {
    let matches = |pattern: &str| {
        if pattern.contains('/') || pattern.contains(':') {
            pattern == identity
        } else {
            identity == pattern
                || (identity.starts_with("spiffe://")
                    && identity.rsplit_once("/sa/").is_some_and(|(_, sa)| sa == pattern))
        }
    };
    model
        .iter()
        .find(|(_, ids, _)| ids.iter().any(|p| matches(p)))
        .map(|(name, _, _)| name.as_str())
}

proptest! {
    #[test]
    fn fuzz_command_line_configures_or_says_why(argv in argv()) {
        let Ok(args) = Args::try_parse_from(&argv) else {
            return Ok(());
        };
        // The simulated cloud (the default provider) opens or says why.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let _ = runtime.block_on(args.provider());
        let Ok(config) = args.gateway_config() else {
            return Ok(());
        };
        // Accepted: every duration the gateway computes with stays in range.
        if let Some(peers) = config.peers.clone() {
            let warm_up = Membership::new(peers).warm_up();
            prop_assert!(warm_up < std::time::Duration::from_secs(3600), "{:?}: {:?}", argv, warm_up);
        }
        prop_assert!(!config.max_call_duration.is_zero());
    }

    #[test]
    fn fuzz_policy_text_parses_or_says_why(text in "(.|\n){0,120}") {
        if let Err(e) = Policy::parse(&text) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn fuzz_policy_means_what_it_says(
        model in policy_model(),
        identity in prop_oneof![
            "[a-z][a-z0-9-]{0,12}",
            "[a-z]{1,8}".prop_map(|sa| format!("spiffe://cluster.local/ns/kube-system/sa/{sa}")),
            "[a-z]{1,8}".prop_map(|sa| format!("spiffe://other/ns/x/sa/{sa}")),
        ],
    ) {
        let text = render_policy(&model);
        let policy = Policy::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(policy.callers.len(), model.len());
        for (caller, (name, ids, allow)) in policy.callers.iter().zip(&model) {
            prop_assert_eq!(&caller.name, name);
            prop_assert_eq!(&caller.identities, ids);
            let got: BTreeSet<&str> = caller.allow.iter().map(|g| group_name(*g)).collect();
            prop_assert_eq!(&got, allow);
        }
        let got = policy.caller_of(&identity).map(|c| c.name.as_str());
        prop_assert_eq!(got, model_caller(&model, &identity), "{} in\n{}", identity, text);
    }
}
