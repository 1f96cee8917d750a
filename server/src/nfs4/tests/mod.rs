//! The operations through their handlers, over a real store on a simulated volume, as the
//! dispatcher calls them: the XDR of each argument and result, and the state they make. Unit
//! tests of one function stay beside it; these are the suites that need a server.

mod copy;
mod copy_async;
mod delegs;
mod fixture;
mod ns;
mod pnfs;
mod state;
