use super::*;
use heddle_tsdb::block::BlockMeta;

const H: i64 = 3600 * 1000;
const RANGES: [i64; 3] = [2 * H, 12 * H, 24 * H];
/// Far after every block's ULID time, so the first-level wait never holds a block back unless a test says so.
const NOW: i64 = 1_000_000 * H;

/// A level-1 block `[min, max)` hours, named by `id` (made at ULID time `id` ms).
fn block(id: u64, min: i64, max: i64) -> BlockMeta {
    let mut m = BlockMeta::new(ulid::Ulid::from_parts(id, 0), min * H, max * H, Some("t"));
    m.compaction.level = 1;
    m
}

fn compacted(id: u64, parents: &[BlockMeta]) -> BlockMeta {
    BlockMeta::compacted(ulid::Ulid::from_parts(id, 0), parents)
}

fn ids(blocks: &[BlockMeta]) -> Vec<u64> {
    blocks
        .iter()
        .map(|b| b.ulid.parse::<ulid::Ulid>().unwrap().timestamp_ms())
        .collect()
}

#[test]
fn plans() {
    struct Case {
        name: &'static str,
        blocks: Vec<BlockMeta>,
        now: i64,
        wait: i64,
        want: Option<(PlanKind, Vec<u64>)>,
    }
    let replicas = |id: u64, min: i64| (0..3).map(move |r| block(id + r, min, min + 2));
    let cases = vec![
        Case {
            name: "nothing",
            blocks: vec![],
            now: NOW,
            wait: 0,
            want: None,
        },
        Case {
            name: "one block alone",
            blocks: vec![block(1, 0, 2)],
            now: NOW,
            wait: 0,
            want: None,
        },
        Case {
            name: "three replicas of a range are merged",
            blocks: replicas(1, 0).collect(),
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Overlapping, vec![1, 2, 3])),
        },
        Case {
            name: "the oldest overlapping range first",
            blocks: replicas(10, 2).chain(replicas(1, 0)).collect(),
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Overlapping, vec![1, 2, 3])),
        },
        Case {
            name: "a replica's flushed block overlaps part of the range",
            blocks: vec![block(1, 0, 2), block(2, 1, 2), block(3, 2, 4)],
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Overlapping, vec![1, 2])),
        },
        Case {
            name: "touching blocks do not overlap",
            blocks: vec![block(1, 0, 2), block(2, 2, 4)],
            now: NOW,
            wait: 0,
            want: None,
        },
        Case {
            name: "a late replica overlaps the compacted block",
            blocks: vec![compacted(5, &[block(1, 0, 2), block(2, 0, 2)]), block(3, 0, 2)],
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Overlapping, vec![3, 5])),
        },
        Case {
            name: "young level-1 blocks wait",
            blocks: replicas(1, 0).collect(),
            now: 5,
            wait: 8,
            want: None,
        },
        Case {
            name: "only the replicas old enough are merged",
            blocks: vec![block(1, 0, 2), block(2, 0, 2), block(9, 0, 2)],
            now: 10,
            wait: 8,
            want: Some((PlanKind::Overlapping, vec![1, 2])),
        },
        Case {
            name: "a full 12h window becomes one block",
            blocks: (0..6)
                .map(|i| block(i + 1, 2 * i as i64, 2 * i as i64 + 2))
                .chain([block(9, 12, 14)])
                .collect(),
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Range(12 * H), vec![1, 2, 3, 4, 5, 6])),
        },
        Case {
            name: "a window with gaps is compacted once it is over",
            blocks: vec![block(1, 0, 2), block(2, 6, 8), block(3, 12, 14)],
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Range(12 * H), vec![1, 2])),
        },
        Case {
            name: "the window still being filled waits",
            blocks: vec![block(1, 12, 14), block(2, 14, 16)],
            now: NOW,
            wait: 0,
            want: None,
        },
        Case {
            name: "12h blocks become 24h",
            blocks: vec![
                compacted(5, &[block(1, 0, 2), block(2, 10, 12)]),
                compacted(6, &[block(3, 12, 14), block(4, 22, 24)]),
                block(7, 24, 26),
            ],
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Range(24 * H), vec![5, 6])),
        },
        Case {
            name: "a block as long as the range is left alone",
            blocks: vec![
                compacted(5, &[block(1, 0, 2), block(2, 22, 24)]),
                block(7, 24, 26),
                block(8, 48, 50),
            ],
            now: NOW,
            wait: 0,
            want: None,
        },
        Case {
            name: "a block crossing a 12h boundary waits for the 24h window",
            blocks: vec![block(1, 11, 13), block(2, 13, 14), block(3, 24, 26)],
            now: NOW,
            wait: 0,
            want: Some((PlanKind::Range(24 * H), vec![1, 2])),
        },
    ];
    for c in cases {
        let got = plan(&c.blocks, &RANGES, c.now, c.wait).map(|p| (p.kind, ids(&p.blocks)));
        assert_eq!(got, c.want, "case {}", c.name);
    }
}

