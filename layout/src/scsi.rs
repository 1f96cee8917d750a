//! The pNFS SCSI layout's wire bodies (RFC 8154 §2), used over NVMe as RFC 9561 describes.
//!
//! Wire formats (XDR, big-endian):
//! ```text
//! pnfs_scsi_extent4 (44 bytes)      = pnfs_block_extent4 (RFC 8154 §2.4.1: same fields)
//! pnfs_scsi_layout4 (LAYOUTGET)     count u32 | extent4 × count
//! pnfs_scsi_layoutupdate4 (COMMIT)  count u32 | pnfs_scsi_range4 × count
//!     pnfs_scsi_range4 (16 bytes)   offset u64 | length u64   (file bytes, RFC 8154 §2.5)
//! pnfs_scsi_deviceaddr4 (GETDEVICEINFO, one BASE volume, RFC 8154 §2.3):
//!     count u32 = 1 | type u32 = PNFS_SCSI_VOLUME_BASE (4)
//!     | code_set u32 | designator_type u32 | designator opaque<> | pr_key u64
//! ```
//! Over NVMe (RFC 9561 §2) the designator is the namespace's NGUID (16 bytes) or EUI-64 (8
//! bytes), with designator type EUI-64 and code set binary — Linux opens it as
//! `/dev/disk/by-id/nvme-eui.<hex>` — and `pr_key` is the reservation key the client
//! registers before any I/O.
//!
//! Pure encode/decode: no I/O, no NFS state.

use crate::block::{volume_type, BlockExtent, BodyError};
use bytecodec::{Reader, Writer};

/// `pnfs_scsi_code_set` (RFC 8154 §2.3.1).
pub mod code_set {
    pub const BINARY: u32 = 1;
    pub const ASCII: u32 = 2;
    pub const UTF8: u32 = 3;
}

/// `pnfs_scsi_designator_type` (RFC 8154 §2.3.1).
pub mod designator_type {
    pub const T10: u32 = 1;
    pub const EUI64: u32 = 2;
    pub const NAA: u32 = 3;
    pub const NAME: u32 = 8;
}

/// Size of one `pnfs_scsi_range4` on the wire.
pub const RANGE_WIRE_SIZE: usize = 16;
const _: () = assert!(RANGE_WIRE_SIZE == 8 + 8);

/// The reservation key a single MDS registers on the volume (never a client's, see
/// [`client_pr_key`]); ASCII "pnfsdMDS". With MDS failover each MDS node has a key of its
/// own from the same family (`reservation_key`, ASCII "pnfsdMD" and one more byte), so that
/// a standby can preempt exactly the old holder's key.
pub const MDS_PR_KEY: u64 = u64::from_be_bytes(*b"pnfsdMDS");

/// Whether `key` is an MDS's: "pnfsdMD" followed by any byte ([`MDS_PR_KEY`]'s family).
pub fn is_mds_key(key: u64) -> bool {
    key >> 8 == MDS_PR_KEY >> 8
}

/// Never a client's key: 0 ("no key" to Register) and the MDS family.
fn excluded(key: u64) -> bool {
    key == 0 || is_mds_key(key)
}

/// `pnfs_scsi_layout4`: the extents are `pnfs_block_extent4`s byte for byte.
pub fn encode_layout(list: &[BlockExtent]) -> Vec<u8> {
    BlockExtent::encode_list(list)
}

/// `pnfs_scsi_range4`: a file byte range the client wrote (RFC 8154 §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScsiRange {
    pub offset: u64,
    pub length: u64,
}

/// `pnfs_scsi_layoutupdate4` body.
pub fn encode_update(list: &[ScsiRange]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + list.len() * RANGE_WIRE_SIZE);
    let mut w = Writer::new(&mut out);
    w.u32_be(list.len() as u32);
    for r in list {
        w.u64_be(r.offset).u64_be(r.length);
    }
    out
}

/// Decodes a whole `pnfs_scsi_layoutupdate4`; the count is checked against the body
/// before anything is allocated, trailing bytes are an error.
pub fn decode_update(body: &[u8]) -> Result<Vec<ScsiRange>, BodyError> {
    let mut r = Reader::new(body);
    let n = r.u32_be()?;
    let need = (n as usize).saturating_mul(RANGE_WIRE_SIZE);
    if need > r.remaining() {
        return Err(BodyError::Count(n));
    }
    if need < r.remaining() {
        return Err(BodyError::Trailing);
    }
    (0..n)
        .map(|_| {
            Ok(ScsiRange {
                offset: r.u64_be()?,
                length: r.u64_be()?,
            })
        })
        .collect()
}

