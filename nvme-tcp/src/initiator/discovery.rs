//! `nvme discover` for our initiator.

use super::{le16, le64, text, DiscoveryEntry, Initiator, InitiatorConfig};
use crate::error::Error;
use std::net::SocketAddr;

/// `nvme discover`: reads the Discovery Log from the discovery controller at `addr`.
pub async fn discover(addr: SocketAddr, hostnqn: &str) -> Result<Vec<DiscoveryEntry>, Error> {
    let mut cfg = InitiatorConfig::new(crate::DISCOVERY_NQN, hostnqn);
    cfg.io_queues = 0;
    cfg.kato_ms = 0;
    let ini = Initiator::connect(addr, cfg).await?;
    let hdr = ini.get_log_page(0x70, 0, 0, 1024).await?;
    let numrec = le64(&hdr, 8)?.min(64) as u32;
    let mut out = Vec::new();
    if numrec > 0 {
        let all = ini.get_log_page(0x70, 0, 1024, numrec * 1024).await?;
        // Whole 1,024-byte entries only (NVMe Base 2.0 Figure 294).
        for e in all.chunks_exact(1024) {
            out.push(DiscoveryEntry {
                trtype: e[0],
                adrfam: e[1],
                subtype: e[2],
                portid: le16(e, 4)?,
                cntlid: le16(e, 6)?,
                trsvcid: text(&e[32..64]),
                subnqn: text(&e[256..512]),
                traddr: text(&e[512..768]),
            });
        }
    }
    ini.disconnect().await?;
    Ok(out)
}
