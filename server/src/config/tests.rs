use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::volume::VolumeSource;
use layout::block::LayoutType;

#[test]
fn sizes() {
    assert_eq!(parse_size("8G").unwrap(), Size(8 << 30));
    assert_eq!(parse_size("512m").unwrap(), Size(512 << 20));
    assert_eq!(parse_size("4KiB").unwrap(), Size(4096));
    assert_eq!(parse_size("1T").unwrap(), Size(1 << 40));
    assert_eq!(parse_size("12345").unwrap(), Size(12345));
    for bad in ["", "G", "8X", "-1G", "99999999999T", "1.5G"] {
        assert!(parse_size(bad).is_err(), "{bad}");
    }
}

/// The NVMe/TCP send bound and Connect timeout are keys, with nvme_tcp's
/// defaults, and reach the target's `Limits`.
#[test]
fn nvme_send_bound_and_connect_timeout_parse_into_the_limits() {
    let c = Config::parse(
        "nvme_max_send_queued = \"8M\"\nnvme_connect_timeout_ms = 2500\n",
        Path::new("t.toml"),
    )
    .unwrap();
    let l = c.nvme_limits();
    assert_eq!(
        (l.max_send_queued_per_connection, l.connect_timeout_ms),
        (8 << 20, 2500)
    );
    let c = Config::parse("nvme_max_send_queued = 1048576", Path::new("t.toml")).unwrap();
    assert_eq!(c.nvme_limits().max_send_queued_per_connection, 1 << 20);
    let d = nvme_tcp::Limits::default();
    assert_eq!(Config::default().nvme_limits(), d);
    for bad in [
        "nvme_max_send_queued = \"4X\"",
        "nvme_connect_timeout_ms = -1",
    ] {
        assert!(Config::parse(bad, Path::new("t.toml")).is_err(), "{bad}");
    }
}

#[test]
fn client_state_limits_parse_and_are_checked() {
    let c = Config::parse(
        "max_clients = 10\nmax_sessions_per_client = 2\nmax_client_memory = \"8M\"\n\
             max_courtesy_clients = 3\nwrite_delegations = false\n",
        Path::new("t.toml"),
    )
    .unwrap();
    let l = c.nfs_options().client_limits;
    assert!(!l.write_delegations && l.read_delegations);
    assert!(
        Config::default()
            .nfs_options()
            .client_limits
            .write_delegations
    );
    assert_eq!(
        (
            l.max_clients,
            l.max_sessions_per_client,
            l.max_client_memory
        ),
        (10, 2, 8 << 20)
    );
    assert_eq!(l.max_courtesy_clients, 3);
    let d = Config::default().nfs_options().client_limits;
    assert_eq!(d, crate::nfs4::state::ClientLimits::default());
    assert_eq!(d.max_client_memory, 256 << 20);
    for bad in [
        "max_clients = 0",
        "max_sessions_per_client = 0",
        "max_client_memory = \"4K\"",
    ] {
        assert!(Config::parse(bad, Path::new("t.toml")).is_err(), "{bad}");
    }
}

