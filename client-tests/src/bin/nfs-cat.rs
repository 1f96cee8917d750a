//! `nfs-cat ADDR PATH`: prints the bytes of PATH (relative to the export root) as the pnfsd
//! at ADDR serves them, read through the MDS with this crate's NFSv4.1 client. The Linux-guest
//! suite's CAT_CMD (deploy/vm/test-pnfsd-suite.sh) pipes it into sha256sum.
#![deny(unsafe_code)]

use std::process::ExitCode;

const USAGE: &str = "usage: nfs-cat [--minor 1|2] ADDR:PORT PATH";

fn main() -> ExitCode {
    let mut minor = 1u32;
    let mut pos = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--minor" => match it.next().and_then(|v| v.parse().ok()) {
                Some(m @ (1 | 2)) => minor = m,
                _ => return usage("--minor takes 1 or 2"),
            },
            "-h" | "--help" => return usage(""),
            _ => pos.push(a),
        }
    }
    let [addr, path] = pos.as_slice() else {
        return usage("need ADDR:PORT and PATH");
    };
    let Ok(addr) = addr.parse() else {
        return usage("ADDR:PORT is not a socket address");
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nfs-cat: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    match rt.block_on(client_tests::cat::cat(addr, minor, path, &mut out)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nfs-cat: {path}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> ExitCode {
    if !why.is_empty() {
        eprintln!("nfs-cat: {why}");
    }
    eprintln!("{USAGE}");
    ExitCode::from(2)
}
