//! Admin commands shared by discovery and I/O controllers (as nvmfd's generic admin loop,
//! docs/design.md, house rule 3): Identify, Get Log Page, Set/Get Features, Keep Alive,
//! Asynchronous Event Request, Abort. Fabrics commands are handled by the connection (they
//! change its state).

use super::{discovery, identify, Cmd, Controller, CtrlKind, Outcome, Reply};
use crate::namespace::lock;
use crate::pdu::AdminOpc;
use crate::status::Status;
use std::net::SocketAddr;

/// Feature identifiers we know.
mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MGMT: u8 = 0x02;
    pub const TEMP_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WC: u8 = 0x06;
    pub const NUM_QUEUES: u8 = 0x07;
    pub const IRQ_COALESCING: u8 = 0x08;
    pub const IRQ_CONFIG: u8 = 0x09;
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    pub const ASYNC_EVENT_CFG: u8 = 0x0B;
    pub const TIMESTAMP: u8 = 0x0E;
    pub const KEEP_ALIVE: u8 = 0x0F;
    pub const HOST_ID: u8 = 0x81;
    pub const RESV_NOTIF_MASK: u8 = 0x82;
    pub const RESV_PERSIST: u8 = 0x83;
}

pub(crate) fn handle(c: &Controller, cmd: &Cmd, local: SocketAddr) -> Outcome {
    // Any admin command counts as host activity for the keep-alive timer.
    c.touch();
    let opc = AdminOpc(cmd.sqe.opcode());
    if !c.ready() {
        return Outcome::Reply(Reply::err(Status::CMD_SEQ_ERROR));
    }
    let r = match opc {
        AdminOpc::IDENTIFY => identify(c, cmd),
        AdminOpc::GET_LOG_PAGE => get_log_page(c, cmd, local),
        AdminOpc::SET_FEATURES => set_features(c, cmd),
        AdminOpc::GET_FEATURES => get_features(c, cmd),
        AdminOpc::KEEP_ALIVE => Ok(Reply::ok()),
        // Abort: we complete commands quickly and never abort one: dw0 bit 0 = not aborted.
        AdminOpc::ABORT => Ok(Reply::dw0(1)),
        AdminOpc::ASYNC_EVENT => {
            let mut st = lock(&c.state);
            if st.aers.len() >= 4 {
                Err(Status::AER_LIMIT)
            } else {
                // Left pending: we never raise events (OAES = 0), the host just waits.
                st.aers.push(cmd.sqe.cid());
                return Outcome::Pending;
            }
        }
        _ => Err(Status::INVALID_OPCODE),
    };
    Outcome::Reply(r.into())
}

fn identify(c: &Controller, cmd: &Cmd) -> Result<Reply, Status> {
    let cns = cmd.sqe.cdw(10) as u8;
    let csi = (cmd.sqe.cdw(11) >> 24) as u8;
    let nsid = cmd.sqe.nsid();
    if c.kind == CtrlKind::Discovery && cns != 0x01 {
        return Err(Status::INVALID_FIELD);
    }
    let ns = || -> Result<Option<&std::sync::Arc<crate::namespace::Namespace>>, Status> {
        if nsid == 0 || nsid == 0xFFFF_FFFF || nsid > c.subsys.max_nsid() {
            return Err(Status::INVALID_NS);
        }
        Ok(c.subsys.namespaces.get(&nsid))
    };
    let data = match cns {
        0x00 => ns()?
            .map(|n| identify::namespace(n))
            .unwrap_or_else(|| vec![0; identify::LEN]),
        0x01 => identify::controller(c),
        0x02 => {
            if nsid >= 0xFFFF_FFFE {
                return Err(Status::INVALID_NS);
            }
            identify::active_list(c, nsid)
        }
        0x03 => identify::descriptors(ns()?.ok_or(Status::INVALID_NS)?),
        // I/O command set specific structures for the NVM command set carry nothing we
        // limit (no WZSL/DMRL limits, no extended LBA formats): all zero.
        0x05 if csi == 0 => {
            ns()?.ok_or(Status::INVALID_NS)?;
            vec![0; identify::LEN]
        }
        0x06 if csi == 0 => vec![0; identify::LEN],
        0x08 => identify::namespace_cs_indep(ns()?.ok_or(Status::INVALID_NS)?),
        _ => return Err(Status::INVALID_FIELD),
    };
    Ok(Reply::data(data))
}

fn get_log_page(c: &Controller, cmd: &Cmd, local: SocketAddr) -> Result<Reply, Status> {
    let s = &cmd.sqe;
    let lid = s.cdw(10) as u8;
    let numd = (((s.cdw(11) & 0xFFFF) << 16) | (s.cdw(10) >> 16)) as u64 + 1;
    let len = numd * 4;
    let offset = s.cdw(12) as u64 | (s.cdw(13) as u64) << 32;
    if !offset.is_multiple_of(4) || len > super::MAX_TRANSFER as u64 {
        return Err(Status::INVALID_FIELD);
    }
    let page = match (c.kind, lid) {
        (CtrlKind::Discovery, 0x70) => discovery::log_page(c, local),
        (CtrlKind::Io, 0x01) => vec![0; 64], // Error Information: no entries
        (CtrlKind::Io, 0x02) => vec![0; 512], // SMART / Health: nothing to report
        (CtrlKind::Io, 0x03) => vec![0; 512], // Firmware Slot Information
        (CtrlKind::Io, 0x04) => vec![0; 4096], // Changed Namespace List: none
        (CtrlKind::Io, 0x80) => vec![0; 64], // Reservation Notification: none
        _ => return Err(Status::INVALID_LOG_PAGE),
    };
    if offset > page.len() as u64 {
        return Err(Status::INVALID_FIELD);
    }
    let mut out = page[offset as usize..].to_vec();
    out.resize(len as usize, 0);
    Ok(Reply::data(out))
}