/// An EUI-64-type designator: 8 bytes (an EUI-64) or 16 (an NVMe NGUID, RFC 9561 §2), so
/// the XDR opaque never needs padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eui64Designator {
    Eui64([u8; 8]),
    Nguid([u8; 16]),
}

impl Eui64Designator {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Eui64Designator::Eui64(b) => b,
            Eui64Designator::Nguid(b) => b,
        }
    }
}

/// `pnfs_scsi_deviceaddr4` with one BASE volume named by an EUI-64-type designator (binary
/// code set) and carrying the key the client is to register.
pub fn eui64_deviceaddr(designator: Eui64Designator, pr_key: u64) -> Vec<u8> {
    eui_deviceaddr(designator.bytes(), pr_key)
}

/// As [`eui64_deviceaddr`] for a designator of any EUI length: 8 bytes (an EUI-64) or 16 (an
/// NVMe NGUID, which RFC 9561 §2 also carries as designator type EUI-64).
pub fn eui_deviceaddr(designator: &[u8], pr_key: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + designator.len());
    Writer::new(&mut out)
        .u32_be(1)
        .u32_be(volume_type::SCSI)
        .u32_be(code_set::BINARY)
        .u32_be(designator_type::EUI64)
        .u32_be(designator.len() as u32)
        .bytes(designator)
        // XDR opaque<>: padded to 4 bytes (8 and 16 need none).
        .zeros((4 - designator.len() % 4) % 4)
        .u64_be(pr_key);
    out
}

/// A decoded BASE volume (tests and tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseVolume {
    pub code_set: u32,
    pub designator_type: u32,
    pub designator: Vec<u8>,
    pub pr_key: u64,
}

/// Decodes a `pnfs_scsi_deviceaddr4` made of BASE volumes only.
pub fn decode_deviceaddr(b: &[u8]) -> Result<Vec<BaseVolume>, BodyError> {
    let mut r = Reader::new(b);
    let n = r.u32_be()?;
    if (n as usize).saturating_mul(24) > r.remaining() {
        return Err(BodyError::Count(n));
    }
    let mut out = Vec::new();
    for _ in 0..n {
        if r.u32_be()? != volume_type::SCSI {
            return Err(BodyError::Count(n));
        }
        let code_set = r.u32_be()?;
        let designator_type = r.u32_be()?;
        let len = r.u32_be()? as usize;
        let d = r.bytes(len.next_multiple_of(4))?;
        let pr_key = r.u64_be()?;
        out.push(BaseVolume {
            code_set,
            designator_type,
            designator: d[..len].to_vec(),
            pr_key,
        });
    }
    r.finish()?;
    Ok(out)
}

/// The reservation key of a client: a bijection of its clientid (so unique among the
/// server's clients, RFC 8154 §2.3.2), never 0 (0 means "no key" to Register) nor an MDS's.
/// Clientids carry the server instance (`nfs4::state`: epoch << 32 | counter), and so do
/// the keys: [`clientid_of_key`] tells which instance issued a registered key.
pub fn client_pr_key(clientid: u64) -> u64 {
    let mut k = mix(clientid);
    // Cycle-walking: an excluded value moves on along `mix`'s own cycle, which keeps the
    // map one-to-one (on clientids other than the two excluded values themselves).
    while excluded(k) {
        k = mix(k);
    }
    k
}

/// The clientid `key` is the key of ([`client_pr_key`] run backwards); `None` for 0 and the
/// MDS key, which are nobody's.
pub fn clientid_of_key(key: u64) -> Option<u64> {
    if excluded(key) {
        return None;
    }
    let mut c = unmix(key);
    while excluded(c) {
        c = unmix(c);
    }
    Some(c)
}

const MIX_ADD: u64 = 0x9E37_79B9_7F4A_7C15;
const MIX_MUL1: u64 = 0xBF58_476D_1CE4_E5B9;
const MIX_MUL2: u64 = 0x94D0_49BB_1331_11EB;

