//! NFSv4.1/4.2: COMPOUND dispatch, one file per operation, and the state they share.
pub mod attr;
pub mod callback;
pub mod compound;
pub mod copy;
pub mod ctx;
pub mod delegs;
pub mod helpers;
pub mod layouts;
pub mod opcode;
pub mod ops;
pub mod options;
pub mod state;
pub mod status;
pub mod types;

#[cfg(test)]
mod tests;
