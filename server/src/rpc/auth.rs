//! Credential checks for a call (RFC 5531 §8.2 and Appendix A): AUTH_NONE and AUTH_SYS.
//!
//! Every other flavor (AUTH_SHORT, AUTH_DH, RPCSEC_GSS, AUTH_TLS probes) is refused with
//! AUTH_BADCRED, as knfsd does for a flavor it has no handler for (`svc_authenticate`) and
//! as RFC 9289 §4.1 asks of a server without RPC-with-TLS. AUTH_TOOWEAK is kept for the one
//! policy refusal we have: AUTH_NONE on COMPOUND when the configuration forbids it (the NULL
//! procedure takes any known flavor, RFC 5531 §12.1).

use crate::rpc::msg::{flavor, AuthStat, Call, OpaqueAuth};
use crate::xdr::{XdrReader, XdrResult};

/// `authsys_parms.machinename<255>`.
const MAX_MACHINE_NAME: usize = 255;
/// `authsys_parms.gids<16>`.
const MAX_GIDS: usize = 16;

/// AUTH_SYS credentials of the request (AUTH_NONE maps to nobody).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cred {
    pub flavor: u32,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
    pub machine: Vec<u8>,
}

impl Cred {
    pub const NOBODY: u32 = 65534;

    /// An AUTH_NONE caller, acting as `uid`:`gid`.
    pub fn anonymous(uid: u32, gid: u32) -> Cred {
        Cred {
            flavor: flavor::AUTH_NONE,
            uid,
            gid,
            gids: Vec::new(),
            machine: Vec::new(),
        }
    }

    /// The credential an export rule makes of this one (knfsd `nfsd_setuser`): `Root` maps
    /// uid 0 to `anon_uid` and gid 0 (primary or supplementary) to `anon_gid`; `All` maps
    /// everyone to the anon ids without groups. An AUTH_NONE caller is always the anon ids.
    pub fn squashed(&self, squash: Squash, anon_uid: u32, anon_gid: u32) -> Cred {
        if self.flavor == flavor::AUTH_NONE || squash == Squash::All {
            return Cred {
                flavor: self.flavor,
                machine: self.machine.clone(),
                ..Cred::anonymous(anon_uid, anon_gid)
            };
        }
        let mut c = self.clone();
        if squash == Squash::Root {
            if c.uid == 0 {
                c.uid = anon_uid;
            }
            if c.gid == 0 {
                c.gid = anon_gid;
            }
            for g in &mut c.gids {
                if *g == 0 {
                    *g = anon_gid;
                }
            }
        }
        c
    }
}

/// Root squashing of an export rule (knfsd `root_squash` / `no_root_squash` / `all_squash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
pub enum Squash {
    /// The default, as in knfsd.
    #[default]
    #[serde(rename = "root_squash")]
    Root,
    #[serde(rename = "no_root_squash")]
    None,
    #[serde(rename = "all_squash")]
    All,
}

impl Squash {
    pub fn name(self) -> &'static str {
        match self {
            Squash::Root => "root_squash",
            Squash::None => "no_root_squash",
            Squash::All => "all_squash",
        }
    }
}

/// What the configuration allows.
#[derive(Debug, Clone, Copy)]
pub struct AuthPolicy {
    /// Accept AUTH_NONE for COMPOUND (the caller is then "nobody").
    pub allow_none: bool,
}

impl Default for AuthPolicy {
    fn default() -> Self {
        AuthPolicy { allow_none: true }
    }
}

/// Checks the credential and verifier of `call`; `null_proc` is the NULL procedure.
pub fn authenticate(
    call: &Call<'_>,
    null_proc: bool,
    policy: AuthPolicy,
) -> Result<Cred, AuthStat> {
    // Both flavors we accept carry an AUTH_NONE verifier with an empty body (knfsd
    // `svcauth_unix_accept` / `svcauth_null_accept` answer BADVERF otherwise).
    let verf_ok = |v: &OpaqueAuth<'_>| v.flavor == flavor::AUTH_NONE && v.body.is_empty();
    match call.cred.flavor {
        flavor::AUTH_NONE => {
            if !call.cred.body.is_empty() {
                return Err(AuthStat::BadCred);
            }
            if !verf_ok(&call.verf) {
                return Err(AuthStat::BadVerf);
            }
            if !null_proc && !policy.allow_none {
                return Err(AuthStat::TooWeak);
            }
            Ok(Cred::anonymous(Cred::NOBODY, Cred::NOBODY))
        }
        flavor::AUTH_SYS => {
            let cred = decode_authsys(call.cred.body).ok_or(AuthStat::BadCred)?;
            if !verf_ok(&call.verf) {
                return Err(AuthStat::BadVerf);
            }
            Ok(cred)
        }
        _ => Err(AuthStat::BadCred),
    }
}

/// `authsys_parms`; `None` if malformed (short, too long, trailing bytes).
pub fn decode_authsys(body: &[u8]) -> Option<Cred> {
    let mut r = XdrReader::new(body);
    let cred = read_authsys(&mut r).ok()?;
    r.finish().ok()?;
    Some(cred)
}

