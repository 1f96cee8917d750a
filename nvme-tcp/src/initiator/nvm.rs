//! The NVM command set and reservations on the I/O queues (round robin over the queues).

use super::{le16, le32, le64, Initiator, Registrant, ReservationReport};
use crate::error::Error;
use crate::pdu::{IoOpc, Sqe};
use crate::reservation::{AcquireAction, Cptpl, RType, RegisterAction, ReleaseAction};
use bytes::Bytes;

impl Initiator {
    /// Reads `nlb` blocks of `block_size` bytes.
    pub async fn read(
        &self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        block_size: u32,
    ) -> Result<Vec<u8>, Error> {
        let s = rw(IoOpc::READ, nsid, slba, nlb, false)?;
        Ok(self.io_cmd(s, None, nlb * block_size).await?.data)
    }

    /// Writes whole blocks (`data.len()` = nlb × block size); `fua` makes it durable first.
    pub async fn write(
        &self,
        nsid: u32,
        slba: u64,
        data: Bytes,
        block_size: u32,
        fua: bool,
    ) -> Result<(), Error> {
        if data.is_empty() || !data.len().is_multiple_of(block_size as usize) {
            return Err(Error::Config("write length must be whole blocks".into()));
        }
        let nlb = (data.len() / block_size as usize) as u32;
        let s = rw(IoOpc::WRITE, nsid, slba, nlb, fua)?;
        self.io_cmd(s, Some(data), 0).await.map(|_| ())
    }

    pub async fn flush(&self, nsid: u32) -> Result<(), Error> {
        let mut s = Sqe::new(IoOpc::FLUSH.0);
        s.set_nsid(nsid);
        self.io_cmd(s, None, 0).await.map(|_| ())
    }

    pub async fn write_zeroes(&self, nsid: u32, slba: u64, nlb: u32) -> Result<(), Error> {
        let s = rw(IoOpc::WRITE_ZEROES, nsid, slba, nlb, false)?;
        self.io_cmd(s, None, 0).await.map(|_| ())
    }

    /// Dataset Management with the Deallocate attribute over (slba, nlb) ranges.
    pub async fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), Error> {
        if ranges.is_empty() || ranges.len() > 256 {
            return Err(Error::Config("1..=256 ranges".into()));
        }
        let mut d = vec![0u8; ranges.len() * 16];
        for (i, &(slba, nlb)) in ranges.iter().enumerate() {
            d[i * 16 + 4..i * 16 + 8].copy_from_slice(&nlb.to_le_bytes());
            d[i * 16 + 8..i * 16 + 16].copy_from_slice(&slba.to_le_bytes());
        }
        let mut s = Sqe::new(IoOpc::DSM.0);
        s.set_nsid(nsid);
        s.set_cdw(10, ranges.len() as u32 - 1);
        s.set_cdw(11, 1 << 2);
        self.io_cmd(s, Some(Bytes::from(d)), 0).await.map(|_| ())
    }

    pub async fn reservation_register(
        &self,
        nsid: u32,
        action: RegisterAction,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
    ) -> Result<(), Error> {
        self.reservation_register_cptpl(nsid, action, iekey, Cptpl::NoChange, crkey, nrkey)
            .await
    }

    /// `reservation_register` that also changes the Persist Through Power Loss state (what
    /// the Linux host sends: `Cptpl::Persist`).
    pub async fn reservation_register_cptpl(
        &self,
        nsid: u32,
        action: RegisterAction,
        iekey: bool,
        cptpl: Cptpl,
        crkey: u64,
        nrkey: u64,
    ) -> Result<(), Error> {
        let mut s = Sqe::new(IoOpc::RESV_REGISTER.0);
        s.set_nsid(nsid);
        s.set_cdw(10, action as u32 | (iekey as u32) << 3 | cptpl.bits() << 30);
        self.io_cmd(s, Some(keys(crkey, nrkey)), 0)
            .await
            .map(|_| ())
    }

    pub async fn reservation_acquire(
        &self,
        nsid: u32,
        action: AcquireAction,
        rtype: RType,
        crkey: u64,
        prkey: u64,
    ) -> Result<(), Error> {
        let mut s = Sqe::new(IoOpc::RESV_ACQUIRE.0);
        s.set_nsid(nsid);
        s.set_cdw(10, action as u32 | (rtype.0 as u32) << 8);
        self.io_cmd(s, Some(keys(crkey, prkey)), 0)
            .await
            .map(|_| ())
    }

    pub async fn reservation_release(
        &self,
        nsid: u32,
        action: ReleaseAction,
        rtype: RType,
        crkey: u64,
    ) -> Result<(), Error> {
        let mut s = Sqe::new(IoOpc::RESV_RELEASE.0);
        s.set_nsid(nsid);
        s.set_cdw(10, action as u32 | (rtype.0 as u32) << 8);
        self.io_cmd(s, Some(Bytes::copy_from_slice(&crkey.to_le_bytes())), 0)
            .await
            .map(|_| ())
    }

    /// Reservation Report (extended data structure), every registrant: a second, larger
    /// report is asked for when the first one's 4 KiB did not hold them all.
    pub async fn reservation_report(&self, nsid: u32) -> Result<ReservationReport, Error> {
        let mut len = 4096u32;
        let b = loop {
            let mut s = Sqe::new(IoOpc::RESV_REPORT.0);
            s.set_nsid(nsid);
            s.set_cdw(10, len / 4 - 1);
            s.set_cdw(11, 1); // EDS: extended data structure (128-bit host identifiers)
            let b = self.io_cmd(s, None, len).await?.data;
            if b.len() < 64 {
                return Err(Error::Protocol(format!(
                    "Reservation Report of {} bytes, shorter than its 64-byte header",
                    b.len()
                )));
            }
            // REGCTL is 16 bits: at most 64 + 64 × 65535 bytes.
            let need = 64 + 64 * le16(&b, 5)? as u32;
            if need <= len || len > 4096 {
                break b;
            }
            len = need;
        };
        let n = le16(&b, 5)? as usize;
        let mut registrants = Vec::new();
        for i in 0..n.min((b.len() - 64) / 64) {
            let e = &b[64 + i * 64..128 + i * 64];
            let mut hostid = [0u8; 16];
            hostid.copy_from_slice(&e[16..32]);
            registrants.push(Registrant {
                cntlid: le16(e, 0)?,
                holds: e[2] & 1 != 0,
                key: le64(e, 8)?,
                hostid,
            });
        }
        Ok(ReservationReport {
            generation: le32(&b, 0)?,
            rtype: b[4],
            ptpl: b[9] & 1 != 0,
            registrants,
        })
    }
}

fn keys(a: u64, b: u64) -> Bytes {
    let mut d = Vec::with_capacity(16);
    d.extend_from_slice(&a.to_le_bytes());
    d.extend_from_slice(&b.to_le_bytes());
    Bytes::from(d)
}

fn rw(opc: IoOpc, nsid: u32, slba: u64, nlb: u32, fua: bool) -> Result<Sqe, Error> {
    if nlb == 0 || nlb > 0x10000 {
        return Err(Error::Config("1..=65536 blocks per command".into()));
    }
    let mut s = Sqe::new(opc.0);
    s.set_nsid(nsid);
    s.set_cdw(10, slba as u32);
    s.set_cdw(11, (slba >> 32) as u32);
    s.set_cdw(12, (nlb - 1) | (fua as u32) << 30);
    Ok(s)
}
