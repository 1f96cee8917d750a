//! NVMe reservations (NVMe Base 2.0 §8.19), pure state: registrants are hosts (Host
//! Identifier from Connect), shared by all controllers of that host. No I/O here: the
//! commands that change the state run through `command` (one path for the wire and the
//! in-process API), which keeps it on disk through `persist` when the namespace's Persist
//! Through Power Loss state is set (§8.19.x "Persist Through Power Loss", docs/nvme-tcp.md).

use crate::status::Status;
use bytecodec::{put_u16_le, put_u32_le, put_u64_le};

pub(crate) mod command;
pub(crate) mod persist;

/// Reservation types (RTYPE).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RType(pub u8);
impl RType {
    pub const WRITE_EXCLUSIVE: RType = RType(1);
    pub const EXCLUSIVE_ACCESS: RType = RType(2);
    pub const WRITE_EXCLUSIVE_REG_ONLY: RType = RType(3);
    pub const EXCLUSIVE_ACCESS_REG_ONLY: RType = RType(4);
    pub const WRITE_EXCLUSIVE_ALL_REGS: RType = RType(5);
    pub const EXCLUSIVE_ACCESS_ALL_REGS: RType = RType(6);

    fn valid(self) -> bool {
        (1..=6).contains(&self.0)
    }
    /// In the "all registrants" types every registrant is a holder.
    fn all_regs(self) -> bool {
        self.0 == 5 || self.0 == 6
    }
}

/// Reservation Register action (RREGA).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RegisterAction {
    Register = 0,
    Unregister = 1,
    Replace = 2,
}

/// Reservation Acquire action (RACQA).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AcquireAction {
    Acquire = 0,
    Preempt = 1,
    PreemptAndAbort = 2,
}

/// Change Persist Through Power Loss State (CPTPL, Reservation Register CDW10 bits 31:30).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cptpl {
    /// 00b: no change.
    NoChange,
    /// 10b: PTPL state 0, the reservation state is lost at power loss (a restart).
    Off,
    /// 11b: PTPL state 1, registrants and the reservation survive it. The Linux host always
    /// asks for this one (drivers/nvme/host/pr.c `nvme_pr_register`).
    Persist,
}

