//! What the operations share, one concept per file and one function per rule. No policy:
//! that is in the services below (`nfs4::state`, `nfs4::layouts`, the store).
//!
//! - `fh`: the current / saved filehandle, the object behind it, the file-type rules;
//! - `name`: component names and xattr keys;
//! - `stateid`: the current stateid, the stateid of an I/O operation;
//! - `perm`: the ACCESS4 bits of a credential and the permission checks;
//! - `caller`: the principal, the session's client, owners, the callback credential;
//! - `attr`: the attribute codec's environment (`AttrEnv`) of the operation's server.
pub mod attr;
pub mod caller;
pub mod fh;
pub mod name;
pub mod perm;
pub mod stateid;
