//! Selecting a query's series, one at a time: a k-way merge over sources that each yield series sorted by
//! labels (every ingester's stream, every bucket block overlapping the range).
//!
//! - **Opening.** Every ingester of the read set is asked at once; the query starts merging once enough of
//!   them have sent their first message (see [`FanOut::complete`]: all but `max_errors`, or every ingester
//!   of all but the zones that may fail), so a frozen ingester does not hold it. The others stay in reserve:
//!   when an ingester fails mid-stream, reserves take its place until the answers are complete again
//!   (skipping the series already answered; with zones, a whole other zone), and the query fails only when
//!   more failed than the set tolerates, as when every answer was collected whole.
//! - **Merging.** Each step pulls the next series of every source that has none waiting, takes the smallest
//!   label set, and hands over that series' chunks from every source that has it, in source order (ingesters
//!   in read-set order, then blocks oldest first): that order decides ties in `merge`. Nothing but the
//!   sources' current message is held, so a response can go out series by series.
//! - **Order.** A source that yields a series at or before the merge position is out of order (the merge
//!   would answer the series twice); that is invalid ingester data, except for a reserve catching up.

use crate::chunks;
use crate::convert::series_from_proto;
use crate::error::{FetchLimit, QuerierError};
use crate::fetch::{FanOut, IngesterSet};
use crate::limits::QueryLimiter;
use crate::merge::{merge_chunks, merge_samples, weigh};
use crate::store::BlockCoverage;
use futures::StreamExt;
use heddle_model::{Labels, TenantId};
use heddle_proto::QueryStream;
use heddle_proto::ingester::{QueryRequest, QueryStreamResponse};
use heddle_proto::prometheus::ChunkedSeries;
use heddle_tsdb::chunk_samples::ChunkSample;
use heddle_tsdb::{ChunkData, SeriesChunks};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// An ingester's stream once it answered: its first message (none when it holds nothing) and the rest.
type Opened = (Option<QueryStreamResponse>, QueryStream);

/// Where series come from.
enum Source {
    /// An ingester's stream, converted to the model one series at a time as the merge pulls it.
    Ingester {
        index: usize,
        message: std::vec::IntoIter<ChunkedSeries>,
        rest: QueryStream,
    },
    /// One bucket block's series, read whole (the block reader answers a select at once).
    Block(std::vec::IntoIter<SeriesChunks>),
}

enum Pulled {
    Series(SeriesChunks),
    End,
    /// The ingester's stream failed: one of the failures the read set may absorb.
    Failed(usize, tonic::Status),
}

impl Source {
    fn ingester(index: usize, (first, rest): Opened) -> Self {
        Self::Ingester {
            index,
            message: first.map(|m| m.series).unwrap_or_default().into_iter(),
            rest,
        }
    }

    /// Merge priority: ingesters in read-set order, then blocks.
    fn rank(&self) -> usize {
        match self {
            Self::Ingester { index, .. } => *index,
            Self::Block(_) => usize::MAX,
        }
    }

    /// The source's next series. An ingester's chunks are counted against `limiter` as they are taken from
    /// its stream (a block's were counted before it was read).
    async fn pull(&mut self, limiter: &QueryLimiter) -> Result<Pulled, QuerierError> {
        match self {
            Self::Block(series) => Ok(series.next().map_or(Pulled::End, Pulled::Series)),
            Self::Ingester { index, message, rest } => loop {
                if let Some(wire) = message.next() {
                    limiter.add(FetchLimit::Chunks, wire.chunks.len())?;
                    limiter.add(FetchLimit::ChunkBytes, wire.chunks.iter().map(|c| c.data.len()).sum())?;
                    return Ok(Pulled::Series(series_from_proto(wire)?));
                }
                match rest.next().await {
                    None => return Ok(Pulled::End),
                    Some(Err(status)) => return Ok(Pulled::Failed(*index, status)),
                    Some(Ok(next)) => *message = next.series.into_iter(),
                }
            },
        }
    }
}

struct Slot {
    source: Source,
    /// The source's next series, once pulled.
    head: Option<SeriesChunks>,
    /// A reserve that joined late: series at or before the merge position were answered without it.
    catching_up: bool,
}

/// The k-way merge; see the module docs.
pub(crate) struct Merge {
    /// Live sources in priority order.
    slots: Vec<Slot>,
    /// Ingesters not merged yet: the reserve for one that fails.
    reserve: FanOut<'static, Opened>,
    /// The last series answered.
    position: Option<Labels>,
    /// The request's fetch budget.
    limiter: Arc<QueryLimiter>,
    /// What the bucket blocks merged hold: a reserve that joins must have left no other block to the bucket.
    coverage: BlockCoverage,
}

