//! Octavia load balancers for `type: LoadBalancer` Services, built as OCCM builds them.
//!
//! - [`names`]: OCCM's names, descriptions and tags.
//! - [`service_conf`]: what a Service asks of its load balancer (annotations over cloud.conf).
//! - [`desired`]: the listeners, pools, members and monitors that follow from it, and the status.
//! - [`observed`]: what Octavia reports (its API answers, read leniently).
//! - [`plan`]: the next Octavia write (at most one per sync), or why none.

pub mod desired;
pub mod names;
pub mod observed;
pub mod plan;
pub mod service_conf;
