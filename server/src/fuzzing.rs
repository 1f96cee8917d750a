//! Entry points for cargo-fuzz targets (style.md rule 11, design.md §7). Each takes arbitrary
//! bytes and must never panic; a fuzz target is one line:
//! `fuzz_target!(|d: &[u8]| pnfsd::fuzzing::rpc_stream(d));`

use bytes::BytesMut;

use crate::nfs4::compound::{run_compound, OpEnv};
use crate::nfs4::opcode::NfsOp;
use crate::nfs4::ops::{self, OpFlags};
use crate::nfs4::state::SessionSlotRef;
use crate::nfs4::status::NfsStat;
use crate::rpc::auth::AuthPolicy;
use crate::rpc::program::{classify, Action};
use crate::rpc::record::RecordReader;
use crate::rpc::RpcSizes;
use crate::xdr::{XdrReader, XdrWriter};

/// A byte stream as a connection reads it: record marking, then each record through the RPC
/// header, credential and program checks.
pub fn rpc_stream(data: &[u8]) {
    let mut reader = RecordReader::new(1 << 16);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(rec)) = reader.decode(&mut buf) {
        if let Action::CallbackReply { body, .. } = classify(&rec, AuthPolicy::default()) {
            let _ = crate::rpc::msg::reply_results(body);
        }
    }
}

/// COMPOUND4args through the dispatcher's rules over the real op table, with operations that
/// consume one word each (the operations' own decoders get their own targets as they land).
pub fn compound_args(data: &[u8]) {
    struct Env(Option<SessionSlotRef>, bool);
    impl OpEnv for Env {
        fn meta(&self, op: NfsOp) -> Option<OpFlags> {
            ops::lookup(op).map(|d| d.flags)
        }
        fn begin(&mut self, _: u32, _: usize) {}
        fn run(
            &mut self,
            op: NfsOp,
            _: usize,
            r: &mut XdrReader<'_>,
            _: &mut XdrWriter,
        ) -> Result<(), NfsStat> {
            let v = r.u32()?;
            match op {
                NfsOp::SEQUENCE => {
                    self.0 = Some(SessionSlotRef {
                        sessionid: [0; 16],
                        clientid: 0,
                        slot: 0,
                        seqid: 0,
                        cachethis: v & 1 != 0,
                        max_ops: v >> 24,
                        max_request_size: v & 0xffff,
                        max_response_size: v & 0xfff,
                        max_response_size_cached: v & 0xff,
                    })
                }
                NfsOp::PUTROOTFH => self.1 = true,
                _ => {}
            }
            match v % 3 {
                0 => Ok(()),
                st => Err(NfsStat(st)),
            }
        }
        fn has_current_fh(&self) -> bool {
            self.1
        }
        fn session(&self) -> Option<&SessionSlotRef> {
            self.0.as_ref()
        }
        fn take_cached_reply(&mut self) -> Option<Vec<u8>> {
            None
        }
    }
    let sizes = RpcSizes {
        request_len: data.len(),
        reply_header_len: crate::rpc::msg::SUCCESS_HEADER_LEN,
    };
    let _ = run_compound(&mut Env(None, false), data, sizes);
}

#[cfg(test)]
mod tests {
    proptest::proptest! {
        #[test]
        fn entry_points_survive_random_input(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            super::rpc_stream(&data);
            super::compound_args(&data);
        }
    }
}
