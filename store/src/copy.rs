//! COPY within the volume (RFC 7862 §15.2, done by the server, not through a client): the
//! source's bytes go to the destination through the destination's own data path, so the
//! rules of WRITE (data.rs) hold — data on the device before the extents that name it are
//! logged as written, the size grown in the same transaction — and a stable copy is a COMMIT
//! of the destination afterwards (force to its commit_seq, then a data flush if that force
//! wrote no log: docs/design.md §4).
//!
//! Two ways to move the bytes:
//! - **plain**: READ of the source (zeros for holes and unwritten blocks), WRITE of the
//!   destination, a chunk at a time;
//! - **copy_file_range(2)** on the file holding the volume, for the whole blocks of a range
//!   whose source and destination offsets share their offset within a block: the kernel moves
//!   the blocks without a trip through user space, and a file system that shares blocks
//!   (XFS, btrfs reflink) does not copy them at all. The destination's holes in such a chunk
//!   are allocated unwritten first; the chunk's written source blocks go to it, and the
//!   destination's extents the copy filled convert in one transaction, after the data is
//!   written (the log flushes the device before a converting item, data.rs). Where the
//!   kernel refuses (another file system, a device without a file: the crash-simulating
//!   one) the chunk goes the plain way.

use layout::{ExtState, Segment};
use metalog::Item;

use super::extents;
use super::ns::Tx;
use super::types::{Ino, Result, Stable, StoreError, Timespec, BLOCK, MAX_FILE_SIZE};
use super::Store;

/// Bytes per step: one READ/WRITE pair of the plain copy, one transaction of the
/// copy_file_range copy. 1 MiB is `MAX_IO` (what one WRITE carries), so a chunk costs what a
/// client's WRITE would.
const CHUNK: u64 = 1 << 20;

/// What a copy did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Bytes copied (fewer than asked only if the source shrank meanwhile).
    pub bytes: u64,
    /// `FileSync` once data, size and extents are durable; else `Unstable`.
    pub stable: Stable,
    /// Bytes that went through copy_file_range(2) rather than the plain copy.
    pub offloaded: u64,
}

/// How the bytes may move (tests and the benchmark pick the plain copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMethod {
    /// copy_file_range(2) where it can, plain elsewhere.
    Auto,
    Plain,
}

