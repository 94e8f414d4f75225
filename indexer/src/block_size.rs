//! Which block size suits a segment in the documents layout, decided from its own documents.
//!
//! Smaller blocks bound tighter, so fewer documents reach scoring, but every block costs a
//! little in each query's bounding passes. Which wins depends on the data: on real SPLADE
//! vectors (clustered sentences) blocks of 8 score a fifth of the documents blocks of 16 do and
//! search 1.6x faster; on the synthetic topical corpus, where neighbours share less, blocks of
//! 16 are faster (`docs/journal/benchmarks-2026-11-to-12.md`, "The documents layout"). So
//! when a segment is written, a sample of its own documents is turned into queries (each one's heaviest terms) and run exactly over a window of
//! the segment; for each block size, a cost model adds what scoring the documents of the blocks
//! that reach the k-th score costs to what bounding every block costs, and the cheapest wins.
//! Results never depend on the choice.

use rustc_hash::FxHashMap;

/// Block shifts tried: blocks of 8, 16 and 32 documents.
const SHIFTS: [u32; 3] = [3, 4, 5];
/// Documents of the window the sample queries run over.
const WINDOW: u32 = 1 << 16;
/// Sample documents (queries).
const SAMPLES: u32 = 24;
/// Terms of a sample query: its document's heaviest.
const QUERY_TERMS: usize = 20;
/// Results of a real query, scaled to the window's share of the segment.
const K: f64 = 10.0;
/// Cost model, in nanoseconds on the machine of `docs/benchmarks.md`: each block of the
/// segment, in each query's bounding passes; each document of a block that reaches the k-th
/// score, scored.
const NS_PER_BLOCK: f64 = 2.0;
const NS_PER_DOCUMENT: f64 = 28.0;
/// Segments smaller than this keep the default (their search is short whatever the size).
const MIN_DOCS: u32 = 4_096;

/// The first pass's part: the sample documents' vectors, gathered as the postings go by.
#[derive(Debug)]
pub(crate) struct Samples {
    first: u32,
    end: u32,
    stride: u32,
    next_ord: u32,
    /// (term ordinal, impact) of each sample document, by its position in the window / stride.
    vectors: Vec<Vec<(u32, u32)>>,
}

impl Samples {
    /// For a segment of `max_doc` documents; `None` for a small one.
    pub(crate) fn new(max_doc: u32) -> Option<Self> {
        if max_doc < MIN_DOCS {
            return None;
        }
        let len = max_doc.min(WINDOW);
        // In the middle of the segment, at a block boundary of every size tried.
        let first = ((max_doc - len) / 2) & !31;
        let stride = len / SAMPLES;
        Some(Self {
            first,
            end: first + len,
            stride,
            next_ord: 0,
            vectors: vec![Vec::new(); SAMPLES as usize],
        })
    }

    /// The next term's postings (doc, impact), in dictionary order.
    pub(crate) fn observe(&mut self, postings: &[(u32, u32)]) {
        let ord = self.next_ord;
        self.next_ord += 1;
        let from = postings.partition_point(|p| p.0 < self.first);
        for &(doc, w) in postings[from..].iter().take_while(|p| p.0 < self.end) {
            let at = doc - self.first;
            if at.is_multiple_of(self.stride)
                && let Some(v) = self.vectors.get_mut((at / self.stride) as usize)
            {
                v.push((ord, w));
            }
        }
    }

    /// The second pass, over the sample queries' terms.
    pub(crate) fn run(self, max_doc: u32) -> Probe {
        let len = (self.end - self.first) as usize;
        let mut needed: FxHashMap<u32, Vec<(usize, u32)>> = FxHashMap::default();
        let mut queries = Vec::new();
        for (i, mut v) in self.vectors.into_iter().enumerate() {
            if v.is_empty() {
                continue;
            }
            v.sort_unstable_by_key(|&(t, w)| (std::cmp::Reverse(w), t));
            v.truncate(QUERY_TERMS);
            let q = queries.len();
            for &(t, w) in &v {
                needed.entry(t).or_default().push((q, w));
            }
            queries.push(self.first + i as u32 * self.stride);
        }
        let blocks = |s: u32| len.div_ceil(1 << s);
        Probe {
            first: self.first,
            end: self.end,
            k: (K * len as f64 / f64::from(max_doc)).round().max(1.0) as usize,
            scores: vec![vec![0; len]; queries.len()],
            bounds: vec![SHIFTS.map(|s| vec![0; blocks(s)]); queries.len()],
            queries,
            needed,
            next_ord: 0,
        }
    }
}

/// The sample queries run over the window: every document's score and every block's bound,
/// per query and block size.
#[derive(Debug)]
pub(crate) struct Probe {
    first: u32,
    end: u32,
    k: usize,
    /// The sample document of each query (left out of its results).
    queries: Vec<u32>,
    /// The queries holding each term ordinal, with its weight there.
    needed: FxHashMap<u32, Vec<(usize, u32)>>,
    scores: Vec<Vec<u32>>,
    bounds: Vec<[Vec<u32>; SHIFTS.len()]>,
    next_ord: u32,
}

impl Probe {
    /// The next term's postings (doc, impact), in dictionary order.
    pub(crate) fn term(&mut self, postings: &[(u32, u32)]) {
        let ord = self.next_ord;
        self.next_ord += 1;
        let Some(queries) = self.needed.get(&ord) else {
            return;
        };
        let from = postings.partition_point(|p| p.0 < self.first);
        let window = &postings[from..];
        let window = &window[..window.partition_point(|p| p.0 < self.end)];
        for &(q, weight) in queries {
            let scores = &mut self.scores[q];
            for &(doc, w) in window {
                scores[(doc - self.first) as usize] += weight * w;
            }
            for (s, bounds) in SHIFTS.iter().zip(&mut self.bounds[q]) {
                let mut at = 0;
                while at < window.len() {
                    let block = (window[at].0 - self.first) >> s;
                    let mut max = 0;
                    while at < window.len() && (window[at].0 - self.first) >> s == block {
                        max = max.max(window[at].1);
                        at += 1;
                    }
                    bounds[block as usize] += weight * max;
                }
            }
        }
    }

