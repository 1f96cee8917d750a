//! The crate's target alone, exporting one file or block device as namespace 1: for measuring
//! it against other targets with a real host (`deploy/vm/scenarios/nvme-fio.sh` runs it in
//! the test guest next to Linux nvmet on the same device).
//!
//! `target PATH ADDR:PORT NQN [--direct]` — serves until SIGINT/SIGTERM; prints `ready ADDR`
//! once it listens. `--direct` opens PATH with O_DIRECT (as `pnfsd serve` opens its volume).

use nvme_tcp::{FileBackend, NamespaceConfig, Target, TargetConfig};
use std::path::PathBuf;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: target PATH ADDR:PORT NQN [--direct]");
        std::process::exit(2);
    }
    let path = PathBuf::from(&args[0]);
    let addr: std::net::SocketAddr = args[1].parse()?;
    let direct = args.iter().any(|a| a == "--direct");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let backend = if direct {
            FileBackend::open_direct(&path, 4096)?
        } else {
            FileBackend::open(&path, 4096)?
        };
        let cfg = TargetConfig::new(
            args[2].clone(),
            vec![NamespaceConfig {
                nsid: 1,
                backend: Arc::new(backend),
                volume_uuid: [0x42; 16],
            }],
        );
        let target = Target::bind(addr, cfg).await?;
        println!("ready {}", target.local_addr());
        target.spawn();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        target
            .shutdown_and_wait(std::time::Duration::from_secs(5))
            .await;
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