fn set_features(c: &Controller, cmd: &Cmd) -> Result<Reply, Status> {
    let s = &cmd.sqe;
    let f = s.cdw(10) as u8;
    if s.cdw(10) & (1 << 31) != 0 {
        return Err(Status::FEATURE_NOT_SAVEABLE);
    }
    let v = s.cdw(11);
    let io = c.kind == CtrlKind::Io;
    if f == fid::RESV_PERSIST && io {
        return set_resv_persist(c, s.nsid(), v & 1 != 0).map(|()| Reply::ok());
    }
    let mut st = lock(&c.state);
    match f {
        fid::NUM_QUEUES if io => {
            let (nsqr, ncqr) = (v & 0xFFFF, v >> 16);
            if nsqr == 0xFFFF || ncqr == 0xFFFF {
                return Err(Status::INVALID_FIELD);
            }
            // Queues come in pairs on fabrics: grant min(requested, our maximum).
            let n = (nsqr.min(ncqr) + 1).min(c.subsys.max_io_queues as u32) as u16;
            st.io_queues = n;
            let g = (n - 1) as u32;
            Ok(Reply::dw0(g | g << 16))
        }
        fid::VOLATILE_WC if io => {
            st.wce = v & 1 != 0;
            Ok(Reply::ok())
        }
        fid::KEEP_ALIVE => {
            // Capped (Limits::max_kato_ms); Get Features reports what was granted. The
            // timer starts (KATO was 0) or takes the new value at once.
            let kato = super::grant_kato(c.kind, v, c.subsys.limits.max_kato_ms);
            drop(st);
            c.set_kato(kato);
            Ok(Reply::ok())
        }
        fid::POWER_MGMT if v & 0x1F != 0 => Err(Status::INVALID_FIELD),
        fid::ASYNC_EVENT_CFG | fid::POWER_MGMT | fid::RESV_PERSIST => {
            st.features.insert(f, v);
            Ok(Reply::ok())
        }
        fid::ARBITRATION
        | fid::TEMP_THRESHOLD
        | fid::ERROR_RECOVERY
        | fid::IRQ_COALESCING
        | fid::IRQ_CONFIG
        | fid::WRITE_ATOMICITY
        | fid::TIMESTAMP
        | fid::RESV_NOTIF_MASK
            if io =>
        {
            st.features.insert(f, v);
            Ok(Reply::ok())
        }
        _ => Err(Status::INVALID_FIELD),
    }
}

/// Set Features Reservation Persistence (FID 83h, namespace specific): one namespace, or
/// every one for NSID FFFFFFFFh.
fn set_resv_persist(c: &Controller, nsid: u32, on: bool) -> Result<(), Status> {
    use crate::reservation::command::set_ptpl;
    if nsid == 0xFFFF_FFFF {
        return c
            .subsys
            .namespaces
            .values()
            .try_for_each(|ns| set_ptpl(ns, on));
    }
    set_ptpl(
        c.subsys.namespaces.get(&nsid).ok_or(Status::INVALID_NS)?,
        on,
    )
}

fn get_features(c: &Controller, cmd: &Cmd) -> Result<Reply, Status> {
    let s = &cmd.sqe;
    let f = s.cdw(10) as u8;
    let sel = (s.cdw(10) >> 8) & 7;
    let io = c.kind == CtrlKind::Io;
    if sel == 3 {
        // Supported capabilities: changeable (bit 2), never saveable; the reservation
        // features are namespace specific (bit 1).
        let ns_specific = if f == fid::RESV_NOTIF_MASK || f == fid::RESV_PERSIST {
            2
        } else {
            0
        };
        return Ok(Reply::dw0(4 | ns_specific));
    }
    if f == fid::RESV_PERSIST && io {
        // Reservation Persistence: the namespace's PTPL state (dword 0 bit 0); its default
        // (and, not saveable, its saved value) is off.
        let ns = c
            .subsys
            .namespaces
            .get(&s.nsid())
            .ok_or(Status::INVALID_NS)?;
        let on = sel == 0 && crate::reservation::command::ptpl(ns);
        return Ok(Reply::dw0(on as u32));
    }
    let st = lock(&c.state);
    let current = sel == 0;
    let v = match f {
        fid::NUM_QUEUES if io => {
            let g = (if current {
                st.io_queues
            } else {
                c.subsys.max_io_queues
            }) as u32
                - 1;
            g | g << 16
        }
        fid::VOLATILE_WC if io => (!current || st.wce) as u32,
        fid::KEEP_ALIVE => {
            if current {
                st.kato_ms
            } else {
                0
            }
        }
        fid::HOST_ID => {
            // EXHID (cdw11 bit 0) must be set: our host identifiers are 128 bits.
            if s.cdw(11) & 1 == 0 {
                return Err(Status::INVALID_FIELD);
            }
            return Ok(Reply::data(c.hostid.to_vec()));
        }
        fid::ASYNC_EVENT_CFG | fid::POWER_MGMT | fid::RESV_PERSIST => {
            if current {
                st.features.get(&f).copied().unwrap_or(0)
            } else {
                0
            }
        }
        fid::ARBITRATION
        | fid::TEMP_THRESHOLD
        | fid::ERROR_RECOVERY
        | fid::IRQ_COALESCING
        | fid::IRQ_CONFIG
        | fid::WRITE_ATOMICITY
        | fid::TIMESTAMP
        | fid::RESV_NOTIF_MASK
            if io =>
        {
            if current {
                st.features.get(&f).copied().unwrap_or(0)
            } else {
                0
            }
        }
        _ => return Err(Status::INVALID_FIELD),
    };
    Ok(Reply::dw0(v))
}
