//! One writer: a session, an open file with an RW block layout, and the commit unit each mode
//! times — a write at the layout's storage offsets (data.rs), then what makes it durable in
//! that mode.

use std::sync::Arc;
use std::time::{Duration, Instant};

use client_tests::fs::OpenFile;
use client_tests::layout_io::BlockLayout;
use client_tests::pnfs::{iomode, BlockExtent};
use client_tests::{ClientError, Compound, Result, Session};

use super::counters::Interval;
use super::data::DataPath;
use super::Mode;

/// A writer's file: where its bytes live on the volume.
pub struct Writer {
    pub session: Arc<Session>,
    pub dir: Vec<u8>,
    pub name: String,
    pub file: OpenFile,
    pub layout: BlockLayout,
}

/// LAYOUTGET RW until `[0, size)` is covered (a server may answer less than asked).
pub async fn cover(s: &Session, f: &OpenFile, size: u64) -> Result<BlockLayout> {
    let mut all = s.layoutget(f, iomode::RW, 0, size).await?;
    loop {
        let end = all
            .extents
            .iter()
            .map(|e| e.file_offset + e.length)
            .max()
            .unwrap_or(0);
        if end >= size {
            return Ok(all);
        }
        let more = s.layoutget(f, iomode::RW, end, size - end).await?;
        if more.extents.is_empty() {
            return Err(ClientError::Protocol(format!("layout stops at {end}")));
        }
        all.stateid = more.stateid;
        all.extents.extend(more.extents);
        all.extents.sort_by_key(|e| e.file_offset);
    }
}

/// The extents of `l` clipped to `[off, off + len)`: what a client commits for one write.
pub fn clip(extents: &[BlockExtent], off: u64, len: u64) -> Vec<BlockExtent> {
    extents
        .iter()
        .filter_map(|e| {
            let lo = off.max(e.file_offset);
            let hi = (off + len).min(e.file_offset + e.length);
            (lo < hi).then(|| BlockExtent {
                file_offset: lo,
                length: hi - lo,
                storage_offset: e.storage_offset + (lo - e.file_offset),
                ..*e
            })
        })
        .collect()
}

/// Creates `name` in `dir` of `size` bytes (written through the server with FILE_SYNC WRITEs
/// when `prefill`, so the timed rounds only overwrite) and takes its RW layout.
pub async fn open_writer(
    session: Arc<Session>,
    name: &str,
    size: u64,
    prefill: bool,
) -> Result<Writer> {
    let dir = session.lookup_path("").await?;
    let file = session.create_file(&dir, name, 0o644).await?;
    if prefill {
        let data = client_tests::harness::pattern(7, size as usize);
        session
            .write_all(&file, 0, &data, client_tests::ops::Stable::FileSync)
            .await?;
    }
    let layout = cover(&session, &file, size).await?;
    Ok(Writer {
        session,
        dir,
        name: name.to_string(),
        file,
        layout,
    })
}

impl Writer {
    /// LAYOUTRETURN, CLOSE and REMOVE (untimed cleanup of a `newfiles` round).
    pub async fn remove(self) -> Result<()> {
        self.session
            .layoutreturn_file(&self.file, self.layout.stateid)
            .await?;
        self.session.close_file(&self.file).await?;
        self.session
            .run_ok(Compound::new().putfh(&self.dir).remove(&self.name))
            .await?;
        Ok(())
    }
}

/// Writes the whole file in `io` sized pieces, each followed by this mode's durability step;
/// returns each unit's latency and each LAYOUTCOMMIT's client-side [start, end]. `ping` is
/// the datasync pnfsd's session (the limit's round trip).
pub async fn run_writer(
    w: &Writer,
    data: &DataPath,
    mode: Mode,
    size: u64,
    io: u64,
    ping: &Session,
    seed: u64,
) -> Result<(Vec<Duration>, Vec<Interval>)> {
    let bytes = bytes::Bytes::from(client_tests::harness::pattern(seed, io as usize));
    let mut lats = Vec::with_capacity((size / io) as usize);
    let mut commits = Vec::new();
    let mut off = 0;
    while off < size {
        let t0 = Instant::now();
        data.write(&w.layout.extents, off, &bytes).await?;
        match mode {
            // The server flushes the data volume inside LAYOUTCOMMIT (docs/design.md §4): the
            // client does not flush itself, as the Linux block-layout client (data.rs).
            Mode::Pnfsd | Mode::Sync | Mode::Unenforced => {
                let ext = clip(&w.layout.extents, off, io);
                let c0 = Instant::now();
                w.session
                    .layoutcommit(&w.file, w.layout.stateid, off, io, off + io - 1, &ext)
                    .await?;
                commits.push((c0, Instant::now()));
            }
            Mode::Limit => {
                data.flush().await?;
                ping.run_ok(Compound::new()).await?;
            }
            Mode::Device => data.flush().await?,
            Mode::ExportSync | Mode::ExportAsync => {
                return Err(ClientError::Harness("not a layout mode".into()))
            }
        }
        lats.push(t0.elapsed());
        off += io;
    }
    Ok((lats, commits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_storage_offsets_in_step() {
        let e = BlockExtent {
            deviceid: [0; 16],
            file_offset: 0,
            length: 1 << 20,
            storage_offset: 8 << 20,
            state: 0,
        };
        let c = clip(&[e], 65536, 65536);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].file_offset, 65536);
        assert_eq!(c[0].length, 65536);
        assert_eq!(c[0].storage_offset, (8 << 20) + 65536);
        assert!(clip(&[e], 2 << 20, 4096).is_empty());
    }
}
