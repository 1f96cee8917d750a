//! CapsuleCmd and CapsuleResp (NVMe/TCP 1.0 §3.6.2.6, §3.6.2.7): the common header, then
//! the 64-byte SQE or the 16-byte CQE (command.rs); a CapsuleCmd's in-capsule data at PDO.

use super::{Cqe, Sqe, CAPSULE_CMD_HLEN, CAPSULE_RESP_HLEN, COMMON_LEN};
use bytecodec::{get_array, put_bytes, Error};

const _: () = assert!(COMMON_LEN + Sqe::LEN == CAPSULE_CMD_HLEN);
const _: () = assert!(COMMON_LEN + Cqe::LEN == CAPSULE_RESP_HLEN);

#[inline]
pub(super) fn put_cmd(sqe: &Sqe, s: &mut [u8]) {
    put_bytes(s, 0, &sqe.0);
}

#[inline]
pub(super) fn get_cmd(s: &[u8]) -> Result<Sqe, Error> {
    get_array(s, 0).map(Sqe)
}

#[inline]
pub(super) fn put_resp(cqe: &Cqe, s: &mut [u8]) {
    put_bytes(s, 0, &cqe.to_bytes());
}

#[inline]
pub(super) fn get_resp(s: &[u8]) -> Result<Cqe, Error> {
    get_array(s, 0).map(|b| Cqe::decode(&b))
}