#[test]
fn compacted_levels_grow_one_per_step() {
    let a = compacted(5, &[block(1, 0, 2), block(2, 0, 2), block(3, 0, 2)]);
    assert_eq!(a.compaction.level, 2);
    let b = compacted(6, &[block(4, 2, 4)]);
    let ab = compacted(7, &[a, b]);
    assert_eq!(ab.compaction.level, 3);
    assert_eq!(ab.compaction.sources.len(), 4);
    assert_eq!(ab.compaction.parents.len(), 2);
}

#[test]
fn superseded_blocks() {
    let (r1, r2, r3) = (block(1, 0, 2), block(2, 0, 2), block(3, 0, 2));
    let merged = compacted(5, &[r1.clone(), r2.clone(), r3.clone()]);
    let twin = compacted(4, &[r1.clone(), r2.clone(), r3.clone()]);
    let partial = compacted(6, &[r1.clone(), r2.clone()]);
    let u = |b: &BlockMeta| b.ulid.clone();
    type Case = (&'static str, Vec<BlockMeta>, Vec<(String, String)>);
    let cases: Vec<Case> = vec![
        ("no compacted block", vec![r1.clone(), r2.clone()], vec![]),
        (
            "sources left after a crash before marking",
            vec![r1.clone(), r2.clone(), merged.clone()],
            vec![(u(&r1), u(&merged)), (u(&r2), u(&merged))],
        ),
        (
            "two compactions of the same blocks keep the smaller ULID",
            vec![merged.clone(), twin.clone()],
            vec![(u(&merged), u(&twin))],
        ),
        (
            "a compaction of fewer replicas is held by the larger one",
            vec![partial.clone(), merged.clone(), r3.clone()],
            vec![(u(&partial), u(&merged)), (u(&r3), u(&merged))],
        ),
        (
            "a late replica is not superseded by a block without it",
            vec![partial.clone(), r3.clone()],
            vec![],
        ),
    ];
    for (name, blocks, want) in cases {
        assert_eq!(superseded(&blocks), want, "case {name}");
    }
}

#[test]
fn retention() {
    let blocks = vec![block(1, 0, 2), block(2, 2, 4), block(3, 4, 6)];
    let u = |i: usize| blocks[i].ulid.clone();
    assert_eq!(
        past_retention(&blocks, 0, 100 * H),
        Vec::<String>::new(),
        "0 keeps forever"
    );
    assert_eq!(
        past_retention(&blocks, 3 * H, 7 * H),
        vec![u(0), u(1)],
        "max_time is exclusive: [2h,4h) is gone at 7h-3h"
    );
    assert_eq!(
        past_retention(&blocks, 3 * H, 7 * H - 1),
        vec![u(0)],
        "a sample at 4h-1ms is still kept"
    );
    assert_eq!(past_retention(&blocks, 100 * H, 7 * H), Vec::<String>::new());
}
