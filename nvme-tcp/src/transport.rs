//! Sockets and digests (style.md rule 9): reading whole PDUs off a TCP stream with the header
//! checked before the body is read, and one writer task per connection that batches frames.

use crate::pdu::{
    validate_common, DecodeError, Digests, Fatal, Pdu, PduType, Rules, TermReq, COMMON_LEN,
    TERM_MAX_DATA,
};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Why reading a PDU stopped.
#[derive(Debug)]
pub(crate) enum RecvError {
    /// Clean end of stream between PDUs.
    Closed,
    Io(io::Error),
    /// Protocol violation: send a TermReq with `header` as its data, then close.
    Fatal {
        fatal: Fatal,
        header: Vec<u8>,
    },
    /// Bad data digest of one command's data.
    DataDigest {
        pdu_type: PduType,
        cccid: u16,
        ttag: u16,
        datal: u32,
    },
}

pub(crate) struct PduReader<R> {
    r: R,
    pub rules: Rules,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> PduReader<R> {
    pub fn new(r: R, rules: Rules) -> Self {
        PduReader {
            r,
            rules,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    pub async fn read(&mut self) -> Result<Pdu, RecvError> {
        let mut ch = [0u8; COMMON_LEN];
        let mut got = 0;
        while got < COMMON_LEN {
            match self.r.read(&mut ch[got..]).await {
                Ok(0) if got == 0 => return Err(RecvError::Closed),
                Ok(0) => return Err(RecvError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => got += n,
                Err(e) => return Err(RecvError::Io(e)),
            }
        }
        // PLEN is trusted only after the common header passed (it bounds the allocation).
        let h = validate_common(&ch, &self.rules).map_err(|fatal| RecvError::Fatal {
            fatal,
            header: ch.to_vec(),
        })?;
        let plen = h.plen as usize;
        self.buf.clear();
        self.buf.extend_from_slice(&ch);
        self.buf.resize(plen, 0);
        self.r
            .read_exact(&mut self.buf[COMMON_LEN..])
            .await
            .map_err(RecvError::Io)?;
        Pdu::decode(&self.buf, &self.rules).map_err(|e| match e {
            DecodeError::Fatal(fatal) => {
                let n = (h.hlen as usize).min(TERM_MAX_DATA).min(self.buf.len());
                RecvError::Fatal {
                    fatal,
                    header: self.buf[..n].to_vec(),
                }
            }
            DecodeError::DataDigest {
                pdu_type,
                cccid,
                ttag,
                datal,
            } => RecvError::DataDigest {
                pdu_type,
                cccid,
                ttag,
                datal,
            },
        })
    }
}

/// What the writer task is asked to do.
pub(crate) enum Out {
    Frame(Vec<u8>),
    /// Write everything queued so far, then shut the socket down.
    Close,
}

pub(crate) type OutTx = mpsc::UnboundedSender<Out>;

/// Encodes a PDU into a frame for the writer.
pub(crate) fn frame(p: &Pdu, dg: Digests) -> Out {
    let mut v = Vec::with_capacity(64);
    p.encode(dg, &mut v);
    Out::Frame(v)
}

/// A TermReq for `fatal` (sent by the receiver of the bad PDU), then close.
pub(crate) fn terminate(tx: &OutTx, to_host: bool, fatal: Fatal, header: Vec<u8>) {
    let t = TermReq {
        fes: fatal.fes,
        fei: fatal.fei,
        data: header,
    };
    let p = if to_host {
        Pdu::C2hTermReq(t)
    } else {
        Pdu::H2cTermReq(t)
    };
    let _ = tx.send(frame(&p, Digests::default()));
    let _ = tx.send(Out::Close);
}

/// Starts the writer task: it coalesces queued frames into one write (fewer syscalls at
/// high queue depth) and exits on `Close`, on a write error, or when all senders are gone.
pub(crate) fn spawn_writer<W: AsyncWrite + Unpin + Send + 'static>(mut w: W) -> OutTx {
    let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
    tokio::spawn(async move {
        let mut buf: Vec<u8> = Vec::with_capacity(256 * 1024);
        'outer: while let Some(first) = rx.recv().await {
            let mut close = false;
            match first {
                Out::Frame(f) => buf.extend_from_slice(&f),
                Out::Close => close = true,
            }
            while !close && buf.len() < 1 << 20 {
                match rx.try_recv() {
                    Ok(Out::Frame(f)) => buf.extend_from_slice(&f),
                    Ok(Out::Close) => close = true,
                    Err(_) => break,
                }
            }
            if !buf.is_empty() {
                if w.write_all(&buf).await.is_err() {
                    break 'outer;
                }
                buf.clear();
            }
            if close {
                break;
            }
        }
        let _ = w.shutdown().await;
    });
    tx
}
