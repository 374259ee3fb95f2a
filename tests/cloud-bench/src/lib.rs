//! What `make bench-aws`, `bench-openstack` and `bench-vsphere` share beyond the e2e helpers:
//! an HTTP proxy that forwards every request unchanged and records it, so a benchmark counts the
//! calls the real gateway made to a real API, as the API saw them, not as the gateway reports
//! them ([`counting_proxy`]); the table the benchmarks print and write ([`table`]).

pub mod counting_proxy;
pub mod table;