impl Store {
    /// Copies `len` bytes of `src` at `src_off` to `dst` at `dst_off`. The caller checked the
    /// range (within the source, not overlapping itself in one file); a stable copy is
    /// durable on return (`Copied::stable` says `FileSync`).
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
        stable: bool,
        method: CopyMethod,
    ) -> Result<Copied> {
        let end = dst_off.checked_add(len).ok_or(StoreError::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(StoreError::FileTooBig);
        }
        let fd = match method {
            CopyMethod::Auto => self.dev.raw_file().map(|(fd, _)| fd),
            CopyMethod::Plain => None,
        };
        let aligned = src_off % BLOCK == dst_off % BLOCK;
        let (mut done, mut offloaded) = (0u64, 0u64);
        while done < len {
            let (s, d) = (src_off + done, dst_off + done);
            // To the next block boundary, then whole chunks.
            let to_boundary = (BLOCK - d % BLOCK) % BLOCK;
            let n = if to_boundary > 0 {
                to_boundary.min(len - done)
            } else {
                CHUNK.min(len - done)
            };
            let whole = to_boundary == 0 && n % BLOCK == 0;
            let got = match fd {
                Some(fd) if aligned && whole => self.offload_chunk(fd, src, s, dst, d, n)?,
                _ => None,
            };
            let copied = match got {
                Some(c) => {
                    offloaded += c;
                    c
                }
                None => self.plain_chunk(src, s, dst, d, n)?,
            };
            done += copied;
            if copied < n {
                break; // the source ended early
            }
        }
        let stable = if stable && done > 0 {
            self.commit(dst)?;
            Stable::FileSync
        } else if stable {
            Stable::FileSync
        } else {
            Stable::Unstable
        };
        Ok(Copied {
            bytes: done,
            stable,
            offloaded,
        })
    }

    fn plain_chunk(&self, src: Ino, s: u64, dst: Ino, d: u64, n: u64) -> Result<u64> {
        let (data, _) = self.read(src, s, n as u32)?;
        if !data.is_empty() {
            self.write(dst, d, &data, Stable::Unstable)?;
        }
        Ok(data.len() as u64)
    }

    /// One chunk of whole blocks through copy_file_range(2); `None` when the chunk must go
    /// the plain way (the kernel refused, the source ends inside it, the destination changed
    /// between the allocation and the copy).
    fn offload_chunk(
        &self,
        fd: std::os::fd::RawFd,
        src: Ino,
        s: u64,
        dst: Ino,
        d: u64,
        n: u64,
    ) -> Result<Option<u64>> {
        let (sfb, dfb, nb) = (s / BLOCK, d / BLOCK, n / BLOCK);
        if self.rd().meta(src.0)?.size < s + n {
            return Ok(None);
        }
        // Unwritten blocks over the destination's holes (nobody reads them as data yet).
        self.allocate_blocks(dst, dfb, nb, None, Timespec::now())?;
        let res = self.reserve(64 * (1 + 2 * nb.min(4096)))?;
        let w = self.file_lock(dst);
        let io = self.io_begin();
        let (gen, ssegs, dsegs) = {
            let g = self.rd();
            let m = g.meta(dst.0)?;
            if g.meta(src.0)?.size < s + n {
                return Ok(None);
            }
            (
                m.gen,
                extents::lookup(&g.kv, src.0, sfb, nb)?,
                extents::lookup(&g.kv, dst.0, dfb, nb)?,
            )
        };
        let Some(plan) = pair(&ssegs, &dsegs, sfb, dfb) else {
            return Ok(None);
        };
        let mut converts = Vec::new();
        for p in &plan {
            let len = p.len * BLOCK;
            match (p.src_phys, p.dst_written) {
                (Some(sp), _) => {
                    if !copy_file_range(fd, sp * BLOCK, fd, p.dst_phys * BLOCK, len)? {
                        // Refused before anything of this chunk was committed: no extent
                        // names what was copied so far, the plain copy writes it again.
                        return Ok(None);
                    }
                    if !p.dst_written {
                        converts.push(*p);
                    }
                }
                // A hole of the source over written destination blocks: zeros.
                (None, true) => {
                    let zeros = vec![0u8; len as usize];
                    self.dev.write_at(&zeros, p.dst_phys * BLOCK)?;
                }
                // Over unwritten blocks: they read as zeros already.
                (None, false) => {}
            }
        }
        let now = Timespec::now();
        {
            let mut g = self.wr();
            let mut m = match g.meta_opt(dst.0)? {
                Some(m) if m.gen == gen => m,
                _ => return Err(StoreError::Stale),
            };
            let mut tx = Tx::default();
            for p in &converts {
                tx.items.push(Item::ExtentConvert {
                    ino: dst.0,
                    file_block: p.dst_block,
                    len_blocks: p.len,
                });
            }
            let grows = d + n > m.size;
            if grows {
                m.size = d + n;
                tx.items.push(Item::Size {
                    ino: dst.0,
                    size: m.size,
                });
            }
            m.touch_mc(now);
            tx.items.push(m.times_item(dst.0));
            tx.obj(dst.0, converts.is_empty() && !grows);
            self.commit_locked(&mut g, res, tx.items, tx.objs)?;
        }
        drop(io);
        drop(w);
        Ok(Some(n))
    }
}

/// A run of blocks with one source and one destination extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    dst_block: u64,
    len: u64,
    /// The source's volume block, if the source has written data there.
    src_phys: Option<u64>,
    dst_phys: u64,
    dst_written: bool,
}

/// The runs of a chunk: the source's and the destination's segments cut where either
/// changes. `None` if the destination has a hole (a DEALLOCATE since the allocation).
fn pair(src: &[Segment], dst: &[Segment], sfb: u64, dfb: u64) -> Option<Vec<Run>> {
    let mut out = Vec::new();
    for ds in dst {
        let Segment::Mapped {
            file_block,
            phys_block,
            len,
            state,
        } = *ds
        else {
            return None;
        };
        let mut at = file_block;
        while at < file_block + len {
            let sblock = sfb + (at - dfb);
            let ss = src
                .iter()
                .find(|s| s.file_block() <= sblock && sblock < s.file_block() + seg_len(s))?;
            let run = (file_block + len - at).min(ss.file_block() + seg_len(ss) - sblock);
            let src_phys = match *ss {
                Segment::Mapped {
                    file_block: sf,
                    phys_block: sp,
                    state: ExtState::Written,
                    ..
                } => Some(sp + (sblock - sf)),
                _ => None,
            };
            out.push(Run {
                dst_block: at,
                len: run,
                src_phys,
                dst_phys: phys_block + (at - file_block),
                dst_written: state == ExtState::Written,
            });
            at += run;
        }
    }
    Some(out)
}

