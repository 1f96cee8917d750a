//! client-tests: pnfsd's own NFSv4.1/4.2 client, and the harness that runs the real `pnfsd`
//! binary for integration tests over loopback (docs/design.md §1, §7).
//!
//! ```text
//!  test ──▶ Session (slots, SEQUENCE, retries) ──▶ Compound (typed ops) ──▶ Connection
//!                                                                              │ TCP, record marking,
//!  CbQueue ◀── callback::answer ◀── server CALLs on the same connection ◀─────┘ xid matching
//!  PnfsdProcess: spawn `pnfsd serve`, wait for "ready", SIGKILL / SIGTERM, restart
//! ```
//!
//! Owns: the client side of ONC RPC (`rpc`, `conn`); argument encoders (`ops`, `open_args`,
//! `session_args`, `attrs`) and result decoders (`results`, `compound`), plus the pNFS
//! operations and block-layout bodies (`pnfs`), all written from RFC 8881 / RFC 5663
//! independently of the server's, so the tests check the server's XDR rather than share its
//! mistakes; sessions and slots (`session`); the backchannel (`callback`); file helpers (`fs`);
//! a whole file read through the MDS (`cat`, the core of the `nfs-cat` tool);
//! block-layout I/O on the volume (`layout_io`); the process harness (`harness`) and the
//! crash-under-load plumbing of the SIGKILL tests (`crash`). It
//! reuses only the server's XDR primitives and shared newtypes (`XdrReader`/`XdrWriter`,
//! `Stateid`, `Bitmap`, `NfsStat`, opcode numbers).
//!
//! Never: reaches into the server's memory or metadata (tests talk NFS; the only bytes they
//! touch directly are file data on the volume through layout extents, as a pNFS client does),
//! or retries on its own — a test sees every status.
#![deny(unsafe_code)]

pub mod abuse;
pub mod attrs;
pub mod callback;
pub mod cat;
pub mod compound;
pub mod conn;
pub mod crash;
pub mod error;
pub mod external;
pub mod fs;
pub mod harness;
pub mod layout_io;
pub mod open_args;
pub mod ops;
pub mod pnfs;
pub mod results;
pub mod rpc;
pub mod session;
pub mod session_args;
pub mod sys;

pub use compound::{Compound, Reply};
pub use conn::Connection;
pub use error::{ClientError, Result, RpcError};
pub use harness::{PnfsdProcess, ServerOptions};
pub use pnfsd::nfs4::status::NfsStat;
pub use pnfsd::nfs4::types::{Bitmap, Stateid};
pub use session::{Session, SessionOptions, Slot};
