//! What the simulated cloud API does to its state: pure decisions on [`crate::state::State`],
//! with no I/O, clock or randomness of their own (time and ids are passed in), so they are
//! table-tested directly. Each function validates everything before it changes anything, so a
//! refused call leaves the state untouched.

pub mod instances;
pub mod load_balancers;
pub mod routes;