/// The ingesters' streams once enough of them answered, and the others in reserve.
pub(crate) struct IngesterStreams {
    opened: Vec<(usize, Opened)>,
    reserve: FanOut<'static, Opened>,
}

impl IngesterStreams {
    /// The blocks the opened ingesters left to the bucket (named in their first messages).
    pub(crate) fn left_to_bucket(&self) -> BTreeSet<String> {
        crate::querier::left_to_bucket(
            self.opened
                .iter()
                .filter_map(|(_, (first, _))| first.as_ref().map(|m| &m.blocks_left_to_bucket)),
        )
    }
}

impl Merge {
    /// Asks every ingester of `set` for `req`, and returns once enough of them answered (see the module docs).
    pub(crate) async fn open_ingesters(
        set: &IngesterSet,
        tenant: &TenantId,
        req: &QueryRequest,
    ) -> Result<IngesterStreams, QuerierError> {
        let mut reserve = FanOut::start(set, |client| {
            let (tenant, req) = (tenant.clone(), req.clone());
            async move {
                let mut rest = client.query_stream(&tenant, req).await?;
                let first = rest.next().await.transpose()?;
                Ok((first, rest))
            }
        });
        let mut opened = Vec::new();
        while !reserve.complete()
            && let Some(answer) = reserve.next().await?
        {
            opened.push(answer);
        }
        reserve.check_complete()?;
        Ok(IngesterStreams { opened, reserve })
    }

    /// The merge of the opened ingester streams and `blocks`, the bucket's answers (one sorted list per block,
    /// oldest block first) whose blocks hold `coverage`, counting what it fetches and yields against `limiter`.
    pub(crate) fn new(
        ingesters: IngesterStreams,
        blocks: Vec<Vec<SeriesChunks>>,
        coverage: BlockCoverage,
        limiter: Arc<QueryLimiter>,
    ) -> Self {
        let mut slots: Vec<Slot> = ingesters
            .opened
            .into_iter()
            .map(|(index, opened)| Slot::new(Source::ingester(index, opened), false))
            .collect();
        slots.sort_by_key(|s| s.source.rank());
        slots.extend(
            blocks
                .into_iter()
                .map(|b| Slot::new(Source::Block(b.into_iter()), false)),
        );
        Self {
            slots,
            reserve: ingesters.reserve,
            position: None,
            limiter,
            coverage,
        }
    }

    /// The next series (by labels) with the chunks every source holds for it, unmerged; `None` at the end.
    pub(crate) async fn next(&mut self) -> Result<Option<SeriesChunks>, QuerierError> {
        let mut i = 0;
        while i < self.slots.len() {
            if self.slots[i].head.is_some() {
                i += 1;
                continue;
            }
            match self.slots[i].source.pull(&self.limiter).await? {
                Pulled::Series(s) => {
                    let slot = &mut self.slots[i];
                    if let Some(at) = self.position.as_ref().filter(|at| s.labels <= **at) {
                        if slot.catching_up {
                            continue;
                        }
                        return Err(QuerierError::InvalidIngesterData(format!(
                            "series {} arrived after {at}: sources must yield series sorted by labels, each once",
                            s.labels
                        )));
                    }
                    slot.catching_up = false;
                    slot.head = Some(s);
                    i += 1;
                }
                Pulled::End => {
                    self.slots.remove(i);
                }
                Pulled::Failed(index, status) => {
                    self.slots.remove(i);
                    self.reserve.fail(index, status)?;
                    while !self.reserve.complete()
                        && let Some((index, opened)) = self.reserve.next().await?
                    {
                        // The bucket blocks were read for the ingesters opened first; one that joins now
                        // must not leave the bucket a block they do not hold.
                        let left = opened
                            .0
                            .as_ref()
                            .map(|m| m.blocks_left_to_bucket.as_slice())
                            .unwrap_or_default();
                        let missing = self.coverage.missing(left);
                        if !missing.is_empty() {
                            return Err(crate::querier::store_consistency_error(self.limiter.tenant(), &missing));
                        }
                        let source = Source::ingester(index, opened);
                        let at = self.slots.partition_point(|s| s.source.rank() < source.rank());
                        self.slots.insert(at, Slot::new(source, true));
                    }
                    self.reserve.check_complete()?;
                    // The new source may sit before `i`: look again from the start.
                    i = 0;
                }
            }
        }
        let Some(labels) = self
            .slots
            .iter()
            .filter_map(|s| s.head.as_ref().map(|h| &h.labels))
            .min()
            .cloned()
        else {
            return Ok(None);
        };
        let mut chunks = Vec::new();
        for slot in &mut self.slots {
            if slot.head.as_ref().is_some_and(|h| h.labels == labels) {
                chunks.extend(slot.head.take().into_iter().flat_map(|h| h.chunks));
            }
        }
        self.position = Some(labels.clone());
        self.limiter.add(FetchLimit::Series, 1)?;
        Ok(Some(SeriesChunks { labels, chunks }))
    }
}

