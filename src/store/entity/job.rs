//! The `job` table: declared with the job itself ([`crate::domain::job::row`]), since the
//! job the API serves is its row.

pub use crate::domain::job::row::*;
