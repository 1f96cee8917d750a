#![no_main]
libfuzzer_sys::fuzz_target!(|d: &[u8]| pnfsd::fuzzing::rpc_stream(d));
