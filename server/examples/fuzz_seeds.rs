//! Writes the seed corpus of every target in `fuzz/` (docs/fuzzing.md):
//! `cargo run -p pnfsd --example fuzz_seeds -- fuzz/corpus` makes `fuzz/corpus/<target>/<name>`.
//! The seeds are built by the same encoders the server and the log use, so the fuzzers
//! start from well-formed input and mutate from there.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    use pnfsd::fuzzing::seeds;
    let mut all: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for (n, d) in seeds::rpc_records() {
        all.push(("rpc_stream", n, d));
    }
    for (n, d) in seeds::compounds() {
        all.push(("compound_args", n, d));
    }
    for (n, d) in seeds::compound_ops_inputs() {
        all.push(("compound_ops", n, d));
    }
    for (n, d) in seeds::layout_bodies() {
        all.push(("layout_bodies", n, d));
    }
    for (n, d) in seeds::superblocks() {
        all.push(("superblock", n, d));
    }
    for (n, d) in seeds::store_images() {
        all.push(("store_image", n, d));
    }
    for (t, n, d) in metalog::fuzzing::seeds() {
        let target = match t {
            "items" => "log_items",
            "record" => "log_record",
            _ => "log_recovery",
        };
        all.push((target, n, d));
    }
    for (n, d) in nvme_tcp::fuzzing::seeds() {
        all.push(("nvme_pdu", n, d));
    }
    for (target, name, data) in &all {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), data)?;
    }
    println!("{} seeds in {}", all.len(), root.display());
    Ok(())
}