#[test]
fn a_full_file_parses() {
    let text = r#"
            data_dir = "/srv/pnfs"
            volume = "/dev/nvme0n1"
            volume_size = "16G"
            listen = "0.0.0.0:2049"
            nvme_listen = "0.0.0.0:4420"
            nvme_allow_any_host = true
            nvme_nqn = "nqn.test:vol"
            lease_seconds = 30
            grace_seconds = 45
            export_sync = "async"
            layout_types = ["block", "scsi"]
            layoutcommit = "sync"
            fence_command = "/usr/local/bin/fence %c"
            log_force_interval_seconds = 5
            metadata_cache = "64M"
            max_record_size = 2097152
            max_connections = 50
            idle_timeout_seconds = 7
            [[exports]]
            path = "/"
            [[exports.clients]]
            hosts = ["10.0.0.0/24"]
            access = "ro"
        "#;
    let c = Config::parse(text, Path::new("t.toml")).unwrap();
    assert_eq!(c.volume_path(), PathBuf::from("/dev/nvme0n1"));
    assert_eq!(c.volume_size, Size(16 << 30));
    assert_eq!(c.nvme_listen, Some("0.0.0.0:4420".parse().unwrap()));
    assert_eq!(c.nvme_nqn, "nqn.test:vol");
    let n = c.nfs_options();
    assert_eq!((n.lease_seconds, n.grace_seconds, n.sync), (30, 45, false));
    assert_eq!(
        n.layout_types,
        vec![LayoutType::BLOCK_VOLUME, LayoutType::SCSI]
    );
    assert!(n.layoutcommit_sync);
    assert_eq!(n.fence_command.as_deref(), Some("/usr/local/bin/fence %c"));
    assert_eq!(c.store_options().log_force_interval, Duration::from_secs(5));
    assert_eq!(c.store_options().metadata_cache, 64 << 20);
    assert_eq!(
        Config::default().store_options().metadata_cache,
        256 << 20,
        "metadata_cache defaults to 256M"
    );
    let r = c.rpc_options();
    // AUTH_NONE passes the transport; the export rules refuse it (crate::exports).
    assert_eq!((r.max_record, r.auth.allow_none), (2 << 20, true));
    assert_eq!(c.exports.len(), 1);
    assert_eq!(
        c.exports[0].clients[0].access,
        crate::exports::AccessMode::Ro
    );
    assert_eq!(
        (r.max_connections, r.idle_timeout),
        (50, Duration::from_secs(7))
    );
}

/// The exports section parses with knfsd's defaults, a bad rule
/// fails the load, and the old AUTH_NONE switch says what replaced it.
#[test]
fn exports_parse_with_knfsd_defaults_and_bad_rules_fail() {
    use crate::exports::{AccessMode, SecFlavor};
    use crate::rpc::auth::Squash;
    let c = Config::parse(
        "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\n",
        Path::new("x"),
    )
    .unwrap();
    let r = &c.exports[0].clients[0];
    assert_eq!(c.exports[0].path, "/");
    assert_eq!(
        (
            r.access,
            r.squash,
            r.anon_uid,
            r.anon_gid,
            &r.sec[..],
            r.pnfs
        ),
        (
            AccessMode::Rw,
            Squash::Root,
            65534,
            65534,
            &[SecFlavor::Sys][..],
            true
        )
    );
    for bad in [
        "[[exports]]\npath = \"/srv\"\n[[exports.clients]]\nhosts = [\"*\"]",
        "[[exports]]\nclients = []",
        "[[exports]]\n[[exports.clients]]\nhosts = [\"10.0.0.0/40\"]",
        "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\nsquash = \"root\"",
        "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\nsec = [\"krb5\"]",
        "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\nsec = []",
        "[[exports]]\n[[exports.clients]]\nhost = [\"*\"]",
    ] {
        assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
    }
    let e = Config::parse("allow_auth_none = true", Path::new("x")).unwrap_err();
    assert!(e.to_string().contains("sec = [\"sys\", \"none\"]"), "{e}");
}

#[test]
fn defaults_and_errors() {
    let c = Config::parse("", Path::new("empty.toml")).unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.volume_path(), PathBuf::from("./pnfsd-data/volume.img"));
    assert_eq!(c.nfs_options().layout_types, vec![LayoutType::BLOCK_VOLUME]);
    assert!(c.nfs_options().sync && !c.nfs_options().layoutcommit_sync);
    for bad in [
        "lisen = \"1.2.3.4:5\"",
        "export_sync = \"maybe\"",
        "layout_types = [\"files\"]",
        "layout_types = []",
        "lease_seconds = 0",
        "volume_size = \"big\"",
        "listen = \"nohost\"",
        "nvme_listen = \"of\"",
        "nvme_nqn = \"volume\"",
        "max_connections = 0",
        "idle_timeout_seconds = 0",
    ] {
        assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
    }
}

