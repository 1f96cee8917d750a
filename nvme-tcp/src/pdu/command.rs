//! The 64-byte submission queue entry, the 16-byte completion queue entry, SGL descriptors,
//! opcodes and the Fabrics Connect data (NVMe Base 2.0 §4.2, §4.6; NVMe-oF 1.1 §3.3, §4.x).

use crate::status::Status;
use bytecodec::{
    get_array, get_u16_le, get_u32_le, get_u64_le, put_bytes, put_u16_le, put_u32_le, put_u64_le,
};

/// Data direction encoded in bits 1:0 of every opcode (and of the Fabrics command type).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DataDir {
    None,
    HostToCtrl,
    CtrlToHost,
    Both,
}

/// Admin opcodes we know by name (docs/design.md, house rule 2: unknown values still
/// decode).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AdminOpc(pub u8);
impl AdminOpc {
    pub const GET_LOG_PAGE: AdminOpc = AdminOpc(0x02);
    pub const IDENTIFY: AdminOpc = AdminOpc(0x06);
    pub const ABORT: AdminOpc = AdminOpc(0x08);
    pub const SET_FEATURES: AdminOpc = AdminOpc(0x09);
    pub const GET_FEATURES: AdminOpc = AdminOpc(0x0A);
    pub const ASYNC_EVENT: AdminOpc = AdminOpc(0x0C);
    pub const KEEP_ALIVE: AdminOpc = AdminOpc(0x18);
    pub const FABRICS: AdminOpc = AdminOpc(0x7F);
}

/// NVM command set I/O opcodes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IoOpc(pub u8);
impl IoOpc {
    pub const FLUSH: IoOpc = IoOpc(0x00);
    pub const WRITE: IoOpc = IoOpc(0x01);
    pub const READ: IoOpc = IoOpc(0x02);
    pub const WRITE_ZEROES: IoOpc = IoOpc(0x08);
    pub const DSM: IoOpc = IoOpc(0x09);
    pub const RESV_REGISTER: IoOpc = IoOpc(0x0D);
    pub const RESV_REPORT: IoOpc = IoOpc(0x0E);
    pub const RESV_ACQUIRE: IoOpc = IoOpc(0x11);
    pub const RESV_RELEASE: IoOpc = IoOpc(0x15);
    pub const FABRICS: IoOpc = IoOpc(0x7F);
}

/// Fabrics command types (byte 4 of a Fabrics command, NVMe-oF 1.1 §3.3).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FcType(pub u8);
impl FcType {
    pub const PROPERTY_SET: FcType = FcType(0x00);
    pub const CONNECT: FcType = FcType(0x01);
    pub const PROPERTY_GET: FcType = FcType(0x04);
    pub const AUTH_SEND: FcType = FcType(0x05);
    pub const AUTH_RECV: FcType = FcType(0x06);
    pub const DISCONNECT: FcType = FcType(0x08);
}

/// SGL descriptor identifiers (type << 4 | subtype) that NVMe/TCP uses (NVMe/TCP 1.0 §3.3.2).
pub mod sgl_id {
    /// Data Block, subtype Offset: in-capsule data at `addr` bytes into the capsule data.
    pub const DATA_OFFSET: u8 = 0x01;
    /// Transport Data Block, transport specific: data moves in H2CData/C2HData PDUs.
    pub const TRANSPORT: u8 = 0x5A;
}

/// PSDT (flags bits 7:6) = 01b: SGLs for data.
pub const FLAGS_PSDT_SGL: u8 = 0x40;

/// One SGL descriptor (16 bytes at SQE offset 24).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Sgl {
    pub addr: u64,
    pub len: u32,
    pub id: u8,
}

/// A submission queue entry, kept as its 64 wire bytes with typed accessors. Every offset
/// an accessor is given is a constant of the format (a dword index below 16, the SGL at 24),
/// so the reads cannot miss; one that did would read 0 and a write would panic, both bugs
/// in this crate rather than anything a peer sends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sqe(pub [u8; Sqe::LEN]);

impl std::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sqe(opc {:#04x}, cid {}, nsid {}, cdw10 {:#x})",
            self.opcode(),
            self.cid(),
            self.nsid(),
            self.cdw(10)
        )
    }
}

