//! The buffers of the ring's operations: aligned for O_DIRECT, from a pool registered with
//! the ring when one is free, else from the heap. Part of the ring's unsafe module
//! (`ring/mod.rs`): the kernel owns a buffer while its operation is in flight.
#![allow(unsafe_code)]

use crate::namespace::lock;
use bytes::Bytes;
use io_uring::IoUring;

/// O_DIRECT buffer alignment (logical block size of every device).
pub(super) const ALIGN: usize = 4096;

/// Reads and O_DIRECT writes of up to `SLOT` bytes use buffers from a pool registered with
/// the ring (IORING_REGISTER_BUFFERS) and go by READ_FIXED / WRITE_FIXED: the kernel pinned
/// the pool's pages once, at registration, instead of once per operation
/// (`gup_fast_fallback`, `bio_iov_iter_get_pages`). `examples/uring.rs` at QD 32, 4 KiB
/// O_DIRECT: 3.2 -> 2.8 µs of CPU per read, 2.9 -> 2.6 per write (docs/nvme-tcp.md
/// "Registered buffers"). Larger transfers, and any while the pool is empty, use heap
/// buffers.
pub(super) const SLOT: usize = 4096;
/// Slots per ring: a queue's commands (MQES + 1 = 128) rarely all read at once.
const SLOTS: usize = 64;
/// Pools registered at once in the process: 16 × 256 KiB = 4 MiB pinned, half the usual
/// RLIMIT_MEMLOCK (8 MiB), which pinned pages count against per user without CAP_IPC_LOCK
/// (and, before Linux 5.12, the rings themselves): queues beyond it, or where the
/// registration is refused, use heap buffers, and no ring is starved of its own memory.
const MAX_POOLS: usize = 16;
/// Pools registered now (`MAX_POOLS`).
static POOLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The layout of `len` bytes aligned for O_DIRECT (the pool's allocation, and every heap
/// buffer).
fn aligned(len: usize) -> Option<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(len, ALIGN).ok()
}

/// The registered buffers of one ring: `SLOTS` slots of `SLOT` bytes in one allocation,
/// aligned for O_DIRECT. Shared with the `Bytes` of answers still being sent, which give
/// their slot back when dropped (on whichever thread sends them).
pub(super) struct Pool {
    base: std::ptr::NonNull<u8>,
    free: std::sync::Mutex<Vec<u16>>,
}

// SAFETY: the allocation is reached only through slots (each held by one `Slot` at a time)
// and freed once, in `Drop`, when no `Slot` is left (each holds the `Arc`).
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

