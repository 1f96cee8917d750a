//! Sizes in the file and on the command line: bytes, or a number with a binary suffix.

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// A size written as bytes (`8589934592`) or with a suffix (`"8G"`, `"512M"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(Size(n)),
            Raw::Str(s) => parse_size(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `123`, `4K`, `512M`, `8G`, `1T` (binary multiples; a trailing `iB`/`B` is allowed).
pub fn parse_size(s: &str) -> Result<Size, ConfigError> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(ConfigError::Size(s.to_string())),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| ConfigError::Size(s.to_string()))?;
    n.checked_mul(1 << shift)
        .map(Size)
        .ok_or_else(|| ConfigError::Size(s.to_string()))
}
