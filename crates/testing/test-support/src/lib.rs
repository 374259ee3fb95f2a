//! What controller tests share, between pure plan tests and end-to-end tests of the processes:
//!
//! - [`FakeCloud`]: the cloud behind the same traits the controllers use (instances, load
//!   balancers and routes), configured by methods and recording every call (like upstream's `fake.Cloud`).
//! - [`NodeBuilder`], [`InstanceBuilder`], [`ServiceBuilder`]: test objects in one line each.
//! - [`intercept`]: a kube client for fake-apiserver whose requests a test can delay or answer
//!   itself (a slow events API, a conflict on a lease), recording what went out.

mod builders;
mod fake_cloud;
pub mod intercept;

pub use builders::{InstanceBuilder, NodeBuilder, ServiceBuilder};
pub use fake_cloud::{FakeCloud, FakeLoadBalancer, LoadBalancerCall, LoadBalancerOp, RouteCall, RouteOp};
