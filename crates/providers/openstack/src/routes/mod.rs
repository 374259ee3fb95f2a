//! Pod-CIDR routes as Neutron router extra routes.

pub mod plan;