#[test]
fn the_nvme_target_is_on_by_default_and_off_by_name() {
    let c = Config::default();
    assert_eq!(c.nvme_listen, Some("127.0.0.1:4420".parse().unwrap()));
    assert_eq!(c.nvme_allowed_hosts, None);
    for off in ["nvme_listen = \"off\"", "nvme_listen = \"OFF\""] {
        assert_eq!(
            Config::parse(off, Path::new("x")).unwrap().nvme_listen,
            None
        );
    }
    let c = Config::parse(
        "nvme_allowed_hosts = [\"nqn.2014-08.org.nvmexpress:uuid:1\"]\n\
             nvme_advertise = \"10.0.2.2:4420\"",
        Path::new("x"),
    )
    .unwrap();
    assert_eq!(c.nvme_allowed_hosts.unwrap().len(), 1);
    assert_eq!(c.nvme_advertise.map(|a| a.port()), Some(4420));
}

#[test]
fn metrics_endpoint_is_off_by_default_and_set_by_key_or_flag() {
    assert_eq!(Config::default().metrics_listen, None);
    let c = Config::parse("metrics_listen = \"127.0.0.1:9400\"", Path::new("x")).unwrap();
    assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9400));
    assert!(Config::parse("metrics_listen = \"nowhere\"", Path::new("x")).is_err());
    let o = Overrides {
        metrics_listen: Some("127.0.0.1:9401".parse().unwrap()),
        ..Overrides::default()
    };
    let c = Config::load(None, &o).unwrap();
    assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9401));
}

/// The admin views are off unless asked for, and warned about off the loopback.
#[test]
fn admin_is_off_by_default_and_warned_about_off_the_loopback() {
    assert!(!Config::default().admin);
    let warn = |toml: &str| {
        Config::parse(toml, Path::new("x"))
            .unwrap()
            .reachability_warnings()
            .into_iter()
            .filter(|w| w.contains("admin"))
            .count()
    };
    assert_eq!(warn("admin = true\nmetrics_listen = \"127.0.0.1:9400\""), 0);
    assert_eq!(warn("admin = true\nmetrics_listen = \"0.0.0.0:9400\""), 1);
    assert_eq!(warn("admin = true"), 1);
    assert_eq!(warn("metrics_listen = \"0.0.0.0:9400\""), 0);
}

/// The packaged file (/etc/pnfsd/pnfsd.toml) is the built-in defaults but for where the
/// data lives.
#[test]
fn the_packaged_file_is_the_defaults_with_data_under_var_lib() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pnfsd.toml");
    let c = Config::load(Some(&p), &Overrides::default()).unwrap();
    assert_eq!(c.volume_path(), PathBuf::from("/var/lib/pnfsd/volume.img"));
    let d = Config {
        data_dir: "/var/lib/pnfsd".into(),
        ..Config::default()
    };
    assert_eq!(c, d);
}

