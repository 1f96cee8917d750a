//! The one module with `unsafe`: sending a signal to the server process (std has only
//! SIGKILL through `Child::kill`, and the tests also need SIGTERM, SIGSTOP and SIGCONT).
#![allow(unsafe_code)]

use std::io;

pub use libc::{SIGCONT, SIGHUP, SIGKILL, SIGSTOP, SIGTERM};

/// Sends `sig` to process `pid`.
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes two integers and touches no memory of ours; a bad pid or signal
    // is reported through the return value.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes `cmd`'s process get SIGKILL when the thread that spawned it dies, so a test runner
/// that is itself killed leaves no pnfsd behind on a shared machine.
pub fn kill_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it only calls prctl(2),
    // which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}