/// splitmix64's finaliser: a bijection of u64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(MIX_ADD);
    z = (z ^ (z >> 30)).wrapping_mul(MIX_MUL1);
    z = (z ^ (z >> 27)).wrapping_mul(MIX_MUL2);
    z ^ (z >> 31)
}

/// The inverse of [`mix`].
fn unmix(mut z: u64) -> u64 {
    z = unshift(z, 31);
    z = z.wrapping_mul(inverse(MIX_MUL2));
    z = unshift(z, 27);
    z = z.wrapping_mul(inverse(MIX_MUL1));
    z = unshift(z, 30);
    z.wrapping_sub(MIX_ADD)
}

/// The `x` with `x ^ (x >> k) == y`: each round fixes `k` more high bits.
fn unshift(y: u64, k: u32) -> u64 {
    let mut x = y;
    for _ in 0..64 / k {
        x = y ^ (x >> k);
    }
    x
}

/// The inverse of an odd `a` modulo 2^64 (Newton: each round doubles the correct low bits,
/// from the 3 that `a * a ≡ 1 (mod 8)` gives).
const fn inverse(a: u64) -> u64 {
    let mut x = a;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::ExtentState;

    #[test]
    fn update_round_trips_at_16_bytes_each() {
        let l = [
            ScsiRange {
                offset: 0,
                length: 8192,
            },
            ScsiRange {
                offset: 1 << 40,
                length: 4096,
            },
        ];
        let b = encode_update(&l);
        assert_eq!(b.len(), 4 + 32);
        assert_eq!(&b[..4], &[0, 0, 0, 2]);
        assert_eq!(&b[4..12], &0u64.to_be_bytes());
        assert_eq!(&b[12..20], &8192u64.to_be_bytes());
        assert_eq!(&b[20..28], &(1u64 << 40).to_be_bytes());
        assert_eq!(decode_update(&b).unwrap(), l.to_vec());
        assert_eq!(decode_update(&0u32.to_be_bytes()), Ok(vec![]));
    }

    #[test]
    fn bad_updates_are_refused() {
        let b = encode_update(&[ScsiRange {
            offset: 0,
            length: 1,
        }]);
        assert_eq!(decode_update(&b[..b.len() - 1]), Err(BodyError::Count(1)));
        let mut t = b.clone();
        t.push(0);
        assert_eq!(decode_update(&t), Err(BodyError::Trailing));
        assert_eq!(decode_update(&[0, 0]), Err(BodyError::Short));
        assert_eq!(
            decode_update(&u32::MAX.to_be_bytes()),
            Err(BodyError::Count(u32::MAX))
        );
        // A block-layout body (44-byte extents) is not a SCSI update.
        let blk = BlockExtent::encode_list(&[BlockExtent {
            deviceid: [1; 16],
            file_offset: 0,
            length: 4096,
            storage_offset: 0,
            state: ExtentState::READ_WRITE_DATA,
        }]);
        assert!(decode_update(&blk).is_err());
    }

    #[test]
    fn layout_is_block_extents() {
        let e = BlockExtent {
            deviceid: [3; 16],
            file_offset: 4096,
            length: 4096,
            storage_offset: 1 << 20,
            state: ExtentState::INVALID_DATA,
        };
        let b = encode_layout(&[e]);
        assert_eq!(b.len(), 4 + 44);
        assert_eq!(BlockExtent::decode_list(&b).unwrap(), vec![e]);
    }

    #[test]
    fn deviceaddr_names_the_eui64_in_binary_with_the_key() {
        let eui = [0x02, 1, 2, 3, 4, 5, 6, 0xff];
        let b = eui64_deviceaddr(Eui64Designator::Eui64(eui), 0x1122_3344_5566_7788);
        assert_eq!(b.len(), 4 * 5 + 8 + 8);
        assert_eq!(&b[4..8], &4u32.to_be_bytes()); // PNFS_SCSI_VOLUME_BASE
        assert_eq!(&b[8..12], &1u32.to_be_bytes()); // PS_CODE_SET_BINARY
        assert_eq!(&b[12..16], &2u32.to_be_bytes()); // PS_DESIGNATOR_EUI64
        assert_eq!(&b[16..20], &8u32.to_be_bytes());
        assert_eq!(&b[20..28], &eui);
        assert_eq!(&b[28..], &0x1122_3344_5566_7788u64.to_be_bytes());
        let v = decode_deviceaddr(&b).unwrap();
        assert_eq!(
            v,
            vec![BaseVolume {
                code_set: code_set::BINARY,
                designator_type: designator_type::EUI64,
                designator: eui.to_vec(),
                pr_key: 0x1122_3344_5566_7788,
            }]
        );
        assert!(decode_deviceaddr(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn deviceaddr_carries_a_16_byte_nguid() {
        let nguid: [u8; 16] = std::array::from_fn(|i| i as u8 + 0xa0);
        let b = eui64_deviceaddr(Eui64Designator::Nguid(nguid), 7);
        assert_eq!(b.len(), 4 * 5 + 16 + 8);
        assert_eq!(&b[16..20], &16u32.to_be_bytes());
        assert_eq!(&b[20..36], &nguid);
        let v = decode_deviceaddr(&b).unwrap();
        assert_eq!(v[0].designator, nguid.to_vec());
        assert_eq!(v[0].designator_type, designator_type::EUI64);
        assert_eq!(v[0].pr_key, 7);
    }

    #[test]
    fn keys_run_back_to_their_clientid() {
        assert_eq!(inverse(MIX_MUL1).wrapping_mul(MIX_MUL1), 1);
        assert_eq!(inverse(MIX_MUL2).wrapping_mul(MIX_MUL2), 1);
        let mut c = 0x1234_5678_9abc_def0u64;
        for _ in 0..10_000 {
            c = mix(c);
            assert_eq!(unmix(mix(c)), c);
            assert_eq!(clientid_of_key(client_pr_key(c)), Some(c));
        }
        // The epoch of a clientid survives the round trip (what the restart sweep checks).
        for epoch in [1u64, 0xdead_beef, u32::MAX as u64] {
            for n in 1..100u64 {
                let k = client_pr_key(epoch << 32 | n);
                assert_eq!(clientid_of_key(k).map(|c| c >> 32), Some(epoch));
            }
        }
        // The clientids whose plain hash is excluded walk on, and still come back.
        for bad in [0, MDS_PR_KEY] {
            let c = unmix(bad);
            let k = client_pr_key(c);
            assert!(k != 0 && k != MDS_PR_KEY && k != mix(c));
            assert_eq!(clientid_of_key(k), Some(c));
        }
        assert_eq!(clientid_of_key(0), None);
        assert_eq!(clientid_of_key(MDS_PR_KEY), None);
        // Every key of the MDS family is nobody's, and no clientid maps into it.
        let node_b = u64::from_be_bytes(*b"pnfsdMDB");
        assert!(is_mds_key(node_b) && is_mds_key(MDS_PR_KEY) && !is_mds_key(node_b ^ 1 << 8));
        assert_eq!(clientid_of_key(node_b), None);
        for last in 0..=255u64 {
            let c = unmix(MDS_PR_KEY & !0xff | last);
            let k = client_pr_key(c);
            assert!(!excluded(k));
            assert_eq!(clientid_of_key(k), Some(c));
        }
    }

    #[test]
    fn client_keys_are_distinct_nonzero_and_not_the_mds_key() {
        let mut seen = std::collections::HashSet::new();
        for c in (0..2000u64).chain([u64::MAX, 1 << 32, (7 << 32) | 1]) {
            let k = client_pr_key(c);
            assert!(k != 0 && k != MDS_PR_KEY);
            assert!(seen.insert(k), "clientid {c} collides");
            assert_eq!(client_pr_key(c), k);
        }
    }

    #[test]
    fn deviceaddr_of_any_eui_length() {
        let eui = [0x02, 1, 2, 3, 4, 5, 6, 0xff];
        let b = eui_deviceaddr(&eui, 7);
        assert_eq!(b.len(), 4 * 5 + 8 + 8);
        assert_eq!(&b[16..20], &8u32.to_be_bytes());
        assert_eq!(&b[20..28], &eui);
        assert_eq!(decode_deviceaddr(&b).unwrap()[0].designator, eui.to_vec());
        let nguid: Vec<u8> = (1..=16).collect();
        let b = eui_deviceaddr(&nguid, 9);
        assert_eq!(b.len(), 4 * 5 + 16 + 8);
        assert_eq!(&b[16..20], &16u32.to_be_bytes());
        let v = decode_deviceaddr(&b).unwrap();
        assert_eq!((v[0].designator.clone(), v[0].pr_key), (nguid, 9));
        assert_eq!(v[0].designator_type, designator_type::EUI64);
    }
}
