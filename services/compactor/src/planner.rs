//! What to do with a tenant's blocks, decided from their `meta.json` alone (no I/O, so every rule is a table
//! test): which blocks are superseded by a compacted block that holds them, which are past retention, and which
//! group to compact next.
//!
//! Compaction goes in the order Prometheus' and Thanos' planners use:
//! 1. **Overlapping blocks** (the replicas' blocks of one range, or a compacted block and a replica's block
//!    that arrived late) are merged into one, samples de-duplicated (vertical compaction). The oldest group of
//!    blocks that overlap one another (transitively) goes first.
//! 2. Then, for each longer range in turn (12h, then 24h by default), the blocks that lie inside one aligned
//!    window of that range, are shorter than it, and are at least two, are compacted into one, once the window
//!    is over (the tenant has a block reaching its end): a window still being filled is left alone so it is
//!    compacted once rather than once per new block.

use std::collections::BTreeSet;

use heddle_tsdb::block::BlockMeta;

/// A group of blocks to compact into one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Why these blocks go together.
    pub kind: PlanKind,
    /// The blocks, sorted by `min_time`, then ULID.
    pub blocks: Vec<BlockMeta>,
}

/// Why a group was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// The blocks overlap in time: merged with samples de-duplicated.
    Overlapping,
    /// The blocks fill one window of this range (ms).
    Range(i64),
}

impl PlanKind {
    /// The `kind` label of metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanKind::Overlapping => "overlapping",
            PlanKind::Range(_) => "range",
        }
    }
}

/// The next group to compact among `blocks` (a tenant's complete blocks not marked for deletion), or `None`.
///
/// `ranges_ms` are the compactor's block ranges, shortest first. A level-1 block made (by the time in its ULID)
/// less than `wait_ms` before `now_ms` is left out, so the replicas' blocks of a range are merged together.
pub fn plan(blocks: &[BlockMeta], ranges_ms: &[i64], now_ms: i64, wait_ms: i64) -> Option<Plan> {
    let mut ready: Vec<&BlockMeta> = blocks
        .iter()
        .filter(|b| wait_ms <= 0 || b.compaction.level > 1 || now_ms.saturating_sub(made_at_ms(b)) >= wait_ms)
        .collect();
    ready.sort_by(|a, b| (a.min_time, &a.ulid).cmp(&(b.min_time, &b.ulid)));
    if let Some(group) = oldest_overlapping(&ready) {
        return Some(Plan {
            kind: PlanKind::Overlapping,
            blocks: group.into_iter().cloned().collect(),
        });
    }
    let newest_end = ready.iter().map(|b| b.max_time).max()?;
    for &range in ranges_ms.iter().skip(1) {
        let mut window: Option<(i64, Vec<&BlockMeta>)> = None;
        for b in &ready {
            if b.max_time - b.min_time >= range {
                continue;
            }
            let start = b.min_time.div_euclid(range) * range;
            let end = start.saturating_add(range);
            if b.max_time > end {
                // Crosses a window boundary: no window of this range can hold it.
                continue;
            }
            match &mut window {
                Some((s, group)) if *s == start => group.push(b),
                _ => {
                    if let Some((s, group)) = window.take()
                        && group.len() > 1
                        && s.saturating_add(range) <= newest_end
                    {
                        return Some(range_plan(range, group));
                    }
                    window = Some((start, vec![b]));
                }
            }
        }
        if let Some((s, group)) = window
            && group.len() > 1
            && s.saturating_add(range) <= newest_end
        {
            return Some(range_plan(range, group));
        }
    }
    None
}

fn range_plan(range: i64, group: Vec<&BlockMeta>) -> Plan {
    Plan {
        kind: PlanKind::Range(range),
        blocks: group.into_iter().cloned().collect(),
    }
}

/// The oldest group of blocks (sorted by `min_time`) that overlap one another, transitively, if any has more
/// than one block.
fn oldest_overlapping<'a>(sorted: &[&'a BlockMeta]) -> Option<Vec<&'a BlockMeta>> {
    let mut group: Vec<&BlockMeta> = Vec::new();
    let mut group_end = i64::MIN;
    for b in sorted {
        if !group.is_empty() && b.min_time >= group_end {
            if group.len() > 1 {
                return Some(group);
            }
            group.clear();
        }
        group_end = if group.is_empty() {
            b.max_time
        } else {
            group_end.max(b.max_time)
        };
        group.push(b);
    }
    (group.len() > 1).then_some(group)
}

/// When the block was made: the time in its ULID (0 if the ULID does not parse).
fn made_at_ms(b: &BlockMeta) -> i64 {
    b.ulid
        .parse::<ulid::Ulid>()
        .map(|u| i64::try_from(u.timestamp_ms()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Blocks whose samples are all in another block: `(superseded, by)`. A block is superseded by another whose
/// sources include all of its own and more, or the same ones and a smaller ULID (two compactions of the same
/// blocks). This is what remains after a compactor stopped between uploading a compacted block and marking its
/// sources, or after two compactors compacted the same group: the extra copies are marked and nothing is read
/// twice for long.
pub fn superseded(blocks: &[BlockMeta]) -> Vec<(String, String)> {
    let sources: Vec<BTreeSet<&str>> = blocks
        .iter()
        .map(|b| b.compaction.sources.iter().map(String::as_str).collect())
        .collect();
    let mut out = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        if sources[i].is_empty() {
            continue;
        }
        let by = blocks.iter().enumerate().find(|(j, c)| {
            *j != i && sources[i].is_subset(&sources[*j]) && (sources[i].len() < sources[*j].len() || c.ulid < b.ulid)
        });
        if let Some((_, c)) = by {
            out.push((b.ulid.clone(), c.ulid.clone()));
        }
    }
    out
}

/// Blocks whose newest sample is older than `retention_ms` before `now_ms` (none when the retention is 0).
pub fn past_retention(blocks: &[BlockMeta], retention_ms: i64, now_ms: i64) -> Vec<String> {
    if retention_ms <= 0 {
        return Vec::new();
    }
    let cutoff = now_ms.saturating_sub(retention_ms);
    blocks
        .iter()
        .filter(|b| b.max_time <= cutoff)
        .map(|b| b.ulid.clone())
        .collect()
}

#[cfg(test)]
mod tests;