/// `cd / && pnfsd serve --config DIR/c.toml` with `data_dir = "data"` used
/// /data; the file's directory is meant. Flags stay relative to the current directory.
#[test]
fn relative_paths_in_a_file_are_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(&p, "data_dir = \"data\"\n").unwrap();
    let c = Config::load(Some(&p), &Overrides::default()).unwrap();
    assert_eq!(c.volume_path(), dir.path().join("data/volume.img"));
    std::fs::write(&p, "lease_seconds = 30\n").unwrap();
    let c = Config::load(Some(&p), &Overrides::default()).unwrap();
    assert_eq!(c.volume_path(), dir.path().join("pnfsd-data/volume.img"));
    std::fs::write(&p, "volume = \"../v.img\"\n").unwrap();
    let c = Config::load(Some(&p), &Overrides::default()).unwrap();
    assert_eq!(c.volume_path(), dir.path().join("../v.img"));
    std::fs::write(&p, "volume = \"nvme-tcp://h/nqn.a\"\ndata_dir = \"/abs\"\n").unwrap();
    let c = Config::load(Some(&p), &Overrides::default()).unwrap();
    assert_eq!(c.volume_path(), PathBuf::from("nvme-tcp://h/nqn.a"));
    assert_eq!(c.data_dir, PathBuf::from("/abs"));
    let o = Overrides {
        data_dir: Some("rel".into()),
        ..Overrides::default()
    };
    assert_eq!(
        Config::load(Some(&p), &o).unwrap().data_dir,
        PathBuf::from("rel")
    );
    // A relative path to the file itself works from the current directory.
    let cwd = std::env::current_dir().unwrap();
    let rel = pathdiff(&p, &cwd);
    std::fs::write(&p, "data_dir = \"data\"\n").unwrap();
    let c = Config::load(Some(&rel), &Overrides::default()).unwrap();
    assert_eq!(c.data_dir, cwd.join(rel.parent().unwrap()).join("data"));
}

/// `target` relative to `base` through `..` components (both absolute).
fn pathdiff(target: &Path, base: &Path) -> PathBuf {
    let mut up = PathBuf::new();
    for _ in base.components().skip(1) {
        up.push("..");
    }
    up.join(target.strip_prefix("/").unwrap())
}

/// A target reachable from other hosts must say whom it admits.
#[test]
fn an_nvme_listener_off_the_loopback_needs_allowed_hosts() {
    let e = Config::parse("nvme_listen = \"0.0.0.0:4420\"", Path::new("x")).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("0.0.0.0:4420")
            && m.contains("nvme_allowed_hosts")
            && m.contains("nvme_allow_any_host"),
        "{m}"
    );
    assert!(Config::parse("nvme_listen = \"[::]:4420\"", Path::new("x")).is_err());
    for ok in [
            "nvme_listen = \"0.0.0.0:4420\"\nnvme_allowed_hosts = [\"nqn.2014-08.org.nvmexpress:uuid:1\"]",
            "nvme_listen = \"0.0.0.0:4420\"\nnvme_allow_any_host = true",
            "nvme_listen = \"0.0.0.0:4420\"\nnvme_allowed_hosts = []",
            "nvme_listen = \"127.0.0.1:4420\"",
            "nvme_listen = \"[::1]:4420\"",
            "nvme_listen = \"off\"",
            // An external volume without re-export: the target does not run.
            "nvme_listen = \"0.0.0.0:4420\"\nvolume = \"nvme-tcp://h/nqn.a\"",
        ] {
            Config::parse(ok, Path::new("x")).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    assert!(Config::parse(
        "nvme_allowed_hosts = [\"nqn.a\"]\nnvme_allow_any_host = true",
        Path::new("x")
    )
    .is_err());
    // A flag moves the listener: checked after the flags too.
    let o = Overrides {
        nvme_listen: Some("0.0.0.0:4420".parse().unwrap()),
        ..Overrides::default()
    };
    assert!(Config::load(None, &o).is_err());
}

