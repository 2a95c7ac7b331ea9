//! Counting a read's answers against what its replica set tolerates (dskit's `replicationSetResultTracker`).
//!
//! Without zone awareness, any `max_errors` instances may fail and the answers of all the others make the
//! result complete. With zone awareness (Mimir's `MaxUnavailableZones`), failures are counted by zone: one
//! failed instance fails its whole zone (its other instances need not be waited for, their data is in the
//! other zones), at most `max_unavailable` zones may fail, and the result is complete once every instance of
//! all the other zones answered. So a read survives losing a whole zone, as writes do.

use crate::replicas::ReadSet;

/// The answers and failures of one read; see the module docs. Indices are those of [`ReadSet::replicas`];
/// the set's unreachable instances count as failed from the start.
#[derive(Debug, Clone)]
pub struct ReadTracker {
    asked: usize,
    max_errors: usize,
    /// Instances that failed (a success that later failed counts once, as a failure).
    failed: usize,
    /// Successful answers still standing.
    answers: usize,
    /// Per replica: answered and not failed since.
    standing: Vec<bool>,
    zones: Option<ZoneCounts>,
}

#[derive(Debug, Clone)]
struct ZoneCounts {
    names: Vec<String>,
    /// Zone (index into `names`) of each replica.
    of_replica: Vec<usize>,
    size: Vec<usize>,
    answered: Vec<usize>,
    failed: Vec<bool>,
    max_unavailable: usize,
}

impl ReadTracker {
    /// A tracker for a read of `set`, with nothing answered yet.
    pub fn new<C>(set: &ReadSet<C>) -> Self {
        let zones = set.zones.as_ref().map(|z| {
            let mut names: Vec<String> = Vec::new();
            let mut index = |zone: &str| match names.iter().position(|n| n == zone) {
                Some(i) => i,
                None => {
                    names.push(zone.to_owned());
                    names.len() - 1
                }
            };
            let of_replica: Vec<usize> = z.of_replica.iter().map(|zone| index(zone)).collect();
            let unreachable: Vec<usize> = z.of_unreachable.iter().map(|zone| index(zone)).collect();
            let mut counts = ZoneCounts {
                size: vec![0; names.len()],
                answered: vec![0; names.len()],
                failed: vec![false; names.len()],
                names,
                of_replica,
                max_unavailable: z.max_unavailable,
            };
            for &zone in &counts.of_replica {
                counts.size[zone] += 1;
            }
            for zone in unreachable {
                counts.failed[zone] = true;
            }
            counts
        });
        Self {
            asked: set.len(),
            max_errors: set.max_errors,
            failed: set.unreachable.len(),
            answers: 0,
            standing: vec![false; set.replicas.len()],
            zones,
        }
    }

    /// Records the answer of replica `index`.
    pub fn answered(&mut self, index: usize) {
        let Some(standing) = self.standing.get_mut(index) else {
            return;
        };
        if *standing {
            return;
        }
        *standing = true;
        self.answers += 1;
        if let Some(z) = &mut self.zones {
            z.answered[z.of_replica[index]] += 1;
        }
    }

    /// Records the failure of replica `index` (before or after it answered); returns [`Self::within_tolerance`].
    pub fn failed(&mut self, index: usize) -> bool {
        if let Some(standing) = self.standing.get_mut(index) {
            if *standing {
                *standing = false;
                self.answers -= 1;
                if let Some(z) = &mut self.zones {
                    z.answered[z.of_replica[index]] -= 1;
                }
            }
            if let Some(z) = &mut self.zones {
                z.failed[z.of_replica[index]] = true;
            }
        }
        self.failed += 1;
        self.within_tolerance()
    }

    /// True while the failures so far still allow a complete result.
    pub fn within_tolerance(&self) -> bool {
        match &self.zones {
            None => self.failed <= self.max_errors,
            Some(z) => z.failed_count() <= z.max_unavailable,
        }
    }

    /// True once the standing answers hold every acknowledged sample: all but `max_errors` instances, or
    /// zone-aware, every instance of all zones but `max_unavailable`.
    pub fn complete(&self) -> bool {
        match &self.zones {
            None => self.answers >= self.asked.saturating_sub(self.max_errors),
            Some(z) => {
                let whole = (0..z.names.len())
                    .filter(|&i| !z.failed[i] && z.answered[i] == z.size[i])
                    .count();
                whole >= z.names.len().saturating_sub(z.max_unavailable)
            }
        }
    }

