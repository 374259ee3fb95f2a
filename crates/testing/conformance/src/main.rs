//! `cloudgateway-conformance`: runs the cloudgateway.v1 contract suite against a gateway at an
//! address, with a YAML fixture describing the cloud behind it. Prints one
//! `PASS`/`FAIL`/`SKIP <case>: reason` line per case; exits 1 when a case failed, 2 when it
//! could not start (bad flags, unreadable fixture), 0 otherwise.

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use clap::Parser;
use cloudgateway_conformance::{CloudFixture, FileFixture, Target, TlsFiles, cases, runner};

/// Checks a cloudgateway.v1 gateway, ours or anyone's, against the contract.
#[derive(Debug, Parser)]
#[command(name = "cloudgateway-conformance", version)]
struct Args {
    /// The gateway's gRPC address: host:port, http://host:port, or https://host:port with TLS.
    #[arg(long, env = "CLOUDGATEWAY_ADDRESS", required_unless_present = "list")]
    address: Option<String>,
    /// YAML fixture: the provider name, capabilities and instances the gateway must report, and
    /// hooks for what the contract alone cannot arrange (see docs/providers.md).
    #[arg(long, required_unless_present = "list")]
    fixture: Option<PathBuf>,
    /// The gateway's Prometheus page (http://host:port/metrics), for the case that reads it;
    /// that case is skipped without it.
    #[arg(long)]
    metrics_url: Option<String>,
    /// PEM CA bundle that signed the gateway's certificate; turns on TLS.
    #[arg(long)]
    tls_ca_file: Option<PathBuf>,
    /// PEM client certificate presented to the gateway (mutual TLS), with --tls-key-file.
    #[arg(long, requires_all = ["tls_key_file", "tls_ca_file"])]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    /// Name to verify in the gateway's certificate; the address's host when unset.
    #[arg(long, requires = "tls_ca_file")]
    tls_server_name: Option<String>,
    /// Run only this case (repeatable); every case when unset.
    #[arg(long = "case", value_name = "NAME")]
    cases: Vec<String>,
    /// Longest a case may take.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    case_timeout: Duration,
    /// Deadline of each gRPC call.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    call_timeout: Duration,
    /// Print where each failed assertion is, on stderr.
    #[arg(long)]
    verbose: bool,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
}

fn target(args: &Args, address: &str) -> Result<Target, String> {
    let target = match &args.tls_ca_file {
        Some(ca) => Target::tls(
            address,
            &TlsFiles {
                ca_file: ca.clone(),
                identity: args.tls_cert_file.clone().zip(args.tls_key_file.clone()),
                server_name: args.tls_server_name.clone(),
            },
        )?,
        None => Target::plaintext(address),
    };
    let target = target.with_call_timeout(args.call_timeout);
    Ok(match &args.metrics_url {
        Some(url) => target.with_metrics_url(url),
        None => target,
    })
}

fn selected(names: &[String]) -> Result<Vec<&'static cases::Case>, String> {
    if names.is_empty() {
        return Ok(cases::ALL.iter().collect());
    }
    names
        .iter()
        .map(|n| cases::find(n).ok_or_else(|| format!("unknown case {n:?} (see --list)")))
        .collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for case in cases::ALL {
            println!("{}: {}", case.name, case.about);
        }
        return ExitCode::SUCCESS;
    }
    let setup = || -> Result<_, String> {
        let address = args.address.as_deref().ok_or("--address is required")?;
        let fixture = args.fixture.as_deref().ok_or("--fixture is required")?;
        let fixture = FileFixture::load(fixture, target(&args, address)?)?;
        Ok((fixture, selected(&args.cases)?))
    };
    let (fixture, cases) = match setup() {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("cloudgateway-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.verbose {
        // A failed assertion is reported on its case's line; the default hook would repeat it.
        std::panic::set_hook(Box::new(|_| {}));
    }
    let endpoint = fixture.target().endpoint().to_owned();
    let provider = fixture.file().provider_name.clone();
    let fixture: Arc<dyn CloudFixture> = Arc::new(fixture);
    let started = tokio::time::Instant::now();
    let outcomes = runner::run(&cases, fixture, args.case_timeout, |outcome| {
        println!("{outcome}");
    })
    .await;
    let count = |f: fn(&runner::Verdict) -> bool| outcomes.iter().filter(|o| f(&o.verdict)).count();
    let failed = count(|v| matches!(v, runner::Verdict::Fail(_)));
    println!(
        "{} passed, {failed} failed, {} skipped: {endpoint} (provider {provider}) in {:.1}s",
        count(|v| matches!(v, runner::Verdict::Pass(_))),
        count(|v| matches!(v, runner::Verdict::Skip(_))),
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
