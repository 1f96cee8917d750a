//! Names a client sends: directory entries (`component4`, RFC 8881 §14.2) and extended
//! attribute keys (`xattrkey4`, RFC 8276 §3.2). Their length bounds are the store's, which
//! enforces them.

use crate::nfs4::status::NfsStat;
use crate::store::{NAME_MAX, XATTR_NAME_MAX};
use crate::xdr::XdrReader;

/// A `component4` read from the wire. Its length is checked by `check_name`, so the decode
/// bound is only what the request holds.
pub fn decode_component(r: &mut XdrReader<'_>) -> Result<Vec<u8>, NfsStat> {
    let n = r.remaining();
    Ok(r.string(n)?)
}

/// The one check of a `utf8str_*` (tags, names, keys; RFC 8881 §1.4.2, §14): valid UTF-8
/// and no noncharacter (Unicode §23.7: U+FDD0–U+FDEF and the last two code points of every
/// plane, U+FFFE, U+FFFF, U+1FFFE, …), which no string exchanged between systems carries.
pub fn is_utf8str(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok_and(|s| !s.chars().any(is_noncharacter))
}

fn is_noncharacter(c: char) -> bool {
    let c = u32::from(c);
    (0xfdd0..=0xfdef).contains(&c) || c & 0xfffe == 0xfffe
}

/// Rules for a name that is looked up or created (RFC 8881 §14.2, §18.4.3): empty → INVAL,
/// longer than the store's `NAME_MAX` (what `maxname` advertises) → NAMETOOLONG, not a
/// `utf8str` (`is_utf8str`) → INVAL, a '/' or NUL → BADCHAR.
pub fn check_name(name: &[u8]) -> Result<(), NfsStat> {
    if name.is_empty() {
        return Err(NfsStat::INVAL);
    }
    if name.len() > NAME_MAX {
        return Err(NfsStat::NAMETOOLONG);
    }
    if !is_utf8str(name) {
        return Err(NfsStat::INVAL);
    }
    if name.iter().any(|c| *c == b'/' || *c == 0) {
        return Err(NfsStat::BADCHAR);
    }
    Ok(())
}

/// A name that a new directory entry would get, or that is removed / renamed: "." and ".."
/// are never entries of an NFSv4 directory, so they are BADNAME.
pub fn check_new_name(name: &[u8]) -> Result<(), NfsStat> {
    check_name(name)?;
    if is_dot(name) {
        return Err(NfsStat::BADNAME);
    }
    Ok(())
}

/// "." or "..".
pub fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// An `xattrkey4`: empty → INVAL, too long → NAMETOOLONG, not UTF-8 → INVAL. The store
/// keeps names as given (pynfs and the Linux client send the "user." prefix themselves).
pub fn decode_xattr_key(r: &mut XdrReader<'_>) -> Result<Vec<u8>, NfsStat> {
    let name = decode_component(r)?;
    if name.is_empty() || name.contains(&0) || !is_utf8str(&name) {
        return Err(NfsStat::INVAL);
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(NfsStat::NAMETOOLONG);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdr::XdrWriter;

    #[test]
    fn names() {
        assert_eq!(check_name(b""), Err(NfsStat::INVAL));
        assert_eq!(check_name(&[b'a'; 256]), Err(NfsStat::NAMETOOLONG));
        assert_eq!(check_name(&[b'a'; 255]), Ok(()));
        assert_eq!(check_name(b"\xff\xfe"), Err(NfsStat::INVAL));
        assert_eq!(check_name(b"\xef\xbf\xbe"), Err(NfsStat::INVAL));
        assert_eq!(check_name(b"\xed\xa0\x80"), Err(NfsStat::INVAL));
        assert_eq!(check_name(b"a/b"), Err(NfsStat::BADCHAR));
        assert_eq!(check_name(b"a\0b"), Err(NfsStat::BADCHAR));
        assert_eq!(check_name("é".as_bytes()), Ok(()));
        assert_eq!(check_name(b".."), Ok(()));
        assert_eq!(check_new_name(b".."), Err(NfsStat::BADNAME));
        assert_eq!(check_new_name(b"."), Err(NfsStat::BADNAME));
        assert_eq!(check_new_name(b"..."), Ok(()));
    }

    #[test]
    fn component_decoding() {
        let mut w = XdrWriter::new();
        w.string(b"hello");
        assert_eq!(
            decode_component(&mut XdrReader::new(&w.buf)),
            Ok(b"hello".to_vec())
        );
        // A length past the end of the request is BADXDR, not an allocation.
        assert_eq!(
            decode_component(&mut XdrReader::new(&[0xff, 0xff, 0xff, 0xff, b'a'])),
            Err(NfsStat::BADXDR)
        );
    }

    #[test]
    fn noncharacters_are_refused() {
        for bad in [
            "\u{fffe}",
            "a\u{ffff}",
            "\u{fdd0}",
            "x\u{fdef}y",
            "\u{1fffe}",
            "\u{10ffff}",
        ] {
            assert!(!is_utf8str(bad.as_bytes()), "{bad:?}");
            assert_eq!(check_name(bad.as_bytes()), Err(NfsStat::INVAL), "{bad:?}");
        }
        for good in [
            "",
            "tag",
            "\u{fdcf}",
            "\u{fdf0}",
            "\u{fffd}",
            "\u{1f600}",
            "\u{10fffd}",
        ] {
            assert!(is_utf8str(good.as_bytes()), "{good:?}");
        }
        assert!(!is_utf8str(&[0xff, 0xfe]));
    }
}