    /// The block shift the cost model finds cheapest over the sample queries.
    pub(crate) fn choose(self) -> Option<u32> {
        let mut cost = [0.0f64; SHIFTS.len()];
        let mut measured = false;
        for (q, &sample) in self.queries.iter().enumerate() {
            let mut scores = self.scores[q].clone();
            scores[(sample - self.first) as usize] = 0;
            let Some(theta) = kth_largest(&mut scores, self.k).filter(|&t| t > 0) else {
                continue;
            };
            measured = true;
            for (i, s) in SHIFTS.iter().enumerate() {
                let bounds = &self.bounds[q][i];
                let reaching = bounds.iter().filter(|&&u| u >= theta).count();
                cost[i] +=
                    NS_PER_BLOCK * bounds.len() as f64 + NS_PER_DOCUMENT * (reaching << s) as f64;
            }
        }
        let best = (0..SHIFTS.len()).min_by(|&a, &b| cost[a].total_cmp(&cost[b]))?;
        measured.then_some(SHIFTS[best])
    }
}

/// The `k`-th largest of `values` (reordered), if there are that many.
fn kth_largest(values: &mut [u32], k: usize) -> Option<u32> {
    if k == 0 || values.len() < k {
        return None;
    }
    let (_, &mut v, _) = values.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both passes over `postings` (by term, in term order) of a segment of `max_doc` documents.
    fn probe(max_doc: u32, postings: &[Vec<(u32, u32)>]) -> Probe {
        let mut samples = Samples::new(max_doc).unwrap();
        for p in postings {
            samples.observe(p);
        }
        let mut probe = samples.run(max_doc);
        for p in postings {
            probe.term(p);
        }
        probe
    }

    /// Runs of identical documents, each run's term shared with every 100th run: the blocks
    /// that reach the k-th score are the matching runs' blocks, so blocks as long as a run
    /// score the fewest documents for the fewest blocks. Runs of 8 pick blocks of 8, runs of
    /// 32 blocks of 32.
    #[test]
    fn picks_the_blocks_that_fit_runs_of_similar_documents() {
        let max_doc = 20_000u32;
        for (run, want) in [(8u32, 3u32), (32, 5)] {
            // Postings by term: document d has term (d / run) % 100, impact 100.
            let mut postings: Vec<Vec<(u32, u32)>> = vec![Vec::new(); 100];
            for d in 0..max_doc {
                postings[((d / run) % 100) as usize].push((d, 100));
            }
            assert_eq!(
                probe(max_doc, &postings).choose(),
                Some(want),
                "runs of {run}"
            );
        }
    }

    /// The probe's scores and bounds are those of a plain computation over the window.
    #[test]
    fn probe_scores_and_bounds_are_exact() {
        let max_doc = 9_000u32;
        let mut rng = crate::synth::Rng::new(5);
        let docs: Vec<Vec<(u32, u32)>> = (0..max_doc)
            .map(|_| {
                let mut v: Vec<(u32, u32)> = (0..6)
                    .map(|_| (rng.range(0, 40) as u32, rng.range(1, 300) as u32))
                    .collect();
                v.sort_unstable();
                v.dedup_by_key(|p| p.0);
                v
            })
            .collect();
        let mut postings: Vec<Vec<(u32, u32)>> = vec![Vec::new(); 41];
        for (d, v) in docs.iter().enumerate() {
            for &(t, w) in v {
                postings[t as usize].push((d as u32, w));
            }
        }
        let probe = probe(max_doc, &postings);
        assert_eq!(probe.queries.len(), SAMPLES as usize);
        for (q, &sample) in probe.queries.iter().enumerate() {
            let mut query = docs[sample as usize].clone();
            query.sort_unstable_by_key(|&(t, w)| (std::cmp::Reverse(w), t));
            query.truncate(QUERY_TERMS);
            let weight = |t: u32| query.iter().find(|p| p.0 == t).map_or(0, |p| p.1);
            for d in probe.first..probe.end {
                let want: u32 = docs[d as usize].iter().map(|&(t, w)| weight(t) * w).sum();
                assert_eq!(probe.scores[q][(d - probe.first) as usize], want);
            }
            for (i, s) in SHIFTS.iter().enumerate() {
                for (b, &bound) in probe.bounds[q][i].iter().enumerate() {
                    let lo = probe.first + ((b as u32) << s);
                    let hi = (lo + (1 << s)).min(probe.end);
                    let want: u32 = query
                        .iter()
                        .map(|&(t, qw)| {
                            let max = (lo..hi)
                                .filter_map(|d| docs[d as usize].iter().find(|p| p.0 == t))
                                .map(|p| p.1)
                                .max()
                                .unwrap_or(0);
                            qw * max
                        })
                        .sum();
                    assert_eq!(bound, want, "query {q}, shift {s}, block {b}");
                }
            }
        }
    }

    #[test]
    fn small_segments_are_not_probed() {
        assert!(Samples::new(MIN_DOCS - 1).is_none());
        assert_eq!(kth_largest(&mut [3, 9, 1], 2), Some(3));
        assert_eq!(kth_largest(&mut [3], 2), None);
    }
}