impl Pool {
    /// A pool registered with `ring` as its buffer 0 (`None`: out of memory, or refused).
    /// Registered at a queue's first Read or Write, when nothing is in flight on the ring
    /// (older kernels quiesce a ring to register buffers), and never on the admin queue.
    pub(super) fn register(ring: &IoUring) -> Option<std::sync::Arc<Pool>> {
        use std::sync::atomic::Ordering;
        let layout = aligned(SLOT * SLOTS)?;
        if POOLS.fetch_add(1, Ordering::Relaxed) >= MAX_POOLS {
            POOLS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // From here on `POOLS` counts this pool: its `Drop` gives the count back.
        // SAFETY: the layout's size is not zero.
        let Some(base) = std::ptr::NonNull::new(unsafe { std::alloc::alloc(layout) }) else {
            POOLS.fetch_sub(1, Ordering::Relaxed);
            return None;
        };
        let pool = std::sync::Arc::new(Pool {
            base,
            free: std::sync::Mutex::new((0..SLOTS as u16).rev().collect()),
        });
        let iov = libc::iovec {
            iov_base: base.as_ptr().cast(),
            iov_len: layout.size(),
        };
        // SAFETY: the kernel reads or writes registered memory only in the READ_FIXED /
        // WRITE_FIXED operations we submit, each of which holds its slot, and with it the
        // pool's allocation, until its completion is reaped. Outside those the pages are
        // only pinned: freeing the allocation while the ring still has them registered (the
        // Ring drops its IoUring first anyway) gives the kernel nothing to write to.
        match unsafe { ring.submitter().register_buffers(&[iov]) } {
            Ok(()) => Some(pool),
            Err(e) => {
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !SAID.swap(true, Ordering::Relaxed) {
                    tracing::info!(error = %e, "nvme-tcp: io_uring buffers not registered (RLIMIT_MEMLOCK?): reads and writes pin their pages each time");
                }
                None
            }
        }
    }

    pub(super) fn take(self: &std::sync::Arc<Pool>) -> Option<Slot> {
        let idx = lock(&self.free).pop()?;
        Some(Slot {
            pool: self.clone(),
            idx,
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(layout) = aligned(SLOT * SLOTS) {
            // SAFETY: allocated in `register` with this layout; the last Arc is gone, so no
            // slot (and no operation in flight) points into it.
            unsafe { std::alloc::dealloc(self.base.as_ptr(), layout) };
        }
        POOLS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One slot of a `Pool`, given back when dropped.
pub(super) struct Slot {
    pool: std::sync::Arc<Pool>,
    idx: u16,
}

impl Slot {
    fn ptr(&self) -> *mut u8 {
        // SAFETY: idx < SLOTS, so the slot lies within the pool's allocation.
        unsafe { self.pool.base.as_ptr().add(self.idx as usize * SLOT) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.pool.free).push(self.idx);
    }
}

/// The buffer of a Read (which the kernel fills) or of an O_DIRECT Write's copy: aligned
/// for O_DIRECT (ALIGN), and not zeroed (a 128 KiB read would zero 132 KiB first, which the
/// kernel then overwrites). Its bytes are only ever looked at through `into_bytes`, once
/// every one of them is written: by the kernel (a Read that completed whole) or by
/// `copy_of`. Once a Read's buffer is `Bytes`, its answer's C2HData leaves from it
/// (`OutTx`'s vectored send), no copy in between.
pub(super) struct IoBuf {
    pub(super) ptr: std::ptr::NonNull<u8>,
    pub(super) len: usize,
    /// A slot of the ring's registered pool (freed by giving it back), else a heap
    /// allocation of `len` bytes (freed in `Drop`).
    slot: Option<Slot>,
}

// SAFETY: an IoBuf owns its memory alone (a heap allocation, as a Box<[u8]> does, or a pool
// slot no other IoBuf holds); nothing else points into it except the kernel while an
// operation is in flight, which the Ring waits out.
unsafe impl Send for IoBuf {}

impl IoBuf {
    /// `len` bytes, uninitialized: a slot of `pool` when they fit and one is free, else
    /// from the heap (`None`: `len` is 0 or memory ran out).
    pub(super) fn uninit(len: usize, pool: Option<&std::sync::Arc<Pool>>) -> Option<IoBuf> {
        if len > 0 && len <= SLOT {
            if let Some(slot) = pool.and_then(Pool::take) {
                return Some(IoBuf {
                    ptr: std::ptr::NonNull::new(slot.ptr())?,
                    len,
                    slot: Some(slot),
                });
            }
        }
        let layout = aligned(len).filter(|_| len > 0)?;
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc(layout) };
        Some(IoBuf {
            ptr: std::ptr::NonNull::new(ptr)?,
            len,
            slot: None,
        })
    }

    /// The registered buffer it lies in (for READ_FIXED / WRITE_FIXED), if any.
    pub(super) fn fixed(&self) -> Option<u16> {
        self.slot.as_ref().map(|_| 0)
    }

    /// A copy of `data`.
    pub(super) fn copy_of(data: &[u8], pool: Option<&std::sync::Arc<Pool>>) -> Option<IoBuf> {
        let b = Self::uninit(data.len(), pool)?;
        // SAFETY: `b` was just allocated with `data.len()` bytes, so it cannot overlap
        // `data`, and both are valid for that many bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), b.ptr.as_ptr(), data.len()) };
        Some(b)
    }

    /// The buffer as `Bytes`, without a copy.
    ///
    /// # Safety
    /// Every one of its `len` bytes has been written.
    pub(super) unsafe fn into_bytes(self) -> Bytes {
        Bytes::from_owner(Filled(self))
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if self.slot.is_some() {
            return; // the slot goes back to its pool as it drops
        }
        if let Some(layout) = aligned(self.len) {
            // SAFETY: allocated in `uninit` with this very layout, and freed only here.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// An `IoBuf` whose bytes are all written (`IoBuf::into_bytes`).
struct Filled(IoBuf);

impl AsRef<[u8]> for Filled {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the allocation holds `len` bytes, all initialized (`into_bytes`'s
        // contract), and lives as long as `self`; nothing writes to it any more.
        unsafe { std::slice::from_raw_parts(self.0.ptr.as_ptr(), self.0.len) }
    }
}

/// A ring with a pool registered (the ring drops first, as in a `Ring`), or `None` where
/// this machine refuses either (said on stderr).
#[cfg(test)]
pub(super) fn pooled_ring() -> Option<(std::sync::Arc<Pool>, IoUring)> {
    let Ok(ring) = IoUring::new(8) else {
        eprintln!("io_uring refused here: skipped");
        return None;
    };
    let Some(pool) = Pool::register(&ring) else {
        eprintln!("buffer registration refused here: skipped");
        return None;
    };
    Some((pool, ring))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read and O_DIRECT buffers are aligned for O_DIRECT whatever their size, hand their
    /// memory over as `Bytes` without a copy, and an empty one is refused (it could not be
    /// allocated).
    #[test]
    fn io_buffers_are_aligned_and_become_bytes_in_place() {
        let ring = IoUring::new(8).ok();
        let pool = ring.as_ref().and_then(Pool::register);
        let _ring = ring; // dropped before the pool, as in a Ring
        for pool in [None, pool.as_ref()] {
            for len in [1, 512, 4096, 4097, 128 * 1024] {
                let data: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
                let b = IoBuf::copy_of(&data, pool).unwrap();
                let p = b.ptr.as_ptr() as usize;
                assert_eq!(p % ALIGN, 0, "{len} bytes at {p:#x}");
                assert_eq!(b.fixed().is_some(), pool.is_some() && len <= SLOT, "{len}");
                // SAFETY: `copy_of` wrote every byte.
                let bytes = unsafe { b.into_bytes() };
                assert_eq!(bytes.as_ptr() as usize, p, "copied");
                assert_eq!(&bytes[..], &data[..]);
                let u = IoBuf::uninit(len, pool).unwrap();
                assert_eq!(u.ptr.as_ptr() as usize % ALIGN, 0);
            }
            assert!(IoBuf::uninit(0, pool).is_none());
        }
    }

    /// The pool hands out distinct slots until it is empty (then buffers come from the
    /// heap), and a slot comes back when the answer's `Bytes` made of it is dropped, on any
    /// thread.
    #[test]
    fn pool_slots_are_distinct_and_come_back_with_their_bytes() {
        let Some((pool, _ring)) = pooled_ring() else {
            return;
        };
        let bufs: Vec<IoBuf> = (0..SLOTS)
            .map(|_| IoBuf::copy_of(&[7; SLOT], Some(&pool)).unwrap())
            .collect();
        let mut ptrs: Vec<usize> = bufs.iter().map(|b| b.ptr.as_ptr() as usize).collect();
        assert!(bufs.iter().all(|b| b.fixed() == Some(0)));
        ptrs.sort_unstable();
        ptrs.dedup();
        assert_eq!(ptrs.len(), SLOTS, "slots overlap");
        let base = pool.base.as_ptr() as usize;
        assert!(ptrs.iter().all(|p| (base..base + SLOT * SLOTS).contains(p)));
        let spill = IoBuf::uninit(SLOT, Some(&pool)).unwrap();
        assert!(spill.fixed().is_none(), "empty pool: from the heap");
        // SAFETY: `copy_of` wrote every byte.
        let held: Vec<Bytes> = bufs
            .into_iter()
            .map(|b| unsafe { b.into_bytes() })
            .collect();
        assert!(pool.take().is_none());
        std::thread::spawn(move || drop(held)).join().unwrap();
        assert_eq!(lock(&pool.free).len(), SLOTS, "every slot back");
        assert!(IoBuf::uninit(SLOT, Some(&pool)).unwrap().fixed().is_some());
    }
}
