//! The startup pipeline that lets a snapshot load or a WAL replay use every core.
//!
//! One thread reads records (CRC checks, snappy decompression) and copies them into batches; `workers`
//! threads decode batches (record parsing, label and symbol hashing, chunk decoding); the calling thread
//! applies the decoded batches to the head in read order, so the result is exactly that of a single-threaded
//! replay. Channels are bounded, so at most a few batches are in flight whatever the WAL's size. Workers hand
//! decoded batches' buffers back to the reader, which fills them again: a fresh buffer would grow by doubling
//! (copying) and fault in new pages, which took a tenth of the reader's time over a 300 MB snapshot.
//!
//! Stopping early: when `apply` fails, the calling thread drops its receivers; workers then fail to send
//! and stop, the reader fails to send and returns, and the scope joins them. A panicking thread ends the
//! stream early, and the scope then propagates its panic.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use heddle_wal::Position;

use crate::error::TsdbError;

/// Bytes of records in a batch.
const BATCH_BYTES: usize = 256 << 10;
/// Batches waiting in each channel.
const DEPTH: usize = 4;
/// Room a batch buffer has beyond [`BATCH_BYTES`] for the record that fills it: most records fit, a larger one
/// grows the buffer.
const RECORD_ROOM: usize = 64 << 10;

/// Records read from a WAL or snapshot, copied into one buffer.
#[derive(Debug)]
pub(super) struct RawBatch {
    buf: Vec<u8>,
    ends: Vec<usize>,
    starts: Vec<Position>,
}

impl RawBatch {
    fn with_capacity() -> Self {
        Self {
            buf: Vec::with_capacity(BATCH_BYTES + RECORD_ROOM),
            ends: Vec::new(),
            starts: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
        self.starts.clear();
    }

    /// The records, with the position each started at.
    pub(super) fn records(&self) -> impl Iterator<Item = (&[u8], Position)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .zip(&self.starts)
            .map(|((s, &e), &pos)| (self.buf.get(s..e).unwrap_or(&[]), pos))
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Number of records.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Bytes of all records.
    pub(super) fn bytes(&self) -> usize {
        self.buf.len()
    }
}

/// Where the reader puts records; batches go to the workers in turn.
#[derive(Debug)]
pub(super) struct Sink<'a> {
    batch: RawBatch,
    seq: usize,
    txs: &'a [SyncSender<RawBatch>],
    /// Buffers of batches the workers are done with.
    spent: Receiver<RawBatch>,
}

impl Sink<'_> {
    /// Queues a record; fails when the consumer stopped.
    pub(super) fn push(&mut self, rec: &[u8], start: Position) -> Result<(), TsdbError> {
        self.batch.buf.extend_from_slice(rec);
        self.batch.ends.push(self.batch.buf.len());
        self.batch.starts.push(start);
        if self.batch.buf.len() >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TsdbError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let next = self.spent.try_recv().unwrap_or_else(|_| RawBatch::with_capacity());
        let batch = std::mem::replace(&mut self.batch, next);
        let tx = &self.txs[self.seq % self.txs.len()];
        self.seq += 1;
        // The receiver is gone only when the consumer stopped on an error of its own, which it returns.
        tx.send(batch).map_err(|_| TsdbError::Closed)
    }
}

/// How many decode workers to use: one per core beyond the reader's and the applier's, at least one.
pub(super) fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(2).max(1))
}

/// Runs `read` on its own thread feeding a [`Sink`], `decode` on `workers` threads, and `apply` on the
/// calling thread in read order. Returns what `read` returned; the first error of `apply` or `read` wins
/// (in that order).
pub(super) fn run<T, D, R, Dec, A>(workers: usize, read: R, decode: Dec, mut apply: A) -> Result<T, TsdbError>
where
    T: Send,
    D: Send,
    R: FnOnce(&mut Sink<'_>) -> Result<T, TsdbError> + Send,
    Dec: Fn(&RawBatch) -> D + Sync,
    A: FnMut(D) -> Result<(), TsdbError>,
{
    let workers = workers.max(1);
    std::thread::scope(|scope| {
        let mut in_txs = Vec::with_capacity(workers);
        let mut out_rxs: Vec<Receiver<D>> = Vec::with_capacity(workers);
        // As many buffers as can be queued or worked on: any more would be dropped anyway.
        let (spent_tx, spent) = sync_channel::<RawBatch>(workers * (DEPTH + 1));
        for _ in 0..workers {
            let (in_tx, in_rx) = sync_channel::<RawBatch>(DEPTH);
            let (out_tx, out_rx) = sync_channel::<D>(DEPTH);
            in_txs.push(in_tx);
            out_rxs.push(out_rx);
            let decode = &decode;
            let spent_tx = spent_tx.clone();
            scope.spawn(move || {
                for mut batch in in_rx {
                    let decoded = decode(&batch);
                    batch.clear();
                    // A full return channel (or a reader that is done) just frees the buffer.
                    let _ = spent_tx.try_send(batch);
                    if out_tx.send(decoded).is_err() {
                        return;
                    }
                }
            });
        }
        drop(spent_tx);
        let reader = scope.spawn(move || {
            let mut sink = Sink {
                batch: RawBatch::with_capacity(),
                seq: 0,
                txs: &in_txs,
                spent,
            };
            let out = read(&mut sink)?;
            sink.flush()?;
            Ok(out)
        });
        let mut seq = 0usize;
        let mut applied = Ok(());
        while let Ok(decoded) = out_rxs[seq % workers].recv() {
            seq += 1;
            if let Err(e) = apply(decoded) {
                applied = Err(e);
                break;
            }
        }
        drop(out_rxs);
        let read = reader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        applied?;
        read
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(i: u32) -> Position {
        Position {
            segment: i,
            offset: u64::from(i) * 10,
        }
    }

    /// Records come out in read order and complete, whatever the number of workers and batch boundaries.
    #[test]
    fn applies_in_read_order_with_any_worker_count() {
        for workers in [1, 2, 3, 7] {
            let records: Vec<Vec<u8>> = (0..3000u32)
                .map(|i| vec![(i % 251) as u8; (i % 700) as usize])
                .collect();
            let mut got: Vec<(Vec<u8>, Position)> = Vec::new();
            let n = run(
                workers,
                |sink| {
                    for (i, r) in records.iter().enumerate() {
                        sink.push(r, pos(i as u32))?;
                    }
                    Ok(records.len())
                },
                |batch: &RawBatch| batch.records().map(|(r, p)| (r.to_vec(), p)).collect::<Vec<_>>(),
                |decoded| {
                    got.extend(decoded);
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(n, records.len(), "workers={workers}");
            let want: Vec<(Vec<u8>, Position)> = records
                .iter()
                .enumerate()
                .map(|(i, r)| (r.clone(), pos(i as u32)))
                .collect();
            assert!(got == want, "workers={workers}: records out of order or missing");
        }
    }

    /// An error of the applier stops the reader (which would otherwise run forever) and is returned.
    #[test]
    fn an_apply_error_stops_the_reader() {
        let err = run::<(), _, _, _, _>(
            2,
            |sink| {
                let mut i = 0u32;
                loop {
                    sink.push(&[0u8; 4096], pos(i))?;
                    i = i.wrapping_add(1);
                }
            },
            |batch: &RawBatch| batch.records().count(),
            |_: usize| Err::<(), _>(TsdbError::InvalidOptions("stop".into())),
        )
        .unwrap_err();
        assert!(matches!(err, TsdbError::InvalidOptions(ref m) if m == "stop"), "{err}");
    }
}
