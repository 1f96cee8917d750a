//! The `pnfsd` binary: `mkfs` formats a volume, `serve` (the default) runs the metadata
//! server until SIGTERM/SIGINT, then unmounts the store cleanly; SIGHUP reloads what can
//! change without a restart. `target` serves volumes over NVMe/TCP as a storage node. `man` and `completions` print what clap generates from the
//! definitions below (one source for `--help`, the man pages and completions). The commands
//! themselves are the library's `daemon` module.
//!
//! Fatal errors go to stderr as `pnfsd: error: …` whatever `RUST_LOG` says; a start that
//! fails removes the volume file (and the directories) it created.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use pnfsd::config::Config;
use pnfsd::daemon::args::{MkfsArgs, ServeArgs};
use pnfsd::daemon::logging::Logging;
use pnfsd::daemon::mkfs::mkfs;
use pnfsd::daemon::serve::serve;
use pnfsd::daemon::{admin, io_err, DaemonError};

#[derive(Debug, Parser)]
#[command(
    name = "pnfsd",
    version,
    about = "pNFS metadata server for NFSv4.1/4.2 (block and SCSI layouts) with an embedded \
             NVMe/TCP target",
    long_about = "pnfsd is a pNFS metadata server for NFSv4.1/4.2. It keeps all metadata of \
        one data volume (a file, a block device or an external NVMe/TCP namespace) in an \
        XFS-like log and hands Linux clients block layouts (RFC 5663) or SCSI layouts over \
        NVMe (RFC 8154, RFC 9561), so they read and write file data directly on the volume, \
        which its embedded NVMe/TCP target exports.\n\n\
        With no command, `pnfsd` is `pnfsd serve`: it formats ./pnfsd-data/volume.img if \
        missing and serves NFS on 127.0.0.1:2049 and NVMe/TCP on 127.0.0.1:4420. The packaged \
        configuration is /etc/pnfsd/pnfsd.toml (`pnfsd serve --config /etc/pnfsd/pnfsd.toml`, \
        as the systemd unit runs it); docs/admin-guide.md takes a Linux client from \
        `nvme connect` to a pNFS mount."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Format a volume: a file (created sparse if missing), a block device, or an external
    /// NVMe/TCP namespace.
    #[command(
        long_about = "Format a volume for pnfsd: a file (created sparse if missing), a \
        block device, or an external NVMe/TCP namespace (nvme-tcp://HOST[:PORT]/NQN[?nsid=N]).\n\n\
        mkfs refuses a volume that a running pnfsd (or another mkfs) holds, even with \
        --force; and, without --force, one that holds a pnfsd volume or anything blkid -p \
        recognises (a file system, a partition table, RAID or LVM metadata, swap). A path \
        under /dev must be an existing block device."
    )]
    Mkfs(MkfsArgs),
    /// Serve NFS and the NVMe/TCP target (the default when no command is given).
    #[command(
        long_about = "Serve NFSv4.1/4.2 and the embedded NVMe/TCP target until \
        SIGTERM or SIGINT, then unmount the volume cleanly. A missing volume file is created \
        and formatted (never under /dev); an existing one must already be formatted.\n\n\
        SIGHUP re-reads the configuration file: log_level applies at once, every other \
        changed key is logged as needing a restart. Under systemd (Type=notify) the daemon \
        reports READY=1 once it serves, with the ready line as STATUS, and STOPPING=1."
    )]
    Serve(ServeArgs),
    /// Serve volume files or block devices over NVMe/TCP as a storage node (the [target]
    /// section), without mounting them.
    #[command(
        long_about = "Serve the volume files or block devices of the configuration's \
        [target] section as namespaces of one NVMe/TCP subsystem, with the embedded target's \
        host rules, limits and reservations (Persist Through Power Loss, kept in state_dir), \
        until SIGTERM or SIGINT. A storage node runs it so that the volume outlives either \
        MDS; pnfsd serve reaches it with volume = \"nvme-tcp://HOST:PORT/NQN?nsid=N\".\n\n\
        It never creates, formats or mounts a volume; it locks each one as pnfsd serve does. \
        On a namespace that holds a pnfsd superblock only mds_hosts may write the region \
        before the data area. SIGHUP reloads nothing. Under systemd (Type=notify) it reports \
        READY=1 once it serves, with the ready line as STATUS."
    )]
    Target(pnfsd::daemon::target::TargetArgs),
    /// Show a running pnfsd: version, uptime, volume, free space, grace, log, metadata cache
    /// (GET /status on its admin endpoint; `admin = true` in its configuration).
    Status(pnfsd::admin::cli::AdminArgs),
    /// List a running pnfsd's clients: lease, sessions, open/lock/delegation/layout counts,
    /// reclaim, address (GET /clients on its admin endpoint); `states ID` lists what one
    /// client holds, `evict ID` expires it now with its layouts fenced.
    Clients(ClientsArgs),
    /// List a running pnfsd's outstanding layouts: file, holder, type, ranges, recalls in
    /// flight, fenced (GET /layouts on its admin endpoint).
    Layouts(pnfsd::admin::cli::AdminArgs),
    /// Print the man pages (roff), or write pnfsd.1, pnfsd-serve.1, ... into a directory.
    Man {
        /// Directory to write one page per command into; stdout (pnfsd.1 only) if absent.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, clap::Args)]
struct ClientsArgs {
    #[command(flatten)]
    admin: pnfsd::admin::cli::AdminArgs,
    #[command(subcommand)]
    action: Option<ClientsAction>,
}

#[derive(Debug, Subcommand)]
enum ClientsAction {
    /// The states one client holds: opens, locks, delegations, layouts, by file
    /// (GET /clients/ID/states).
    States {
        /// The client id as `pnfsd clients` prints it.
        id: String,
    },
    /// Expire a client now, as if its lease had run out: its sessions and state go and its
    /// layouts are fenced (POST /clients/ID/evict; knfsd's `echo expire > .../ctl`).
    Evict {
        /// The client id as `pnfsd clients` prints it.
        id: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The format is fixed when logging starts: the daemon's configuration names it (read
    // again, with errors reported, by `serve`).
    let format = match &cli.cmd {
        Some(Cmd::Serve(a)) => Config::load(a.config.as_deref(), &a.overrides())
            .map(|c| c.log_format)
            .unwrap_or_default(),
        Some(Cmd::Target(a)) => Config::load(a.config.as_deref(), &Default::default())
            .map(|c| c.log_format)
            .unwrap_or_default(),
        None => Config::load(None, &Default::default())
            .map(|c| c.log_format)
            .unwrap_or_default(),
        _ => Default::default(),
    };
    let log = Logging::init(format);
    let res = match cli.cmd {
        Some(Cmd::Mkfs(a)) => mkfs(&a),
        Some(Cmd::Serve(a)) => serve(&a, &log),
        Some(Cmd::Target(a)) => pnfsd::daemon::target::run(&a, &log),
        Some(Cmd::Status(a)) => admin(pnfsd::admin::cli::View::Status, &a),
        Some(Cmd::Clients(a)) => {
            use pnfsd::admin::cli::View;
            let view = match a.action {
                None => View::Clients,
                Some(ClientsAction::States { id }) => View::ClientStates(id),
                Some(ClientsAction::Evict { id }) => View::Evict(id),
            };
            admin(view, &a.admin)
        }
        Some(Cmd::Layouts(a)) => admin(pnfsd::admin::cli::View::Layouts, &a),
        Some(Cmd::Man { dir }) => man(dir.as_deref()),
        Some(Cmd::Completions { shell }) => {
            clap_complete::generate(shell, &mut Cli::command(), "pnfsd", &mut std::io::stdout());
            Ok(())
        }
        None => serve(&ServeArgs::default(), &log),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not through tracing: RUST_LOG=off must not hide why the command failed.
            eprintln!("pnfsd: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn man(dir: Option<&Path>) -> Result<(), DaemonError> {
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io_err(format!("create {}", d.display())))?;
            clap_mangen::generate_to(Cli::command(), d)
                .map_err(io_err(format!("write man pages into {}", d.display())))
        }
        None => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map_err(io_err("stdout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("pnfsd").chain(args.iter().copied()))
    }

    #[test]
    fn no_arguments_means_serve_with_defaults() {
        assert!(parse(&[]).unwrap().cmd.is_none());
    }

    #[test]
    fn mkfs_arguments() {
        let Some(Cmd::Mkfs(m)) = parse(&["mkfs", "/tmp/v.img", "--size", "1G", "--force"])
            .unwrap()
            .cmd
        else {
            panic!()
        };
        assert_eq!(
            (m.path, m.size, m.force),
            (PathBuf::from("/tmp/v.img"), 1 << 30, true)
        );
        let Some(Cmd::Mkfs(m)) = parse(&["mkfs", "v"]).unwrap().cmd else {
            panic!()
        };
        assert_eq!((m.size, m.force), (8 << 30, false));
        assert!(parse(&["mkfs", "v", "--size", "lots"]).is_err());
        assert!(parse(&["mkfs"]).is_err());
    }

    #[test]
    fn target_flags() {
        let Some(Cmd::Target(t)) =
            parse(&["target", "--config", "t.toml", "--listen", "10.0.0.1:4421"])
                .unwrap()
                .cmd
        else {
            panic!()
        };
        assert_eq!(t.config, Some(PathBuf::from("t.toml")));
        assert_eq!(
            t.listen.map(|a| a.to_string()),
            Some("10.0.0.1:4421".into())
        );
        assert!(parse(&["target", "--listen", "nowhere"]).is_err());
        assert!(parse(&["target", "--data-dir", "/d"]).is_err());
    }

    #[test]
    fn serve_flags() {
        let Some(Cmd::Serve(s)) = parse(&[
            "serve",
            "--config",
            "c.toml",
            "--data-dir",
            "/d",
            "--listen",
            "0.0.0.0:2050",
            "--nvme-listen",
            "0.0.0.0:4420",
            "--lease-seconds",
            "15",
        ])
        .unwrap()
        .cmd
        else {
            panic!()
        };
        assert_eq!(s.config, Some(PathBuf::from("c.toml")));
        assert_eq!(s.data_dir, Some(PathBuf::from("/d")));
        assert_eq!(s.listen.map(|a| a.port()), Some(2050));
        assert_eq!(s.nvme_listen.map(|a| a.port()), Some(4420));
        assert_eq!(s.lease_seconds, Some(15));
        assert!(!s.no_nvme);
        assert!(parse(&["serve", "--listen", "nowhere"]).is_err());
        let Some(Cmd::Serve(s)) = parse(&["serve", "--no-nvme"]).unwrap().cmd else {
            panic!()
        };
        assert!(s.no_nvme && s.nvme_listen.is_none() && s.metrics_listen.is_none());
        let Some(Cmd::Serve(s)) = parse(&["serve", "--metrics-listen", "127.0.0.1:9400"])
            .unwrap()
            .cmd
        else {
            panic!()
        };
        assert_eq!(s.metrics_listen.map(|a| a.port()), Some(9400));
        assert!(parse(&["serve", "--no-nvme", "--nvme-listen", "127.0.0.1:1"]).is_err());
    }
}