fn seg_len(s: &Segment) -> u64 {
    match *s {
        Segment::Mapped { len, .. } | Segment::Hole { len, .. } => len,
    }
}

/// copy_file_range(2) of `len` bytes within the volume file; `false` if the kernel will not
/// do it for this file (EXDEV, EINVAL, EOPNOTSUPP, ENOSYS: take the plain copy).
fn copy_file_range(
    fd_in: std::os::fd::RawFd,
    off_in: u64,
    fd_out: std::os::fd::RawFd,
    off_out: u64,
    len: u64,
) -> Result<bool> {
    let (mut i, mut o) = (off_in as libc::loff_t, off_out as libc::loff_t);
    let mut left = len as usize;
    while left > 0 {
        // SAFETY: `fd_in`/`fd_out` are the volume's open file, valid while the device lives
        // (`BlockDev::raw_file`); the offsets are locals the call updates; no buffer of ours
        // is passed.
        #[allow(unsafe_code)]
        let r = unsafe { libc::copy_file_range(fd_in, &mut i, fd_out, &mut o, left, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS) => Ok(false),
                Some(libc::EINTR) => continue,
                _ => Err(e.into()),
            };
        }
        if r == 0 {
            // Past the end of the file: the volume is smaller than the extents say.
            return Err(StoreError::Io("copy_file_range: short volume".into()));
        }
        left -= r as usize;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewNode, SetAttrs, StoreOptions, ROOT_INO};
    use metalog::CrashDev;
    use std::sync::Arc;

    fn store() -> (Arc<CrashDev>, Store) {
        let dev = Arc::new(CrashDev::new(16 << 20, 1));
        Store::mkfs_dev(dev.clone(), false).unwrap();
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        (dev, s)
    }

    fn file(s: &Store, name: &[u8]) -> Ino {
        s.create(
            ROOT_INO,
            name,
            NewNode::Regular,
            &SetAttrs::default(),
            (0, 0),
        )
        .unwrap()
        .0
        .ino
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
    }

    /// Unaligned ranges, a hole in the source, a destination with data around the range:
    /// the destination reads back the source's bytes and keeps its own outside the range.
    #[test]
    fn plain_copy_moves_the_bytes_and_nothing_else() {
        let (_, s) = store();
        let (a, b) = (file(&s, b"a"), file(&s, b"b"));
        let src = pattern(3 * BLOCK as usize + 100, 1);
        s.write(a, 0, &src, Stable::Unstable).unwrap();
        // A hole in the source: [4 blocks, 5 blocks) then data again.
        s.write(a, 5 * BLOCK, &[9; 10], Stable::Unstable).unwrap();
        let old = vec![0xee; 7 * BLOCK as usize];
        s.write(b, 0, &old, Stable::Unstable).unwrap();
        let len = 5 * BLOCK + 10 - 50;
        let c = s.copy(a, 50, b, 1000, len, true, CopyMethod::Auto).unwrap();
        assert_eq!((c.bytes, c.stable, c.offloaded), (len, Stable::FileSync, 0));
        let (got, _) = s.read(b, 0, 7 * BLOCK as u32).unwrap();
        let (want_src, _) = s.read(a, 50, len as u32).unwrap();
        assert_eq!(&got[..1000], &old[..1000]);
        assert_eq!(&got[1000..1000 + len as usize], &want_src[..]);
        assert_eq!(&got[1000 + len as usize..], &old[1000 + len as usize..]);
    }

    /// On a volume file, aligned whole blocks go through copy_file_range(2): written source
    /// blocks land in the destination's holes, unwritten blocks and written ones, a source
    /// hole over written destination blocks reads back as zeros, and the copy is durable.
    #[test]
    fn copy_file_range_copies_whole_blocks_of_a_volume_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vol");
        Store::mkfs(&path, 16 << 20, false).unwrap();
        let s = Store::open(&path, StoreOptions::default()).unwrap();
        let (a, b) = (file(&s, b"a"), file(&s, b"b"));
        let bs = BLOCK as usize;
        let src = pattern(6 * bs, 3);
        s.write(a, 0, &src, Stable::Unstable).unwrap();
        // Source block 4 a hole (punched), destination: written block 1, unwritten block 2,
        // written block 4 (under the source's hole), holes elsewhere.
        s.deallocate(a, 4 * BLOCK, BLOCK).unwrap();
        s.write(b, BLOCK, &vec![0xee; bs], Stable::Unstable)
            .unwrap();
        s.allocate(b, 2 * BLOCK, BLOCK).unwrap();
        s.write(b, 4 * BLOCK, &vec![0xdd; bs], Stable::Unstable)
            .unwrap();
        let c = s
            .copy(a, 0, b, 0, 6 * BLOCK, true, CopyMethod::Auto)
            .unwrap();
        assert_eq!(c.bytes, 6 * BLOCK);
        assert_eq!(c.stable, Stable::FileSync);
        assert!(c.offloaded > 0, "nothing went through copy_file_range");
        let (want, _) = s.read(a, 0, 6 * BLOCK as u32).unwrap();
        assert!(want[4 * bs..5 * bs].iter().all(|b| *b == 0));
        let (got, _) = s.read(b, 0, 6 * BLOCK as u32).unwrap();
        assert!(got == want, "destination differs from the source");
        assert_eq!(s.getattr(b).unwrap().size, 6 * BLOCK);
        // A new mount of the volume file reads the same.
        drop(s);
        let s = Store::open(&path, StoreOptions::default()).unwrap();
        let (got, _) = s.read(b, 0, 6 * BLOCK as u32).unwrap();
        assert!(got == want, "lost at remount");
    }

    /// Not a test: prints what copy_file_range(2) buys over the plain copy for a 32 MiB
    /// stable copy on a volume file under `PNFS_BENCH_DIR` (or the target directory): medians
    /// of interleaved rounds, the ratio, the load average. Run with `cargo test --release -p
    /// pnfsd --lib copy_file_range_ratio -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn copy_file_range_ratio() {
        let base = std::env::var_os("PNFS_BENCH_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target")
            });
        std::fs::create_dir_all(&base).unwrap();
        let dir = tempfile::tempdir_in(&base).unwrap();
        let path = dir.path().join("vol.img");
        Store::mkfs(&path, 512 << 20, false).unwrap();
        let s = Store::open(&path, StoreOptions::default()).unwrap();
        let len = 32u64 << 20;
        let src = file(&s, b"src");
        let chunk = pattern(1 << 20, 5);
        for i in 0..len >> 20 {
            s.write(src, i << 20, &chunk, Stable::Unstable).unwrap();
        }
        s.commit(src).unwrap();
        let (mut auto, mut plain) = (Vec::new(), Vec::new());
        for round in 0..5 {
            for (method, out) in [
                (CopyMethod::Auto, &mut auto),
                (CopyMethod::Plain, &mut plain),
            ] {
                let dst = file(&s, format!("d{round}{method:?}").as_bytes());
                let t = std::time::Instant::now();
                let c = s.copy(src, 0, dst, 0, len, true, method).unwrap();
                out.push(t.elapsed().as_secs_f64());
                assert_eq!(c.bytes, len);
                assert_eq!(c.offloaded > 0, method == CopyMethod::Auto);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (a, p) = (median(&mut auto), median(&mut plain));
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "32 MiB stable copy: copy_file_range {:.1} ms, plain {:.1} ms, plain/copy_file_range {:.2}; loadavg {}",
            a * 1e3,
            p * 1e3,
            p / a,
            load.trim()
        );
    }

    /// The pairing of source and destination segments cuts where either changes.
    #[test]
    fn runs_follow_both_extent_maps() {
        let src = [
            Segment::Mapped {
                file_block: 10,
                phys_block: 100,
                len: 2,
                state: ExtState::Written,
            },
            Segment::Hole {
                file_block: 12,
                len: 2,
            },
        ];
        let dst = [
            Segment::Mapped {
                file_block: 0,
                phys_block: 500,
                len: 3,
                state: ExtState::Unwritten,
            },
            Segment::Mapped {
                file_block: 3,
                phys_block: 700,
                len: 1,
                state: ExtState::Written,
            },
        ];
        let runs = pair(&src, &dst, 10, 0).unwrap();
        let got: Vec<(u64, u64, Option<u64>, u64, bool)> = runs
            .iter()
            .map(|r| (r.dst_block, r.len, r.src_phys, r.dst_phys, r.dst_written))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 2, Some(100), 500, false),
                (2, 1, None, 502, false),
                (3, 1, None, 700, true),
            ]
        );
        let holey = [Segment::Hole {
            file_block: 0,
            len: 4,
        }];
        assert_eq!(pair(&src, &holey, 10, 0), None);
    }
}
