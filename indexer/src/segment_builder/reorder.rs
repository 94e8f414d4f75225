//! Document reordering inside a segment, so that 64-document blocks hold similar documents.
//!
//! Block maxima ([`crate::forward_index`]) bound a block by the largest impact of each query term in
//! it; they are tight only when the documents of a block share their terms. Documents arrive in
//! whatever order they were added, so before a segment is written its documents are clustered
//! by their terms and written cluster by cluster (doc ids carry no meaning: search results,
//! ties included, follow the written order, and pruned == exhaustive == brute force holds for
//! any order).
//!
//! Clustering is two levels of spherical k-means on idf-weighted impacts (cheap: every
//! document is compared only with the centroids sharing one of its terms, through an inverted
//! list of the centroids' top terms):
//! 1. about `n / 128` clusters (at most [`MAX_CLUSTERS`]) over the whole segment;
//! 2. each cluster split again into clusters of about [`LEAF`] documents, whose documents are
//!    grouped by their heaviest term.
//!
//! Documents that share no weighted term with any centroid keep their relative order at the
//! end of their parent cluster. The result is deterministic for a batch.

use rayon::prelude::*;

/// Documents per leaf cluster (one pruning block).
const LEAF: usize = 64;
/// Largest number of first-level clusters.
const MAX_CLUSTERS: usize = 1024;
/// Documents per first-level cluster.
const FIRST_LEVEL_SIZE: usize = 128;
/// Terms kept per centroid.
const CENTROID_TERMS: usize = 32;
/// k-means iterations per level.
const ITERATIONS: usize = 3;
/// Documents per parallel task when assigning documents to centroids.
const ASSIGN_CHUNK: usize = 2048;

/// The postings of a batch in document order: document `d`'s terms are
/// `term_of[starts[d]..starts[d + 1]]`, with their clustering weights in `weight`.
pub(super) struct DocTerms<'a> {
    pub starts: &'a [u32],
    pub term_of: &'a [u32],
    pub weight: &'a [f32],
    pub num_terms: usize,
}

impl DocTerms<'_> {
    pub(super) fn num_docs(&self) -> usize {
        self.starts.len() - 1
    }

    /// The document's terms of non-zero weight.
    pub(super) fn term_ids(&self, d: u32) -> impl Iterator<Item = u32> + '_ {
        self.terms(d).map(|(t, _)| t)
    }

    fn terms(&self, d: u32) -> impl Iterator<Item = (u32, f32)> + '_ {
        let (a, b) = (
            self.starts[d as usize] as usize,
            self.starts[d as usize + 1] as usize,
        );
        self.term_of[a..b]
            .iter()
            .copied()
            .zip(self.weight[a..b].iter().copied())
            .filter(|&(_, w)| w > 0.0)
    }
}

/// Clustering weight of a posting: impact × idf, 0 for terms too common (in more than 1/16 of
/// the documents) or too rare (in one document) to tell clusters apart.
pub(super) fn term_weights(df: &[u32], num_docs: usize) -> Vec<f32> {
    let n = num_docs as f32;
    df.iter()
        .map(|&f| {
            if f < 2 || (f as usize) * 16 > num_docs {
                0.0
            } else {
                (n / f as f32).ln()
            }
        })
        .collect()
}

/// New order of the documents: `order[new_id] = old_id`.
pub(super) fn cluster_order(data: &DocTerms) -> Vec<u32> {
    let n = data.num_docs();
    let all: Vec<u32> = (0..n as u32).collect();
    if n <= 2 * LEAF {
        return all;
    }
    let mut scratch = Scratch::new(data.num_terms);
    let k1 = n.div_ceil(FIRST_LEVEL_SIZE).clamp(2, MAX_CLUSTERS);
    let clusters = kmeans(data, &all, k1, &mut scratch);
    // The first-level clusters are split independently (in parallel, each with its own
    // buffers) and concatenated in cluster order, so the result does not depend on threads.
    let parts: Vec<Vec<u32>> = clusters
        .into_par_iter()
        .map_init(
            || Scratch::new(data.num_terms),
            |scratch, cluster| {
                let mut part = Vec::with_capacity(cluster.len());
                if cluster.len() <= 2 * LEAF {
                    push_leaf(data, cluster, &mut part);
                } else {
                    let k2 = cluster.len().div_ceil(LEAF);
                    for leaf in kmeans(data, &cluster, k2, scratch) {
                        push_leaf(data, leaf, &mut part);
                    }
                }
                part
            },
        )
        .collect();
    let order = parts.concat();
    debug_assert_eq!(order.len(), n);
    order
}