impl Sqe {
    pub const LEN: usize = 64;

    pub fn new(opcode: u8) -> Self {
        let mut b = [0u8; Self::LEN];
        b[0] = opcode;
        Sqe(b)
    }
    /// A Fabrics command of the given type.
    pub fn fabrics(fctype: FcType) -> Self {
        let mut s = Sqe::new(AdminOpc::FABRICS.0);
        s.0[4] = fctype.0;
        s
    }
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    pub fn flags(&self) -> u8 {
        self.0[1]
    }
    pub fn set_flags(&mut self, f: u8) {
        self.0[1] = f;
    }
    #[inline]
    pub fn cid(&self) -> u16 {
        get_u16_le(&self.0, 2).unwrap_or(0)
    }
    #[inline]
    pub fn set_cid(&mut self, cid: u16) {
        put_u16_le(&mut self.0, 2, cid);
    }
    pub fn nsid(&self) -> u32 {
        self.cdw(1)
    }
    pub fn set_nsid(&mut self, nsid: u32) {
        self.set_cdw(1, nsid);
    }
    pub fn fctype(&self) -> FcType {
        FcType(self.0[4])
    }
    pub fn is_fabrics(&self) -> bool {
        self.opcode() == AdminOpc::FABRICS.0
    }
    /// Command dword `i` (0..16) at byte offset 4*i.
    #[inline]
    pub fn cdw(&self, i: usize) -> u32 {
        get_u32_le(&self.0, i * 4).unwrap_or(0)
    }
    #[inline]
    pub fn set_cdw(&mut self, i: usize, v: u32) {
        put_u32_le(&mut self.0, i * 4, v);
    }
    #[inline]
    pub fn u64_at(&self, off: usize) -> u64 {
        get_u64_le(&self.0, off).unwrap_or(0)
    }
    #[inline]
    pub fn set_u64_at(&mut self, off: usize, v: u64) {
        put_u64_le(&mut self.0, off, v);
    }
    pub fn sgl(&self) -> Sgl {
        Sgl {
            addr: self.u64_at(24),
            len: self.cdw(8),
            id: self.0[39],
        }
    }
    pub fn set_sgl(&mut self, sgl: Sgl) {
        self.set_u64_at(24, sgl.addr);
        self.set_cdw(8, sgl.len);
        self.0[36..39].fill(0);
        self.0[39] = sgl.id;
        self.0[1] = (self.0[1] & 0x3F) | FLAGS_PSDT_SGL;
    }
    /// Direction of the data this command moves: opcode bits 1:0, or the Fabrics type's.
    pub fn data_dir(&self) -> DataDir {
        let bits = if self.is_fabrics() {
            self.0[4]
        } else {
            self.opcode()
        };
        match bits & 3 {
            0 => DataDir::None,
            1 => DataDir::HostToCtrl,
            2 => DataDir::CtrlToHost,
            _ => DataDir::Both,
        }
    }
}

/// A completion queue entry (16 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Cqe {
    pub dw0: u32,
    pub dw1: u32,
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
}

impl Cqe {
    pub const LEN: usize = 16;
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
    /// The wire form: DW0, DW1, SQHD, SQID, CID, then the status with the phase tag (bit 0,
    /// 0 on fabrics) at 14.
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_u32_le(&mut b, 0, self.dw0);
        put_u32_le(&mut b, 4, self.dw1);
        put_u16_le(&mut b, 8, self.sqhd);
        put_u16_le(&mut b, 10, self.sqid);
        put_u16_le(&mut b, 12, self.cid);
        put_u16_le(&mut b, 14, self.status.to_wire());
        b
    }
    /// Every offset is inside the 16-byte array, so no read misses (the `unwrap_or`s never
    /// apply).
    #[inline]
    pub fn decode(b: &[u8; Self::LEN]) -> Self {
        let u16_at = |o: usize| get_u16_le(b, o).unwrap_or(0);
        let u32_at = |o: usize| get_u32_le(b, o).unwrap_or(0);
        Cqe {
            dw0: u32_at(0),
            dw1: u32_at(4),
            sqhd: u16_at(8),
            sqid: u16_at(10),
            cid: u16_at(12),
            status: Status::from_wire(u16_at(14)),
        }
    }
}

