//! The discovery controller's one page: the Discovery Log (Get Log Page 70h, NVMe-oF 1.1
//! §5.3), listing the NVM subsystem on the address and port the host reached us on, so that
//! `nvme discover` followed by `nvme connect-all` works.

use super::Controller;
use bytecodec::{put_u16_le, put_u64_le};
use std::net::SocketAddr;

const HEADER: usize = 1024;
const ENTRY: usize = 1024;

/// ASCII fields NUL-padded, as Linux nvmet fills them (hosts use them verbatim as the
/// connect address: `nvme connect-all`).
fn put_str(b: &mut [u8], s: &str) {
    b.fill(0);
    let n = s.len().min(b.len() - 1);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
}

pub(crate) fn log_page(c: &Controller, local: SocketAddr) -> Vec<u8> {
    let local = c.subsys.advertise.unwrap_or(local);
    let mut b = vec![0u8; HEADER + ENTRY];
    put_u64_le(&mut b, 0, 1); // GENCTR: the list never changes
    put_u64_le(&mut b, 8, 1); // NUMREC
    let e = &mut b[HEADER..];
    e[0] = 3; // TRTYPE: TCP
    e[1] = if local.is_ipv4() { 1 } else { 2 }; // ADRFAM
    e[2] = 2; // SUBTYPE: NVM subsystem
    e[3] = 0x02; // TREQ: secure channel not required
    put_u16_le(e, 4, 1); // PORTID
    put_u16_le(e, 6, 0xFFFF); // CNTLID: dynamic model
    e[8..10].copy_from_slice(&32u16.to_le_bytes()); // ASQSZ
                                                    // Entry layout (NVMe-oF 1.1 Figure 38): TRSVCID 32..64, SUBNQN 256..512,
                                                    // TRADDR 512..768, TSAS 768..1024 (TCP: SECTYPE byte 0 = 0, no security).
    put_str(&mut e[32..64], &local.port().to_string());
    put_str(&mut e[256..512], &c.subsys.nqn);
    put_str(&mut e[512..768], &local.ip().to_string());
    b
}