/// Appends a leaf cluster, its documents grouped by their heaviest term (stable).
fn push_leaf(data: &DocTerms, mut leaf: Vec<u32>, order: &mut Vec<u32>) {
    let heaviest = |d: u32| {
        data.terms(d)
            .fold(
                (0f32, u32::MAX),
                |best, (t, w)| if w > best.0 { (w, t) } else { best },
            )
            .1
    };
    leaf.sort_by_cached_key(|&d| heaviest(d));
    order.extend_from_slice(&leaf);
}

/// Reusable buffers sized by the vocabulary of the batch.
struct Scratch {
    /// Dense per-term accumulator for centroid sums.
    sums: Vec<f32>,
    touched: Vec<u32>,
    /// Per term: its slot among the centroids' terms (`u32::MAX`: none).
    slot_of_term: Vec<u32>,
}

impl Scratch {
    fn new(num_terms: usize) -> Self {
        Self {
            sums: vec![0.0; num_terms],
            touched: Vec::new(),
            slot_of_term: vec![u32::MAX; num_terms],
        }
    }
}

/// A centroid: its top terms with unit-norm weights.
type Centroid = Vec<(u32, f32)>;

/// Splits `members` into at most `k` clusters (members keep their relative order inside each;
/// the unassigned ones form the last group). Empty groups are dropped.
fn kmeans(data: &DocTerms, members: &[u32], k: usize, scratch: &mut Scratch) -> Vec<Vec<u32>> {
    let k = k.min(members.len()).max(1);
    // Seeds spread over the members.
    let mut centroids: Vec<Centroid> = (0..k)
        .map(|i| {
            let d = members[i * members.len() / k];
            top_terms(scratch, data.terms(d))
        })
        .collect();
    let mut assign = vec![u32::MAX; members.len()];
    let mut groups: Vec<Vec<u32>> = Vec::new();
    for iter in 0..ITERATIONS {
        assign_all(data, members, &centroids, &mut assign, scratch);
        // Group (stable), unassigned last.
        groups = vec![Vec::new(); k + 1];
        for (&d, &a) in members.iter().zip(&assign) {
            let g = if a == u32::MAX { k } else { a as usize };
            groups[g].push(d);
        }
        if iter + 1 == ITERATIONS {
            break;
        }
        centroids = groups[..k]
            .iter()
            .map(|docs| top_terms(scratch, docs.iter().flat_map(|&d| data.terms(d))))
            .collect();
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// Assigns every member to the centroid with the largest dot product (ties: lowest index).
fn assign_all(
    data: &DocTerms,
    members: &[u32],
    centroids: &[Centroid],
    assign: &mut [u32],
    scratch: &mut Scratch,
) {
    // Inverted lists of the centroids' terms (CSR over the slots of the terms they use).
    let mut slot_terms: Vec<u32> = Vec::new();
    let mut counts: Vec<u32> = vec![0];
    for c in centroids {
        for &(t, _) in c {
            let slot = &mut scratch.slot_of_term[t as usize];
            if *slot == u32::MAX {
                *slot = slot_terms.len() as u32;
                slot_terms.push(t);
                counts.push(0);
            }
            counts[*slot as usize + 1] += 1;
        }
    }
    for i in 0..slot_terms.len() {
        counts[i + 1] += counts[i];
    }
    let mut cursor = counts.clone();
    let mut inv: Vec<(u32, f32)> = vec![(0, 0.0); counts[slot_terms.len()] as usize];
    for (ci, c) in centroids.iter().enumerate() {
        for &(t, w) in c {
            let slot = &mut cursor[scratch.slot_of_term[t as usize] as usize];
            inv[*slot as usize] = (ci as u32, w);
            *slot += 1;
        }
    }
    // Each member's choice depends only on it: chunks of members are assigned in parallel.
    let slot_of_term = &scratch.slot_of_term;
    let assign_chunk = |(out, members): (&mut [u32], &[u32])| {
        let mut acc = vec![0f32; centroids.len()];
        let mut hit: Vec<u32> = Vec::new();
        for (out, &d) in out.iter_mut().zip(members) {
            for (t, w) in data.terms(d) {
                let slot = slot_of_term[t as usize];
                if slot == u32::MAX {
                    continue;
                }
                let (a, b) = (
                    counts[slot as usize] as usize,
                    counts[slot as usize + 1] as usize,
                );
                for &(c, cw) in &inv[a..b] {
                    if acc[c as usize] == 0.0 {
                        hit.push(c);
                    }
                    acc[c as usize] += w * cw;
                }
            }
            let mut best = (0f32, u32::MAX);
            for &c in &hit {
                let s = std::mem::take(&mut acc[c as usize]);
                if s > best.0 || (s == best.0 && c < best.1) {
                    best = (s, c);
                }
            }
            hit.clear();
            *out = best.1;
        }
    };
    assign
        .par_chunks_mut(ASSIGN_CHUNK)
        .zip(members.par_chunks(ASSIGN_CHUNK))
        .for_each(assign_chunk);
    for t in slot_terms {
        scratch.slot_of_term[t as usize] = u32::MAX;
    }
}

/// Sums the weights per term and keeps the [`CENTROID_TERMS`] largest, L2-normalised.
fn top_terms(scratch: &mut Scratch, terms: impl Iterator<Item = (u32, f32)>) -> Centroid {
    for (t, w) in terms {
        if scratch.sums[t as usize] == 0.0 {
            scratch.touched.push(t);
        }
        scratch.sums[t as usize] += w;
    }
    let mut c: Centroid = scratch
        .touched
        .drain(..)
        .map(|t| (t, std::mem::take(&mut scratch.sums[t as usize])))
        .collect();
    if c.len() > CENTROID_TERMS {
        c.select_nth_unstable_by(CENTROID_TERMS, |a, b| {
            b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
        });
        c.truncate(CENTROID_TERMS);
    }
    let norm = c.iter().map(|&(_, w)| w * w).sum::<f32>().sqrt();
    if norm > 0.0 {
        for e in &mut c {
            e.1 /= norm;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_a_permutation_and_groups_alike_documents() {
        // 5000 documents (more than one assignment chunk) of 40 interleaved "topics" with 10 terms each (5 per document), plus
        // one term common to all.
        let (n, topics) = (5000u32, 40u32);
        let mut starts = vec![0u32];
        let mut term_of = Vec::new();
        for d in 0..n {
            let base = (d % topics) * 10;
            for t in 0..5 {
                term_of.push(base + (d / topics + t) % 10);
            }
            term_of.push(topics * 10);
            starts.push(term_of.len() as u32);
        }
        let num_terms = (topics * 10 + 1) as usize;
        let mut df = vec![0u32; num_terms];
        for &t in &term_of {
            df[t as usize] += 1;
        }
        let idf = term_weights(&df, n as usize);
        let weight: Vec<f32> = term_of.iter().map(|&t| idf[t as usize] * 100.0).collect();
        let data = DocTerms {
            starts: &starts,
            term_of: &term_of,
            weight: &weight,
            num_terms,
        };
        let order = cluster_order(&data);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        // Documents of one topic end up next to each other: few topic switches along the
        // order (the input order switches at every document).
        let switches = order
            .windows(2)
            .filter(|w| w[0] % topics != w[1] % topics)
            .count();
        assert!(switches < 3 * topics as usize, "{switches} switches");
        // Parallel == one thread: the order does not depend on how the work was split.
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| cluster_order(&data));
        assert_eq!(order, one_thread);
    }
}