#[test]
fn nfs_and_nvme_reachability_that_differ_are_warned_about() {
    let warn = |t: &str| {
        Config::parse(t, Path::new("x"))
            .unwrap()
            .reachability_warnings()
    };
    assert!(warn("").is_empty());
    let any = "\n[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\n";
    let w = warn(&format!("listen = \"0.0.0.0:2049\"{any}"));
    assert!(w.len() == 1 && w[0].contains("fall back"), "{w:?}");
    let w = warn(&format!(
        "listen = \"0.0.0.0:2049\"\nnvme_listen = \"off\"{any}"
    ));
    assert!(w.len() == 1 && w[0].contains("off"), "{w:?}");
    // The built-in exports admit this machine only: a remote listener is told so.
    let w = warn("listen = \"0.0.0.0:2049\"\nnvme_listen = \"off\"");
    assert!(
        w.len() == 2 && w[0].contains("admit only this machine"),
        "{w:?}"
    );
    let w = warn("nvme_listen = \"0.0.0.0:4420\"\nnvme_allow_any_host = true");
    assert!(w.len() == 1 && w[0].contains("cannot mount"), "{w:?}");
    assert!(warn(&format!(
            "listen = \"0.0.0.0:2049\"\nnvme_listen = \"0.0.0.0:4420\"\nnvme_allow_any_host = true{any}"
        ))
        .is_empty());
    // An external volume: its target is not ours to judge.
    assert!(warn(&format!(
        "listen = \"0.0.0.0:2049\"\nvolume = \"nvme-tcp://h/nqn.a\"{any}"
    ))
    .is_empty());
}

/// SIGHUP applies log_level and names every other changed key.
#[test]
fn a_reload_applies_log_level_and_names_the_rest() {
    let old = Config::default();
    let new = Config::parse(
        "log_level = \"debug\"\nlisten = \"127.0.0.1:3049\"\nnvme_listen = \"off\"\n\
             metrics_listen = \"127.0.0.1:9400\"\nlayout_types = [\"block\", \"scsi\"]\n\
             [[exports]]\n[[exports.clients]]\nhosts = [\"10.0.0.0/8\"]\naccess = \"ro\"",
        Path::new("x"),
    )
    .unwrap();
    let plan = reload_plan(&old, &new).unwrap();
    assert_eq!(
        plan.apply.iter().map(|a| &a.0[..]).collect::<Vec<_>>(),
        ["exports", "log_level"]
    );
    assert_eq!(
        plan.apply[1],
        (
            "log_level".to_string(),
            "\"info\"".to_string(),
            "\"debug\"".to_string()
        )
    );
    assert!(
        plan.apply[0].2.contains("10.0.0.0/8"),
        "{:?}",
        plan.apply[0]
    );
    assert_eq!(
        plan.restart,
        vec!["layout_types", "listen", "metrics_listen", "nvme_listen"]
    );
    assert_eq!(reload_plan(&old, &old).unwrap(), ReloadPlan::default());
    // Once applied, the reloadable keys no longer differ; the others still do.
    let mut running = old.clone();
    running.apply_reloadable(&new);
    let again = reload_plan(&running, &new).unwrap();
    assert!(again.apply.is_empty(), "{again:?}");
    assert_eq!(again.restart, plan.restart);
    // Every key of the file takes part (a new key cannot be silently ignored).
    let keys = match toml::Value::try_from(Config {
        volume: Some("/v".into()),
        metadata_volume: Some("/m".into()),
        grace_seconds: Some(1),
        nvme_allowed_hosts: Some(vec![]),
        nvme_advertise: Some("127.0.0.1:1".parse().unwrap()),
        fence_command: Some("f".into()),
        metrics_listen: Some("127.0.0.1:1".parse().unwrap()),
        ..Config::default()
    })
    .unwrap()
    {
        toml::Value::Table(t) => t.len(),
        v => panic!("{v:?}"),
    };
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pnfsd.toml"))
            .unwrap();
    // The plain keys come before the first table (`[[exports]]`), which documents itself.
    let plain = example
        .lines()
        .take_while(|l| !l.trim_start_matches("# ").starts_with("[["))
        .filter_map(|l| l.trim_start_matches("# ").split_once(" = "))
        .filter(|(k, _)| !k.contains(' ') && !k.is_empty())
        .map(|(k, _)| k)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let tables = usize::from(example.lines().any(|l| l == "[[exports]]"));
    assert_eq!(
        keys,
        plain + tables,
        "deploy/pnfsd.toml documents every key"
    );
    assert!(Config::parse("log_level = \"info,[\"", Path::new("x")).is_err());
}

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(
        &p,
        "listen = \"127.0.0.1:3049\"\nlease_seconds = 20\ndata_dir = \"/a\"\n",
    )
    .unwrap();
    let c = Config::load(Some(&p), &Overrides::default()).unwrap();
    assert_eq!((c.listen.port(), c.lease_seconds), (3049, 20));
    let o = Overrides {
        data_dir: Some("/b".into()),
        listen: Some("127.0.0.1:4049".parse().unwrap()),
        nvme_listen: Some("127.0.0.1:4421".parse().unwrap()),
        no_nvme: false,
        lease_seconds: Some(60),
        metrics_listen: None,
        ..Overrides::default()
    };
    let c = Config::load(Some(&p), &o).unwrap();
    assert_eq!((c.listen.port(), c.lease_seconds), (4049, 60));
    // The grace period follows the lease unless the file sets it.
    assert_eq!(c.nfs_options().grace_seconds, 60);
    assert_eq!(c.volume_path(), PathBuf::from("/b/volume.img"));
    assert_eq!(c.nvme_listen.map(|a| a.port()), Some(4421));
    let off = Overrides {
        no_nvme: true,
        ..o.clone()
    };
    assert_eq!(Config::load(Some(&p), &off).unwrap().nvme_listen, None);
    assert!(Config::load(Some(&dir.path().join("missing.toml")), &o).is_err());
    assert!(Config::load(
        None,
        &Overrides {
            lease_seconds: Some(0),
            ..o
        }
    )
    .is_err());
}

