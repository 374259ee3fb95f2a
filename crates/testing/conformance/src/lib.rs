//! The `cloudgateway.v1` contract, as a suite of cases any gateway must pass, whoever wrote it
//! and in whatever language.
//!
//! Every case talks to a gateway at an address ([`Target`]), over a real socket, with the
//! generated tonic clients, exactly as a controller would. What a case needs besides the
//! address (which instances exist and in which state, which annotations the gateway refuses...)
//! comes from a [`CloudFixture`]:
//! - a provider's in-process contract test (`contract-tests`: `contract_suite!`) creates fresh
//!   cloud state for each case and reads the cloud through the provider's own API;
//! - the `cloudgateway-conformance` binary reads a [`FixtureFile`] describing a cloud the
//!   gateway already serves, and prints one `PASS`/`FAIL`/`SKIP <case>: reason` line per case.
//!
//! # Layout
//! - [`target`]: the address, TLS settings and clients.
//! - [`fixture`]: what a case needs from the fixture; [`Skip`], [`Pass`].
//! - [`file`]: the YAML fixture of the binary.
//! - [`cases`]: the cases; [`cases::ALL`] in the order the binary runs them.
//! - [`runner`]: runs cases, turns panics into failures.

pub mod cases;
pub mod file;
pub mod fixture;
pub mod runner;
pub mod target;

pub use file::{FileFixture, FixtureFile};
pub use fixture::{Capability, CaseResult, CloudFixture, ExpectedCapabilities, Pass, Skip, TestInstance};
pub use target::{Clients, Target, TlsFiles};
