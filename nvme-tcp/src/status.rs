//! NVMe completion status (NVMe Base 2.0 §4.6.1.2) and every mapping of an error to a
//! status (docs/design.md, house rule 3: each wire status is mapped in one file).

use std::fmt;
use std::io;

/// The 15-bit Status field of a completion queue entry, without the phase tag:
/// bits 7:0 SC, 10:8 SCT, 12:11 CRD, 13 More, 14 DNR.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub u16);

/// Status code types (SCT).
pub mod sct {
    pub const GENERIC: u8 = 0;
    pub const COMMAND_SPECIFIC: u8 = 1;
    pub const MEDIA: u8 = 2;
}

const DNR: u16 = 1 << 14;

impl Status {
    /// A status with the Do Not Retry bit set: our errors are deterministic.
    pub const fn new(sct: u8, sc: u8) -> Self {
        Status(((sct as u16 & 7) << 8) | sc as u16 | DNR)
    }
    pub const SUCCESS: Status = Status(0);
    // Generic command status (SCT 0).
    pub const INVALID_OPCODE: Status = Status::new(0, 0x01);
    pub const INVALID_FIELD: Status = Status::new(0, 0x02);
    pub const CID_CONFLICT: Status = Status::new(0, 0x03);
    pub const DATA_TRANSFER_ERROR: Status = Status::new(0, 0x04);
    pub const INTERNAL: Status = Status::new(0, 0x06);
    pub const ABORT_REQUESTED: Status = Status::new(0, 0x07);
    pub const SQ_DELETED: Status = Status::new(0, 0x08);
    pub const INVALID_NS: Status = Status::new(0, 0x0B);
    pub const CMD_SEQ_ERROR: Status = Status::new(0, 0x0C);
    pub const SGL_DATA_LEN_INVALID: Status = Status::new(0, 0x0F);
    pub const SGL_TYPE_INVALID: Status = Status::new(0, 0x11);
    pub const SGL_OFFSET_INVALID: Status = Status::new(0, 0x16);
    /// Retryable: a data digest failed (NVMe/TCP 1.0 §3.6.2.x).
    pub const TRANSIENT_TRANSPORT: Status = Status(0x22);
    pub const LBA_OUT_OF_RANGE: Status = Status::new(0, 0x80);
    pub const CAPACITY_EXCEEDED: Status = Status::new(0, 0x81);
    pub const RESERVATION_CONFLICT: Status = Status::new(0, 0x83);
    // Command specific status (SCT 1).
    pub const INVALID_QUEUE_ID: Status = Status::new(1, 0x01);
    pub const INVALID_QUEUE_SIZE: Status = Status::new(1, 0x02);
    pub const ABORT_LIMIT: Status = Status::new(1, 0x03);
    pub const AER_LIMIT: Status = Status::new(1, 0x05);
    pub const INVALID_LOG_PAGE: Status = Status::new(1, 0x09);
    pub const FEATURE_NOT_SAVEABLE: Status = Status::new(1, 0x0D);
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::new(1, 0x0E);
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::new(1, 0x80);
    pub const CONNECT_CTRL_BUSY: Status = Status::new(1, 0x81);
    pub const CONNECT_INVALID_PARAM: Status = Status::new(1, 0x82);
    pub const CONNECT_INVALID_HOST: Status = Status::new(1, 0x84);
    // Media and data integrity errors (SCT 2).
    pub const WRITE_FAULT: Status = Status::new(2, 0x80);
    /// Access Denied (NVMe Base 2.0 Figure 103, SCT 2h SC 86h): the host may not touch these
    /// blocks (the MDS's own, `TargetConfig::mds_blocks`).
    pub const ACCESS_DENIED: Status = Status::new(2, 0x86);
    pub const UNRECOVERED_READ: Status = Status::new(2, 0x81);

    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }
    pub fn sc(self) -> u8 {
        self.0 as u8
    }
    pub fn dnr(self) -> bool {
        self.0 & DNR != 0
    }
    pub fn is_success(self) -> bool {
        self.sct() == 0 && self.sc() == 0
    }
    /// Same SCT and SC, ignoring DNR/More/CRD.
    pub fn same_code(self, other: Status) -> bool {
        self.sct() == other.sct() && self.sc() == other.sc()
    }
    /// The 16-bit CQE word: status shifted over the phase tag (phase is 0 on fabrics).
    pub fn to_wire(self) -> u16 {
        self.0 << 1
    }
    pub fn from_wire(w: u16) -> Self {
        Status(w >> 1)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Status(sct {:#x}, sc {:#04x}{})",
            self.sct(),
            self.sc(),
            if self.dnr() { ", dnr" } else { "" }
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match (self.sct(), self.sc()) {
            (0, 0x00) => "success",
            (0, 0x01) => "invalid opcode",
            (0, 0x02) => "invalid field",
            (0, 0x04) => "data transfer error",
            (0, 0x06) => "internal error",
            (0, 0x0B) => "invalid namespace",
            (0, 0x0C) => "command sequence error",
            (0, 0x0F) => "data SGL length invalid",
            (0, 0x22) => "transient transport error",
            (0, 0x80) => "LBA out of range",
            (0, 0x83) => "reservation conflict",
            (1, 0x09) => "invalid log page",
            (1, 0x82) => "connect invalid parameters",
            (1, 0x84) => "connect invalid host",
            (2, 0x80) => "write fault",
            (2, 0x81) => "unrecovered read error",
            _ => "status",
        };
        write!(f, "{name} ({:?})", self)
    }
}

/// A failed backend write maps to Write Fault, as FreeBSD nvmfd does for failed flushes
/// (docs/design.md, house rule 3).
pub fn write_error(e: &io::Error) -> Status {
    tracing::warn!("backend write/flush failed: {e}");
    Status::WRITE_FAULT
}

/// A failed backend read maps to Unrecovered Read Error.
pub fn read_error(e: &io::Error) -> Status {
    tracing::warn!("backend read failed: {e}");
    Status::UNRECOVERED_READ
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip_and_fields() {
        let s = Status::RESERVATION_CONFLICT;
        assert_eq!(s.sct(), 0);
        assert_eq!(s.sc(), 0x83);
        assert!(s.dnr());
        assert_eq!(Status::from_wire(s.to_wire()), s);
        assert_eq!(Status::CONNECT_INVALID_HOST.sct(), 1);
        assert!(Status::SUCCESS.is_success());
        assert!(!Status::TRANSIENT_TRANSPORT.dnr());
    }
}
