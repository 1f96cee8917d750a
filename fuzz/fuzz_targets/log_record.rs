#![no_main]
libfuzzer_sys::fuzz_target!(|d: &[u8]| metalog::fuzzing::record(d));
