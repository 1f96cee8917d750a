#![no_main]
libfuzzer_sys::fuzz_target!(|d: &[u8]| nvme_tcp::fuzzing::pdu_stream(d));