/// `authsys_parms` from a larger XDR stream (the credential body of a call, or an entry of
/// CREATE_SESSION's `callback_sec_parms4`).
pub fn read_authsys(r: &mut XdrReader<'_>) -> XdrResult<Cred> {
    let _stamp = r.u32()?;
    let machine = r.opaque_vec(MAX_MACHINE_NAME)?;
    let uid = r.u32()?;
    let gid = r.u32()?;
    let n = r.array_len(MAX_GIDS, 4)?;
    let mut gids = Vec::with_capacity(n);
    for _ in 0..n {
        gids.push(r.u32()?);
    }
    Ok(Cred {
        flavor: flavor::AUTH_SYS,
        uid,
        gid,
        gids,
        machine,
    })
}

/// Encodes `authsys_parms` (for backchannel calls with the client's AUTH_SYS parameters).
pub fn encode_authsys(c: &Cred, stamp: u32) -> Vec<u8> {
    let mut w = crate::xdr::XdrWriter::new();
    w.u32(stamp);
    w.opaque(&c.machine[..c.machine.len().min(MAX_MACHINE_NAME)]);
    w.u32(c.uid);
    w.u32(c.gid);
    let gids = &c.gids[..c.gids.len().min(MAX_GIDS)];
    w.u32(gids.len() as u32);
    for g in gids {
        w.u32(*g);
    }
    w.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(cred: OpaqueAuth<'a>, verf: OpaqueAuth<'a>) -> Call<'a> {
        Call {
            xid: 1,
            prog: 100003,
            vers: 4,
            proc_: 1,
            cred,
            verf,
            args: &[],
        }
    }

    const NONE: OpaqueAuth<'static> = OpaqueAuth {
        flavor: flavor::AUTH_NONE,
        body: &[],
    };

    fn sys_cred(uid: u32, gids: &[u32]) -> Cred {
        Cred {
            flavor: flavor::AUTH_SYS,
            uid,
            gid: 100,
            gids: gids.to_vec(),
            machine: b"client".to_vec(),
        }
    }

    #[test]
    fn auth_sys_round_trips_and_maps_ids() {
        let want = sys_cred(1000, &[1, 2, 3]);
        let body = encode_authsys(&want, 5);
        let got = authenticate(
            &call(
                OpaqueAuth {
                    flavor: flavor::AUTH_SYS,
                    body: &body,
                },
                NONE,
            ),
            false,
            AuthPolicy::default(),
        );
        assert_eq!(got, Ok(want));
    }

    #[test]
    fn malformed_auth_sys_is_badcred() {
        let good = encode_authsys(&sys_cred(0, &[]), 0);
        // Short, trailing byte, 17 gids.
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0; 4]);
        let mut many = crate::xdr::XdrWriter::new();
        many.u32(0);
        many.opaque(b"h");
        many.u32(0);
        many.u32(0);
        many.u32(17);
        for _ in 0..17 {
            many.u32(1);
        }
        for body in [&good[..good.len() - 1], &trailing[..], &many.buf[..]] {
            let c = call(
                OpaqueAuth {
                    flavor: flavor::AUTH_SYS,
                    body,
                },
                NONE,
            );
            assert_eq!(
                authenticate(&c, false, AuthPolicy::default()),
                Err(AuthStat::BadCred)
            );
        }
    }

    #[test]
    fn verifier_and_flavor_rules() {
        let body = encode_authsys(&sys_cred(0, &[]), 0);
        let sys = OpaqueAuth {
            flavor: flavor::AUTH_SYS,
            body: &body,
        };
        let p = AuthPolicy::default();
        let bad_verf = OpaqueAuth {
            flavor: flavor::AUTH_NONE,
            body: &[1, 2, 3, 4],
        };
        assert_eq!(
            authenticate(&call(sys, bad_verf), false, p),
            Err(AuthStat::BadVerf)
        );
        assert_eq!(
            authenticate(&call(sys, sys), false, p),
            Err(AuthStat::BadVerf)
        );
        assert_eq!(
            authenticate(&call(NONE, bad_verf), false, p),
            Err(AuthStat::BadVerf)
        );
        let none_with_body = OpaqueAuth {
            flavor: flavor::AUTH_NONE,
            body: &[0; 4],
        };
        assert_eq!(
            authenticate(&call(none_with_body, NONE), false, p),
            Err(AuthStat::BadCred)
        );
        for f in [
            flavor::AUTH_SHORT,
            flavor::AUTH_DH,
            flavor::RPCSEC_GSS,
            flavor::AUTH_TLS,
            99,
        ] {
            let c = call(
                OpaqueAuth {
                    flavor: f,
                    body: &[],
                },
                NONE,
            );
            assert_eq!(
                authenticate(&c, true, p),
                Err(AuthStat::BadCred),
                "flavor {f}"
            );
        }
        // AUTH_NONE: nobody; refused as too weak for COMPOUND only when the policy says so.
        let anon = authenticate(&call(NONE, NONE), false, p).unwrap();
        assert_eq!((anon.uid, anon.gid), (Cred::NOBODY, Cred::NOBODY));
        let strict = AuthPolicy { allow_none: false };
        assert_eq!(
            authenticate(&call(NONE, NONE), false, strict),
            Err(AuthStat::TooWeak)
        );
        assert!(authenticate(&call(NONE, NONE), true, strict).is_ok());
    }
}
