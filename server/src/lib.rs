//! pnfsd: a pNFS block-layout metadata server for NFSv4.1/4.2 (being written).
pub mod store;
