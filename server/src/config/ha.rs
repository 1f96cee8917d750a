//! The MDS node's identity on a shared volume (docs/ha.md): the NVMe reservation key it
//! registers on the external namespace. Two MDS nodes of one service differ in it (and in
//! their host NQN, which the volume URL names, and their listen address), so that a standby's
//! takeover preempts exactly the old holder.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An MDS reservation key: 8 ASCII bytes "pnfsdMD" and one more, read as a big-endian u64
/// (`layout::scsi::is_mds_key`: the family no client key is ever drawn from). The default,
/// "pnfsdMDS", is the key a single MDS has always registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationKey(pub u64);

impl Default for ReservationKey {
    fn default() -> Self {
        ReservationKey(layout::scsi::MDS_PR_KEY)
    }
}

impl ReservationKey {
    pub fn parse(s: &str) -> Result<ReservationKey, String> {
        let b = s.as_bytes();
        let prefix = &layout::scsi::MDS_PR_KEY.to_be_bytes()[..7];
        match <[u8; 8]>::try_from(b) {
            Ok(k) if k.starts_with(prefix) && k[7].is_ascii_graphic() => {
                Ok(ReservationKey(u64::from_be_bytes(k)))
            }
            _ => Err(format!(
                "bad reservation_key {s:?}: 8 characters, \"pnfsdMD\" and one more letter or \
                 digit, different on each MDS node (e.g. \"pnfsdMDA\", \"pnfsdMDB\")"
            )),
        }
    }
}

impl fmt::Display for ReservationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0.to_be_bytes();
        match std::str::from_utf8(&b) {
            Ok(s) => write!(f, "{s}"),
            Err(_) => write!(f, "{:#018x}", self.0),
        }
    }
}

impl<'de> Deserialize<'de> for ReservationKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ReservationKey::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Serialize for ReservationKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_the_mds_family_parse_and_others_are_refused() {
        assert_eq!(ReservationKey::default().0, layout::scsi::MDS_PR_KEY);
        let b = ReservationKey::parse("pnfsdMDB").unwrap();
        assert!(layout::scsi::is_mds_key(b.0));
        assert_eq!(b.to_string(), "pnfsdMDB");
        for bad in [
            "",
            "pnfsdMD",
            "pnfsdMDBB",
            "pnfsdXYZ",
            "pnfsdMD ",
            "PNFSDMDA",
        ] {
            let e = ReservationKey::parse(bad).unwrap_err();
            assert!(e.contains("reservation_key"), "{bad:?}: {e}");
        }
    }
}