#[test]
fn an_external_volume_turns_the_embedded_target_off() {
    let c = Config::default();
    assert!(matches!(c.volume_source().unwrap(), VolumeSource::File(_)));
    assert_eq!(c.embedded_target(), c.nvme_listen);
    let text = "volume = \"nvme-tcp://10.1.2.3/nqn.2014-08.org.example:vol?nsid=2\"\n";
    let c = Config::parse(text, Path::new("x")).unwrap();
    match c.volume_source().unwrap() {
        VolumeSource::Nvme(s) => assert_eq!((s.port, s.nsid), (4420, 2)),
        v => panic!("{v:?}"),
    }
    assert_eq!(c.embedded_target(), None);
    let c = Config::parse(&format!("{text}nvme_reexport = true\n"), Path::new("x")).unwrap();
    assert_eq!(c.embedded_target(), c.nvme_listen);
    assert!(c.embedded_target().is_some());
    for bad in [
        "volume = \"nvme-tcp://10.1.2.3/vol\"",
        "volume = \"nvme-tcp://10.1.2.3/nqn.a?nsid=0\"",
    ] {
        assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
    }
}

/// `metadata_volume`: unset by default; a relative path is the config file's; it needs
/// `volume` and another device; `--metadata-volume` overrides it.
#[test]
fn metadata_volume_key_and_flag() {
    assert_eq!(Config::default().metadata_volume_source().unwrap(), None);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(
        &p,
        "volume = \"/srv/data.img\"\nmetadata_volume = \"meta.img\"\n",
    )
    .unwrap();
    let c = Config::load(Some(&p), &Overrides::default()).unwrap();
    assert_eq!(
        c.metadata_volume_source().unwrap(),
        Some(VolumeSource::File(dir.path().join("meta.img")))
    );
    let url = "nvme-tcp://10.0.0.5/nqn.2014-08.org.example:meta";
    let o = Overrides {
        metadata_volume: Some(url.into()),
        ..Overrides::default()
    };
    let c = Config::load(Some(&p), &o).unwrap();
    assert!(matches!(
        c.metadata_volume_source().unwrap(),
        Some(VolumeSource::Nvme(_))
    ));
    for bad in [
        "metadata_volume = \"/m.img\"",
        "volume = \"/v.img\"\nmetadata_volume = \"/v.img\"",
    ] {
        assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
    }
}