/// Connect command fields (NVMe-oF 1.1 §3.3 Figure 20): RECFMT at 40, QID 42, SQSIZE 44,
/// CATTR 46, KATO 48.
pub mod connect_off {
    pub const RECFMT: usize = 40;
    pub const QID: usize = 42;
    pub const SQSIZE: usize = 44;
    pub const CATTR: usize = 46;
    pub const KATO: usize = 48;
}

/// The 1024-byte Connect data (NVMe-oF 1.1 Figure 21).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ConnectData {
    pub hostid: [u8; 16],
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
}

impl ConnectData {
    pub const LEN: usize = 1024;
    pub const OFF_CNTLID: u16 = 16;
    pub const OFF_SUBNQN: u16 = 256;
    pub const OFF_HOSTNQN: u16 = 512;

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; Self::LEN];
        put_bytes(&mut b, 0, &self.hostid);
        put_u16_le(&mut b, 16, self.cntlid);
        put_nqn(&mut b[256..512], &self.subnqn);
        put_nqn(&mut b[512..768], &self.hostnqn);
        b
    }

    /// Decodes the data; an NQN without a NUL within its 256 bytes or that is not UTF-8 is
    /// invalid, and the error names its byte offset (for Connect's IPO).
    pub fn decode(b: &[u8]) -> Result<Self, u16> {
        if b.len() < Self::LEN {
            return Err(0);
        }
        let hostid = get_array(b, 0).map_err(|_| 0u16)?;
        let cntlid = get_u16_le(b, 16).map_err(|_| 0u16)?;
        let subnqn = get_nqn(&b[256..512]).ok_or(Self::OFF_SUBNQN)?;
        let hostnqn = get_nqn(&b[512..768]).ok_or(Self::OFF_HOSTNQN)?;
        Ok(ConnectData {
            hostid,
            cntlid,
            subnqn,
            hostnqn,
        })
    }
}

fn put_nqn(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len() - 1);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn get_nqn(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|&c| c == 0)?;
    if end == 0 {
        return None;
    }
    std::str::from_utf8(&b[..end]).ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqe_fields() {
        let mut s = Sqe::new(IoOpc::WRITE.0);
        s.set_cid(0x1234);
        s.set_nsid(7);
        s.set_cdw(10, 99);
        s.set_sgl(Sgl {
            addr: 0,
            len: 4096,
            id: sgl_id::TRANSPORT,
        });
        assert_eq!(s.cid(), 0x1234);
        assert_eq!(s.nsid(), 7);
        assert_eq!(s.cdw(10), 99);
        assert_eq!(s.sgl().len, 4096);
        assert_eq!(s.sgl().id, 0x5A);
        assert_eq!(s.flags() & 0xC0, 0x40);
        assert_eq!(s.data_dir(), DataDir::HostToCtrl);
        assert_eq!(Sqe::new(IoOpc::READ.0).data_dir(), DataDir::CtrlToHost);
        assert_eq!(
            Sqe::fabrics(FcType::CONNECT).data_dir(),
            DataDir::HostToCtrl
        );
        assert_eq!(Sqe::fabrics(FcType::PROPERTY_GET).data_dir(), DataDir::None);
    }

    #[test]
    fn cqe_round_trip() {
        let c = Cqe {
            dw0: 1,
            dw1: 2,
            sqhd: 3,
            sqid: 4,
            cid: 5,
            status: Status::INVALID_FIELD,
        };
        let mut v = Vec::new();
        c.encode(&mut v);
        let mut a = [0u8; 16];
        a.copy_from_slice(&v);
        assert_eq!(Cqe::decode(&a), c);
    }

    #[test]
    fn connect_data_round_trip_and_bad_nqn() {
        let d = ConnectData {
            hostid: [9; 16],
            cntlid: 0xFFFF,
            subnqn: "nqn.a".into(),
            hostnqn: "nqn.b".into(),
        };
        let b = d.encode();
        assert_eq!(ConnectData::decode(&b), Ok(d));
        let mut bad = b.clone();
        bad[256..512].fill(b'x');
        assert_eq!(ConnectData::decode(&bad), Err(256));
    }
}
