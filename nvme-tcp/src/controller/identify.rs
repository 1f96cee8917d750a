//! Identify data structures (NVMe Base 2.0 §5.17.2, NVMe-oF 1.1 §4.1), built byte by byte
//! at the offsets the spec gives. Every field the Linux host reads is set on purpose
//! (docs/design.md §6).

use super::{Controller, CtrlKind, DISCOVERY_NQN, IN_CAPSULE_DATA, MDTS, MQES, VERSION};
use crate::namespace::Namespace;
use bytecodec::{put_bytes as put, put_u16_le, put_u32_le, put_u64_le};

/// Identify Controller CTRATT (bytes 99:96) bits we set (NVMe Base 2.0 §5.17.2).
pub(crate) const CTRATT_HID_128: u32 = 1 << 0;
pub(crate) const CTRATT_TBKAS: u32 = 1 << 6;

pub(crate) const LEN: usize = 4096;

/// ASCII, space padded (SN, MN, FR).
fn put_ascii(b: &mut [u8], off: usize, len: usize, s: &str) {
    let f = &mut b[off..off + len];
    f.fill(b' ');
    let n = s.len().min(len);
    f[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Identify Controller (CNS 01h).
pub(crate) fn controller(c: &Controller) -> Vec<u8> {
    let s = &c.subsys;
    let io = c.kind == CtrlKind::Io;
    let mut b = vec![0u8; LEN];
    put_ascii(&mut b, 4, 20, &s.serial); // SN
    put_ascii(&mut b, 24, 40, &s.model); // MN
    put_ascii(&mut b, 64, 8, env!("CARGO_PKG_VERSION")); // FR
    b[72] = 6; // RAB

    // CMIC bit 1: the subsystem may have several controllers (one per host connection);
    // without it Linux refuses a second controller of the same subsystem.
    b[76] = if io { 0x02 } else { 0 };
    b[77] = MDTS;
    put_u16_le(&mut b, 78, c.cntlid); // CNTLID: the one Connect returned
    put_u32_le(&mut b, 80, VERSION); // VER

    // CTRATT bit 0: 128-bit Host Identifiers (fabrics hosts send one in Connect), which also
    // makes Reservation Report use the extended data structure; bit 6: Traffic Based Keep
    // Alive (any command restarts the timer, `Controller::io_traffic`), as nvmet.
    put_u32_le(&mut b, 96, CTRATT_HID_128 | CTRATT_TBKAS);
    b[111] = if io { 1 } else { 2 }; // CNTRLTYPE: I/O or discovery
    b[258] = 3; // ACL: 4 concurrent Aborts
    b[259] = 3; // AERL: 4 outstanding AERs
    b[261] = 0x04; // LPA bit 2: extended Get Log Page (NUMDU, offsets) — nvme discover pages
    put_u16_le(&mut b, 320, 1); // KAS = 100 ms granularity (≠ 0: Linux requires it)
    b[512] = 0x66; // SQES: 64 bytes
    b[513] = 0x44; // CQES: 16 bytes
    put_u16_le(&mut b, 514, MQES + 1); // MAXCMD
    if io {
        put_u32_le(&mut b, 516, s.max_nsid()); // NN

        // ONCS: Dataset Management (2), Write Zeroes (3), Reservations (5).
        put_u16_le(&mut b, 520, 0x002C);
        // VWC: present (bit 0), Flush with NSID FFFFFFFFh supported (bits 2:1 = 11b).
        b[525] = 0x07;
    }
    b[530] = 1; // NVSCC

    // SGLS: SGLs supported (bits 1:0 = 01b, no alignment) and the Data Block address is an
    // offset (bit 20) — how in-capsule data is described.
    put_u32_le(&mut b, 536, (1u32 << 0) | (1 << 20));
    let nqn = if io { s.nqn.as_str() } else { DISCOVERY_NQN };
    let n = nqn.len().min(255);
    put(&mut b, 768, &nqn.as_bytes()[..n]); // SUBNQN

    // NVMe over Fabrics attributes: IOCCSZ/IORCSZ in 16-byte units, ICDOFF = 0 (Linux TCP
    // rejects anything else), FCATT = 0 (dynamic controller model), MSDBD = 1.
    let ioccsz = (64 + IN_CAPSULE_DATA) / 16;
    put_u32_le(&mut b, 1792, ioccsz);
    put_u32_le(&mut b, 1796, 1);
    b[1803] = 1;
    b
}

/// Identify Namespace (CNS 00h) for an active namespace.
pub(crate) fn namespace(ns: &Namespace) -> Vec<u8> {
    let mut b = vec![0u8; LEN];
    let blocks = ns.backend.num_blocks();
    put_u64_le(&mut b, 0, blocks); // NSZE
    put_u64_le(&mut b, 8, blocks); // NCAP
    put_u64_le(&mut b, 16, blocks); // NUSE
    b[25] = 0; // NLBAF: one format
    b[26] = 0; // FLBAS: format 0
    b[30] = 1; // NMIC: may be shared by several controllers (hosts)
    b[31] = rescap(ns);
    put(&mut b, 104, &ns.ids.nguid); // NGUID
    put(&mut b, 120, &ns.ids.eui64); // EUI64
    let lbads = ns.backend.block_size().trailing_zeros();
    put_u32_le(&mut b, 128, lbads << 16); // LBAF0: MS = 0, LBADS, RP = 0
    b
}

/// RESCAP: types 1–6 (bits 1–6), IEKEY semantics of 1.3+ (bit 7), and Persist Through Power
/// Loss (bit 0) when the namespace keeps its reservation state (`TargetConfig::ptpl_dir`).
fn rescap(ns: &Namespace) -> u8 {
    0xFE | crate::reservation::command::ptpl_supported(ns) as u8
}

/// I/O Command Set Independent Identify Namespace (CNS 08h).
pub(crate) fn namespace_cs_indep(ns: &Namespace) -> Vec<u8> {
    let mut b = vec![0u8; LEN];
    b[1] = 1; // NMIC
    b[2] = rescap(ns);
    b[14] = 1; // NSTAT: namespace ready
    b
}

/// Active Namespace ID list (CNS 02h): NSIDs greater than `after`, ascending, ≤ 1024.
pub(crate) fn active_list(c: &Controller, after: u32) -> Vec<u8> {
    let mut b = vec![0u8; LEN];
    for (i, nsid) in c
        .subsys
        .namespaces
        .keys()
        .filter(|&&n| n > after)
        .take(1024)
        .enumerate()
    {
        put_u32_le(&mut b, i * 4, *nsid);
    }
    b
}

/// Namespace Identification Descriptor list (CNS 03h): EUI-64 (type 1) and NGUID (2), each as
/// NIDT, NIDL, 2 reserved bytes, NID. No UUID (type 3): see `NamespaceIds`.
pub(crate) fn descriptors(ns: &Namespace) -> Vec<u8> {
    let mut b = vec![0u8; LEN];
    let mut o = 0;
    for (t, id) in [(1u8, &ns.ids.eui64[..]), (2, &ns.ids.nguid[..])] {
        b[o] = t;
        b[o + 1] = id.len() as u8;
        put(&mut b, o + 4, id);
        o += 4 + id.len();
    }
    b
}