    /// Instances asked (or that should have been).
    pub fn asked(&self) -> usize {
        self.asked
    }

    /// Instance failures so far.
    pub fn failures(&self) -> usize {
        self.failed
    }

    /// Instance failures tolerated (0 for zone-aware reads, which count zones).
    pub fn max_errors(&self) -> usize {
        self.max_errors
    }

    /// Zone-aware reads: the zones failed so far, the number of zones and how many may fail.
    pub fn zone_failures(&self) -> Option<(Vec<&str>, usize, usize)> {
        self.zones.as_ref().map(|z| {
            let failed = (0..z.names.len())
                .filter(|&i| z.failed[i])
                .map(|i| z.names[i].as_str())
                .collect();
            (failed, z.names.len(), z.max_unavailable)
        })
    }
}

impl ZoneCounts {
    fn failed_count(&self) -> usize {
        self.failed.iter().filter(|f| **f).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicas::ReadZones;

    /// Three zones of two instances (a-1 a-2 b-1 b-2 c-1 c-2), one zone allowed to fail.
    fn zoned() -> ReadSet<()> {
        let ids = ["a-1", "a-2", "b-1", "b-2", "c-1", "c-2"];
        ReadSet {
            replicas: ids.iter().map(|id| (id.to_string(), ())).collect(),
            unreachable: Vec::new(),
            max_errors: 0,
            zones: Some(ReadZones {
                of_replica: ids.iter().map(|id| id[..1].to_owned()).collect(),
                of_unreachable: Vec::new(),
                max_unavailable: 1,
            }),
        }
    }

    #[test]
    fn a_zone_aware_read_completes_with_two_whole_zones_and_survives_losing_a_zone() {
        let mut t = ReadTracker::new(&zoned());
        t.answered(0);
        t.answered(2);
        t.answered(4);
        assert!(!t.complete(), "one instance of each zone is not a whole zone");
        t.answered(1);
        assert!(!t.complete());
        t.answered(3);
        assert!(t.complete(), "zones a and b answered whole");

        let mut t = ReadTracker::new(&zoned());
        assert!(t.failed(0), "zone a failing is tolerated");
        assert!(t.failed(1), "its second instance failing too: still one zone");
        for i in 2..6 {
            t.answered(i);
        }
        assert!(t.complete());
        assert!(!t.failed(2), "a second zone failing is one too many");
        assert_eq!(t.zone_failures(), Some((vec!["a", "b"], 3, 1)));
    }

    #[test]
    fn a_zone_whose_answer_later_fails_no_longer_counts() {
        let mut t = ReadTracker::new(&zoned());
        for i in 0..4 {
            t.answered(i);
        }
        assert!(t.complete());
        assert!(t.failed(1), "zone a lost mid-stream");
        assert!(!t.complete(), "zone c must now answer whole");
        t.answered(4);
        t.answered(5);
        assert!(t.complete());
    }

    #[test]
    fn an_unreachable_instance_fails_its_zone_from_the_start() {
        let mut set = zoned();
        set.unreachable.push(("a-3".into(), "no client".into()));
        set.zones.as_mut().unwrap().of_unreachable.push("a".into());
        let mut t = ReadTracker::new(&set);
        assert!(t.within_tolerance());
        for i in 2..6 {
            t.answered(i);
        }
        assert!(t.complete(), "zones b and c are enough");
        assert!(!t.failed(5));
    }

    #[test]
    fn without_zones_any_max_errors_instances_may_fail() {
        let set: ReadSet<()> = ReadSet {
            replicas: (0..4).map(|i| (format!("i{i}"), ())).collect(),
            unreachable: Vec::new(),
            max_errors: 1,
            zones: None,
        };
        let mut t = ReadTracker::new(&set);
        t.answered(0);
        t.answered(1);
        assert!(!t.complete());
        assert!(t.failed(2));
        t.answered(3);
        assert!(t.complete(), "three of four answered");
        assert!(!t.failed(0), "a second failure (one that had answered) is one too many");
        assert_eq!((t.failures(), t.asked(), t.max_errors()), (2, 4, 1));
        assert!(!t.complete());
    }
}
