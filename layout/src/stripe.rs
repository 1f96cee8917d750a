//! The striped data set of a split volume (docs/store.md "Striped data set"): N data members
//! behind one logical data address space, in stripe units of `unit` blocks taken round
//! robin, the layout of an RFC 5663 §2.2.4 STRIPE volume (`pnfs_block_stripe_volume_info4`:
//! stripe unit `bsv_stripe_unit`, member `(L / unit) mod N`).
//!
//! ```text
//! logical data block s      stripe unit k = s / unit, row r = k / N
//! member  k mod N           block r * unit + s mod unit of the member's data
//! ```
//! Member data blocks count from the member's `data_base` (past its label); a member holds
//! the same whole number of stripe units as every other, so the logical space has no hole
//! (the STRIPE volume's length is the sum of its members', RFC 5663 §2.2.4).
//! This is the one conversion between the two; `Geometry` uses it for `storage_offset` and
//! the store's device for routing I/O.

/// Default stripe unit: 1 MiB of 4 KiB blocks.
pub const DEFAULT_STRIPE_UNIT_BLOCKS: u64 = (1 << 20) / crate::BLOCK_SIZE as u64;

/// `members` data members, `unit` blocks per stripe unit (both ≥ 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    pub members: u32,
    pub unit: u64,
}

impl Stripe {
    /// `None` unless both are at least 1.
    pub fn new(members: u32, unit: u64) -> Option<Stripe> {
        (members >= 1 && unit >= 1).then_some(Stripe { members, unit })
    }

    /// Logical data block `s` → (member index, block of that member's data).
    pub fn to_member(&self, s: u64) -> (u32, u64) {
        let n = u64::from(self.members);
        let k = s / self.unit;
        ((k % n) as u32, (k / n) * self.unit + s % self.unit)
    }

    /// The inverse of [`Stripe::to_member`]; `None` for a member index not in the set or a
    /// block past the logical space's `u64` range.
    pub fn to_logical(&self, member: u32, b: u64) -> Option<u64> {
        if member >= self.members {
            return None;
        }
        let row = b / self.unit;
        row.checked_mul(u64::from(self.members))?
            .checked_add(u64::from(member))?
            .checked_mul(self.unit)?
            .checked_add(b % self.unit)
    }

    /// Blocks from logical block `s` to the end of its stripe unit: the longest run that is
    /// contiguous on one member (the whole rest of the space for one member).
    pub fn run(&self, s: u64) -> u64 {
        match self.members {
            1 => u64::MAX - s,
            _ => self.unit - s % self.unit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_robin_by_stripe_unit() {
        let s = Stripe::new(3, 4).unwrap();
        // Row 0: units 0, 1, 2 on members 0, 1, 2; row 1 continues each member at block 4.
        assert_eq!(s.to_member(0), (0, 0));
        assert_eq!(s.to_member(3), (0, 3), "last block of the first unit");
        assert_eq!(s.to_member(4), (1, 0), "first block of the next unit");
        assert_eq!(s.to_member(11), (2, 3));
        assert_eq!(s.to_member(12), (0, 4), "the second row");
        assert_eq!(s.to_member(23), (2, 7));
        assert_eq!(s.to_logical(1, 0), Some(4));
        assert_eq!(s.to_logical(0, 4), Some(12));
        assert_eq!(s.to_logical(2, 7), Some(23));
        assert_eq!(s.to_logical(3, 0), None, "no member 3");
        assert_eq!(s.to_logical(0, u64::MAX), None);
        assert_eq!((s.run(0), s.run(3), s.run(4), s.run(6)), (4, 1, 4, 2));
        assert_eq!(Stripe::new(0, 4), None);
        assert_eq!(Stripe::new(2, 0), None);
    }

    /// One member: the identity, whatever the unit.
    #[test]
    fn one_member_is_the_identity() {
        let s = Stripe::new(1, 256).unwrap();
        for b in [0, 255, 256, 1 << 40] {
            assert_eq!(s.to_member(b), (0, b));
            assert_eq!(s.to_logical(0, b), Some(b));
        }
        assert_eq!(s.run(10), u64::MAX - 10);
    }

    /// The end of one member's data is the end of the logical space's last row.
    #[test]
    fn member_boundaries() {
        let (n, unit, rows) = (4u32, 256u64, 10u64);
        let s = Stripe::new(n, unit).unwrap();
        let per = rows * unit;
        let last = u64::from(n) * per - 1;
        assert_eq!(s.to_member(last), (n - 1, per - 1));
        for m in 0..n {
            assert_eq!(
                s.to_logical(m, per - 1),
                Some((rows * 4 - 4 + u64::from(m)) * unit + unit - 1)
            );
            assert!(s.to_logical(m, per - 1).unwrap() <= last);
        }
    }

    proptest! {
        #[test]
        fn round_trip(n in 1u32..16, unit in 1u64..4096, b in 0u64..(1 << 44)) {
            let s = Stripe::new(n, unit).unwrap();
            let (m, off) = s.to_member(b);
            prop_assert!(m < n);
            prop_assert_eq!(s.to_logical(m, off), Some(b));
            // Within a run the member stays and its block advances by one.
            let r = s.run(b).min(1 << 20);
            prop_assert_eq!(s.to_member(b + r - 1), (m, off + r - 1));
            if n > 1 {
                prop_assert_ne!(s.to_member(b + r).0, m);
            }
        }
    }
}
