//! Where a log lives on its device: region, superblock block, circular record area, and
//! reads and writes by LSN that wrap at the end of the area.

use std::sync::Arc;

use crate::blockdev::BlockDev;
use crate::format::{LogSuperblock, BLOCK, SB_CLEAN, SB_MAGIC, VERSION};
use crate::LogError;

/// Largest record: 256 KiB, or 1/8 of a small log so a checkpoint can always be split into
/// records that fit (XFS iclogs are 32–256 KiB).
const MAX_RECORD: u64 = 256 * 1024;
/// Smallest area: room for a few records plus the tail/unmount slack.
const MIN_AREA: u64 = 16 * BLOCK;

/// Where the log lives on its device.
pub(crate) struct Geometry {
    pub dev: Arc<dyn BlockDev>,
    pub region: u64,
    pub area_off: u64,
    pub area_len: u64,
    pub uuid: [u8; 16],
}

impl Geometry {
    pub(crate) fn new(
        dev: Arc<dyn BlockDev>,
        offset: u64,
        len: u64,
        uuid: [u8; 16],
    ) -> Result<Geometry, LogError> {
        if !offset.is_multiple_of(512) || !len.is_multiple_of(BLOCK) || len < BLOCK + MIN_AREA {
            return Err(LogError::Invalid(format!(
                "log region [{offset}, +{len}): offset must be 512-aligned, length a multiple of 4096 and >= {}",
                BLOCK + MIN_AREA
            )));
        }
        match offset.checked_add(len) {
            Some(end) if end <= dev.size() => {}
            _ => return Err(LogError::Invalid("log region beyond the device".into())),
        }
        Ok(Geometry {
            dev,
            region: offset,
            area_off: offset + BLOCK,
            area_len: len - BLOCK,
            uuid,
        })
    }

    pub(crate) fn max_rec(&self) -> u64 {
        (self.area_len / 8 / BLOCK * BLOCK).clamp(BLOCK, MAX_RECORD)
    }

    pub(crate) fn read_area(&self, lsn: u64, buf: &mut [u8]) -> Result<(), LogError> {
        let pos = lsn % self.area_len;
        let first = ((self.area_len - pos) as usize).min(buf.len());
        self.dev.read_at(&mut buf[..first], self.area_off + pos)?;
        if first < buf.len() {
            self.dev.read_at(&mut buf[first..], self.area_off)?;
        }
        Ok(())
    }

    pub(crate) fn write_area(&self, lsn: u64, buf: &[u8]) -> Result<(), LogError> {
        let pos = lsn % self.area_len;
        let first = ((self.area_len - pos) as usize).min(buf.len());
        self.dev.write_at(&buf[..first], self.area_off + pos)?;
        if first < buf.len() {
            self.dev.write_at(&buf[first..], self.area_off)?;
        }
        Ok(())
    }

    pub(crate) fn superblock(&self, clean: Option<u64>, mount_lsn: u64) -> Vec<u8> {
        LogSuperblock {
            magic: SB_MAGIC,
            version: VERSION,
            flags: if clean.is_some() { SB_CLEAN } else { 0 },
            uuid: self.uuid,
            area_len: self.area_len,
            clean_lsn: clean.unwrap_or(0),
            mount_lsn,
            crc: 0,
            reserved: [0; 12],
        }
        .to_block()
    }
}
