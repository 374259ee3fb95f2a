//! What `make bench-aws` and `make bench-openstack` share beyond the e2e helpers: an HTTP proxy
//! that forwards every request unchanged and records it, so a benchmark counts the calls the
//! real gateway made to a real API, as the API saw them, not as the gateway reports them.

pub mod counting_proxy;
