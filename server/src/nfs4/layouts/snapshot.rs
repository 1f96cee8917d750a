//! The ledger as the admin endpoint shows it (`GET /layouts`): every file with an
//! outstanding layout, who holds what of it, and the recalls in flight. Copied out under the
//! ledger's locks one after the other (never two at once, as the service itself takes them),
//! then sorted: a view never waits on an NFS operation longer than one map copy.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use layout::block::{IoMode, LayoutType};

use super::Layouts;

/// One range a client holds (byte offsets of the file, as LAYOUTGET granted them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeInfo {
    pub offset: u64,
    pub length: u64,
    /// "read" or "rw".
    pub iomode: &'static str,
}

/// A recall of the holder's layout of the file, sent and not yet answered by a return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RecallInfo {
    /// Seconds left before the holder is fenced and the layout revoked (0: overdue, the next
    /// tick does it).
    pub deadline_in_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HolderInfo {
    /// The clientid (`clientid4`), as `/clients` lists it.
    pub client: u64,
    /// "block" (LAYOUT4_BLOCK_VOLUME) or "scsi" (LAYOUT4_SCSI).
    pub layout_type: &'static str,
    pub ranges: Vec<RangeInfo>,
    pub recall: Option<RecallInfo>,
    /// The address the holder's LAYOUTGET came from (what fencing names).
    pub address: Option<String>,
    /// Fenced since its last grant.
    pub fenced: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileLayouts {
    /// The file's inode number (the store's; `fileid` in GETATTR).
    pub fileid: u64,
    pub holders: Vec<HolderInfo>,
}

fn iomode_name(m: IoMode) -> &'static str {
    if m == IoMode::RW {
        "rw"
    } else {
        "read"
    }
}

fn type_name(t: LayoutType) -> &'static str {
    if t == LayoutType::SCSI {
        "scsi"
    } else {
        "block"
    }
}

impl Layouts {
    /// Every file with outstanding layouts, by inode number; holders by clientid.
    pub fn snapshot(&self, now: Instant) -> Vec<FileLayouts> {
        let held: Vec<_> = self
            .lock()
            .iter()
            .map(|(&(c, ino), h)| (c, ino, h.ltype, h.grants.ranges().to_vec()))
            .collect();
        let recalls: BTreeMap<(u64, u64), Instant> = self
            .recalls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&(c, ino), &d)| ((c, ino.0), d))
            .collect();
        let mut files: BTreeMap<u64, Vec<HolderInfo>> = BTreeMap::new();
        for (client, ino, ltype, ranges) in held {
            let recall = recalls.get(&(client, ino.0)).map(|d| RecallInfo {
                deadline_in_seconds: d.saturating_duration_since(now).as_secs(),
            });
            files.entry(ino.0).or_default().push(HolderInfo {
                client,
                layout_type: type_name(ltype),
                ranges: ranges
                    .iter()
                    .map(|&(s, e, m)| RangeInfo {
                        offset: s,
                        length: e - s,
                        iomode: iomode_name(m),
                    })
                    .collect(),
                recall,
                address: self.peer_of(client).map(|a| a.ip().to_string()),
                fenced: self.is_fenced(client),
            });
        }
        files
            .into_iter()
            .map(|(fileid, mut holders)| {
                holders.sort_by_key(|h| h.client);
                FileLayouts { fileid, holders }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Ino;
    use std::time::Duration;

    #[test]
    fn lists_holders_ranges_and_recalls_by_file() {
        let l = Layouts::default();
        let now = Instant::now();
        l.grant(7, Ino(20), LayoutType::BLOCK_VOLUME, (0, 4096), IoMode::RW);
        l.grant(
            7,
            Ino(20),
            LayoutType::BLOCK_VOLUME,
            (8192, 12288),
            IoMode::READ,
        );
        l.grant(3, Ino(20), LayoutType::SCSI, (0, 100), IoMode::READ);
        l.grant(3, Ino(11), LayoutType::SCSI, (0, 100), IoMode::RW);
        l.set_peer(7, "127.0.0.2:700".parse().unwrap());
        // A recall sent (as recall.rs records one).
        l.recalls
            .lock()
            .unwrap()
            .insert((7, Ino(20)), now + Duration::from_secs(30));
        let v = l.snapshot(now);
        assert_eq!(v.iter().map(|f| f.fileid).collect::<Vec<_>>(), [11, 20]);
        let f20 = &v[1];
        assert_eq!(
            f20.holders.iter().map(|h| h.client).collect::<Vec<_>>(),
            [3, 7]
        );
        let h7 = &f20.holders[1];
        assert_eq!(h7.layout_type, "block");
        assert_eq!(h7.address.as_deref(), Some("127.0.0.2"));
        assert_eq!(
            h7.ranges,
            [
                RangeInfo {
                    offset: 0,
                    length: 4096,
                    iomode: "rw"
                },
                RangeInfo {
                    offset: 8192,
                    length: 4096,
                    iomode: "read"
                }
            ]
        );
        assert_eq!(
            h7.recall,
            Some(RecallInfo {
                deadline_in_seconds: 30
            })
        );
        assert_eq!(f20.holders[0].layout_type, "scsi");
        assert_eq!(f20.holders[0].recall, None);
        // A return empties the file's entry: it leaves the view.
        l.release_file(3, Ino(11));
        assert_eq!(l.snapshot(now).len(), 1);
    }
}