impl Slot {
    fn new(source: Source, catching_up: bool) -> Self {
        Self {
            source,
            head: None,
            catching_up,
        }
    }
}

/// The series of one query, replicas merged, sorted by labels, produced one at a time as they are pulled;
/// the query's deadline and its request's fetch limits are checked as it goes.
pub struct SelectedSeries {
    merge: Merge,
    tenant: TenantId,
    start: i64,
    end: i64,
    deadline: Instant,
    timeout: Duration,
    samples: usize,
}

impl std::fmt::Debug for SelectedSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectedSeries")
            .field("tenant", &self.tenant)
            .field("start", &self.start)
            .field("end", &self.end)
            .field("samples", &self.samples)
            .finish_non_exhaustive()
    }
}

/// What a selection needs besides its sources.
pub(crate) struct Bounds {
    pub(crate) tenant: TenantId,
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) deadline: Instant,
    pub(crate) timeout: Duration,
}

impl SelectedSeries {
    pub(crate) fn new(merge: Merge, b: Bounds) -> Self {
        Self {
            merge,
            tenant: b.tenant,
            start: b.start,
            end: b.end,
            deadline: b.deadline,
            timeout: b.timeout,
            samples: 0,
        }
    }

    /// The next series with its chunks sorted, disjoint and trimmed to the query range; series without
    /// samples in the range are skipped. `None` at the end. What merging may decode is checked against the
    /// request's sample budget first ([`weigh`]); what the chunks hold is then counted, histograms by size.
    pub async fn next(&mut self) -> Result<Option<SeriesChunks>, QuerierError> {
        while let Some(raw) = self.next_raw().await? {
            let (start, end) = (self.start, self.end);
            let most = weigh(&raw.chunks, start, end)?;
            self.merge.limiter.check_room(FetchLimit::Samples, most)?;
            let chunks = chunks::off_runtime(most, move || merge_chunks(raw.chunks, start, end)).await?;
            if chunks.is_empty() {
                continue;
            }
            let mut n = 0usize;
            for c in &chunks {
                n = n.saturating_add(chunks::weight(c)?);
            }
            self.count(n)?;
            return Ok(Some(SeriesChunks {
                labels: raw.labels,
                chunks,
            }));
        }
        Ok(None)
    }

    /// The samples of one series' chunks (from [`Self::next_raw`]) inside the query range, replicas merged, each
    /// counted against the request's sample budget (histograms by size). What decoding may produce is checked
    /// against the budget before a chunk is decoded, and a large decode runs off the async runtime.
    pub(crate) async fn merged_samples(&mut self, raw: Vec<ChunkData>) -> Result<Vec<ChunkSample>, QuerierError> {
        let (start, end) = (self.start, self.end);
        let most = weigh(&raw, start, end)?;
        self.merge.limiter.check_room(FetchLimit::Samples, most)?;
        let merged = chunks::off_runtime(most, move || merge_samples(&raw, start, end)).await?;
        self.count(merged.iter().map(chunks::sample_weight).sum())?;
        Ok(merged)
    }

    /// The next series with every source's chunks, before the replica merge.
    pub(crate) async fn next_raw(&mut self) -> Result<Option<SeriesChunks>, QuerierError> {
        match tokio::time::timeout_at(self.deadline, self.merge.next()).await {
            Ok(r) => r,
            Err(_) => Err(timeout_error(&self.tenant, self.timeout)),
        }
    }

    /// Counts `n` more samples selected, failing once the request's limit is passed.
    pub(crate) fn count(&mut self, n: usize) -> Result<(), QuerierError> {
        self.samples += n;
        self.merge.limiter.add(FetchLimit::Samples, n)
    }
}

/// The error of a query that ran past `timeout`.
pub(crate) fn timeout_error(tenant: &TenantId, timeout: Duration) -> QuerierError {
    QuerierError::Timeout {
        tenant: tenant.to_string(),
        timeout_ms: timeout.as_millis(),
    }
}

#[cfg(test)]
#[path = "select/tests.rs"]
mod tests;