impl Cptpl {
    /// From CDW10 bits 31:30; 01b is reserved.
    pub fn from_bits(b: u32) -> Result<Cptpl, Status> {
        match b & 3 {
            0 => Ok(Cptpl::NoChange),
            2 => Ok(Cptpl::Off),
            3 => Ok(Cptpl::Persist),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// The CDW10 bits 31:30 of this value.
    pub fn bits(self) -> u32 {
        match self {
            Cptpl::NoChange => 0,
            Cptpl::Off => 2,
            Cptpl::Persist => 3,
        }
    }
}

/// Reservation Release action (RRELA).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReleaseAction {
    Release = 0,
    Clear = 1,
}

/// Which class of command asks for access (Base 2.0 Table "Command Behavior in the Presence
/// of a Reservation": Read class = Read/Compare/Verify; Write class = Write, Write Zeroes,
/// Dataset Management, Flush, Write Uncorrectable).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Access {
    Read,
    Write,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registrant {
    pub hostid: [u8; 16],
    pub key: u64,
    /// Controller that registered (for logs; reports say FFFFh, dynamic model).
    pub cntlid: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Holder {
    rtype: RType,
    hostid: [u8; 16],
}

/// Per-namespace reservation state.
#[derive(Clone, Debug, Default)]
pub struct Reservations {
    generation: u32,
    registrants: Vec<Registrant>,
    holder: Option<Holder>,
    /// Persist Through Power Loss state: whether all of the above survives a restart.
    ptpl: bool,
}

/// Who sends the command.
#[derive(Clone, Copy, Debug)]
pub struct Requester {
    pub hostid: [u8; 16],
    pub cntlid: u16,
}

const CONFLICT: Status = Status::RESERVATION_CONFLICT;

impl Reservations {
    fn find(&self, hostid: &[u8; 16]) -> Option<usize> {
        self.registrants.iter().position(|r| &r.hostid == hostid)
    }

    fn is_holder(&self, hostid: &[u8; 16]) -> bool {
        match self.holder {
            Some(h) if h.rtype.all_regs() => self.find(hostid).is_some(),
            Some(h) => &h.hostid == hostid,
            None => false,
        }
    }

    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Current reservation type, if any.
    pub fn rtype(&self) -> Option<RType> {
        self.holder.map(|h| h.rtype)
    }

    pub fn registrants(&self) -> &[Registrant] {
        &self.registrants
    }

    /// The Persist Through Power Loss state.
    pub fn ptpl(&self) -> bool {
        self.ptpl
    }

    /// Sets the PTPL state (Register's CPTPL, Set Features Reservation Persistence); the
    /// caller checks the namespace can persist (RESCAP bit 0).
    pub fn set_ptpl(&mut self, on: bool) {
        self.ptpl = on;
    }

    /// Checks a key unless IEKEY: a registered host must present its current key.
    fn check_key(&self, who: &Requester, iekey: bool, crkey: u64) -> Result<usize, Status> {
        let i = self.find(&who.hostid).ok_or(CONFLICT)?;
        if !iekey && self.registrants[i].key != crkey {
            return Err(CONFLICT);
        }
        Ok(i)
    }

    /// Removes registrant `i`, dropping the reservation if it held it alone or was the last.
    fn unregister_at(&mut self, i: usize) {
        let r = self.registrants.remove(i);
        if let Some(h) = self.holder {
            let gone = if h.rtype.all_regs() {
                self.registrants.is_empty()
            } else {
                h.hostid == r.hostid
            };
            if gone {
                self.holder = None;
            }
        }
    }

    pub fn register(
        &mut self,
        who: &Requester,
        action: RegisterAction,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
    ) -> Result<(), Status> {
        match action {
            RegisterAction::Register => match self.find(&who.hostid) {
                // Registering again with the same key is a no-op; a different key conflicts.
                Some(i) if self.registrants[i].key == nrkey => Ok(()),
                // ... unless IEKEY is set: then the host's key is replaced, as Replace with
                // IEKEY does (so the host gains nothing it could not have had). This is what
                // the Linux block layer's `pr_register(0, key, PR_FL_IGNORE_KEY)` means (SCSI
                // REGISTER AND IGNORE EXISTING KEY), which its NVMe driver sends as Register
                // with IEKEY: the pNFS SCSI-layout client registers a new key that way after
                // an MDS restart, while the registration of its previous key survived (PTPL)
                // or was "unregistered" to key 0 (Linux sends Replace with NRKEY 0). NVMe Base
                // 2.0 (and Linux nvmet) refuse it: the client would fall back to the MDS.
                Some(i) if iekey => {
                    self.registrants[i].key = nrkey;
                    self.registrants[i].cntlid = who.cntlid;
                    self.generation = self.generation.wrapping_add(1);
                    Ok(())
                }
                Some(_) => Err(CONFLICT),
                None => {
                    self.registrants.push(Registrant {
                        hostid: who.hostid,
                        key: nrkey,
                        cntlid: who.cntlid,
                    });
                    self.generation = self.generation.wrapping_add(1);
                    Ok(())
                }
            },
            RegisterAction::Unregister => {
                let i = self.check_key(who, iekey, crkey)?;
                self.unregister_at(i);
                self.generation = self.generation.wrapping_add(1);
                Ok(())
            }
            RegisterAction::Replace => {
                // Replace needs an existing registration, IEKEY or not (as Linux nvmet).
                let i = self.find(&who.hostid).ok_or(CONFLICT)?;
                if !iekey && self.registrants[i].key != crkey {
                    return Err(CONFLICT);
                }
                self.registrants[i].key = nrkey;
                self.generation = self.generation.wrapping_add(1);
                Ok(())
            }
        }
    }

    /// Returns the host identifiers whose registrations were removed (preempted).
    pub fn acquire(
        &mut self,
        who: &Requester,
        action: AcquireAction,
        iekey: bool,
        rtype: RType,
        crkey: u64,
        prkey: u64,
    ) -> Result<Vec<[u8; 16]>, Status> {
        if !rtype.valid() {
            return Err(Status::INVALID_FIELD);
        }
        self.check_key(who, iekey, crkey)?;
        match action {
            AcquireAction::Acquire => match self.holder {
                None => {
                    self.holder = Some(Holder {
                        rtype,
                        hostid: who.hostid,
                    });
                    Ok(vec![])
                }
                Some(h) if self.is_holder(&who.hostid) && h.rtype == rtype => Ok(vec![]),
                Some(_) => Err(CONFLICT),
            },
            AcquireAction::Preempt | AcquireAction::PreemptAndAbort => {
                let holder_key = self.holder.and_then(|h| {
                    if h.rtype.all_regs() {
                        None
                    } else {
                        self.find(&h.hostid).map(|i| self.registrants[i].key)
                    }
                });
                let gone = match self.holder {
                    Some(h) if h.rtype.all_regs() && prkey == 0 => {
                        // Everyone else loses registration; the preempter holds `rtype`.
                        let gone = self.remove_where(|r| r.hostid != who.hostid);
                        self.holder = Some(Holder {
                            rtype,
                            hostid: who.hostid,
                        });
                        gone
                    }
                    Some(h) if !h.rtype.all_regs() && holder_key == Some(prkey) => {
                        // Preempting the holder: its reservation moves to us, registrants with
                        // PRKEY (other than us) are removed.
                        let gone = self.remove_keyed(prkey, who);
                        self.holder = Some(Holder {
                            rtype,
                            hostid: who.hostid,
                        });
                        gone
                    }
                    Some(h) if !h.rtype.all_regs() && prkey == 0 => {
                        return Err(Status::INVALID_FIELD)
                    }
                    // Otherwise only the registrations with PRKEY go; the reservation stays.
                    _ => {
                        let gone = self.remove_keyed(prkey, who);
                        if gone.is_empty() {
                            return Err(CONFLICT);
                        }
                        gone
                    }
                };
                self.generation = self.generation.wrapping_add(1);
                Ok(gone)
            }
        }
    }

    fn remove_keyed(&mut self, prkey: u64, who: &Requester) -> Vec<[u8; 16]> {
        self.remove_where(|r| r.key == prkey && r.hostid != who.hostid)
    }

    fn remove_where(&mut self, f: impl Fn(&Registrant) -> bool) -> Vec<[u8; 16]> {
        let mut gone = Vec::new();
        self.registrants.retain(|r| {
            if f(r) {
                gone.push(r.hostid);
                false
            } else {
                true
            }
        });
        if let Some(h) = self.holder {
            if !h.rtype.all_regs() && gone.contains(&h.hostid) {
                self.holder = None;
            }
        }
        gone
    }

    pub fn release(
        &mut self,
        who: &Requester,
        action: ReleaseAction,
        iekey: bool,
        rtype: RType,
        crkey: u64,
    ) -> Result<(), Status> {
        self.check_key(who, iekey, crkey)?;
        match action {
            ReleaseAction::Release => match self.holder {
                None => Ok(()),
                Some(_) if !self.is_holder(&who.hostid) => Ok(()),
                Some(h) if h.rtype != rtype => Err(Status::INVALID_FIELD),
                Some(_) => {
                    self.holder = None;
                    Ok(())
                }
            },
            ReleaseAction::Clear => {
                self.holder = None;
                self.registrants.clear();
                self.generation = self.generation.wrapping_add(1);
                Ok(())
            }
        }
    }

    /// May `hostid` run a command of this access class?
    pub fn check(&self, hostid: &[u8; 16], access: Access) -> Result<(), Status> {
        let Some(h) = self.holder else { return Ok(()) };
        if self.is_holder(hostid) {
            return Ok(());
        }
        let registered = self.find(hostid).is_some();
        let ok = match (h.rtype.0, access) {
            (1, Access::Read) | (3, Access::Read) | (5, Access::Read) => true,
            (1, Access::Write) | (2, _) => false,
            (3, Access::Write) | (4, _) | (5, Access::Write) | (6, _) => registered,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(CONFLICT)
        }
    }

    /// Reservation Report data: 24-byte header + 24-byte entries, or with `extended` a
    /// 64-byte header + 64-byte entries carrying 128-bit host identifiers.
    pub fn report(&self, extended: bool) -> Vec<u8> {
        let (hdr, ent) = if extended { (64, 64) } else { (24, 24) };
        let mut v = vec![0u8; hdr + ent * self.registrants.len()];
        put_u32_le(&mut v, 0, self.generation);
        v[4] = self.holder.map(|h| h.rtype.0).unwrap_or(0);
        put_u16_le(&mut v, 5, self.registrants.len() as u16);
        v[9] = self.ptpl as u8; // PTPLS
        for (i, r) in self.registrants.iter().enumerate() {
            let e = &mut v[hdr + i * ent..hdr + (i + 1) * ent];
            // CNTLID: FFFFh, the dynamic controller model (a host may hold several).
            put_u16_le(e, 0, 0xFFFF);
            e[2] = self.is_holder(&r.hostid) as u8;
            if extended {
                put_u64_le(e, 8, r.key);
                e[16..32].copy_from_slice(&r.hostid);
            } else {
                e[8..16].copy_from_slice(&r.hostid[..8]);
                put_u64_le(e, 16, r.key);
            }
        }
        v
    }
}

#[cfg(test)]
mod tests;
