//! Document order by recursive graph bisection (the idea of Dhulipala et al., KDD 2016, used by
//! Block-Max Pruning's published figures): an alternative to the k-means order of
//! [`super::reorder`].
//!
//! The documents are split into two halves, and documents are swapped between the halves while
//! a swap lowers an estimate of the bits needed to store every term's doc-id gaps:
//! a term in `d` of a half's `n` documents costs about `d · log2(n / (d + 1))`. Each round
//! computes, for every document, the gain of moving it to the other half, sorts both halves by
//! gain and swaps the best pairs while their summed gain is positive. The halves are then split
//! the same way, down to [`LEAF`] documents. Fewer bits for the gaps means a term's postings are
//! packed into fewer blocks, which is what tightens block bounds.
//!
//! Split points are multiples of 64 documents (16 below 256), so partitions line up with the
//! pruning blocks. The result is deterministic: ties go to the lower document id, and the two
//! halves of a split are independent whether or not they run in parallel.

use super::reorder::DocTerms;

/// Partitions of at most this many documents are not split further.
const LEAF: usize = 16;
/// Swap rounds per split at most (a split stops earlier when a round swaps nothing).
const ROUNDS: usize = 20;
/// Partitions at least this large split their two halves on two threads.
const PARALLEL_MIN: usize = 8192;

/// New order of the documents: `order[new_id] = old_id`.
pub(super) fn bisection_order(data: &DocTerms) -> Vec<u32> {
    let n = data.num_docs();
    let mut order: Vec<u32> = (0..n as u32).collect();
    // log2(i) for every degree and partition size that can occur.
    let log2: Vec<f32> = (0..=n + 1).map(|i| (i.max(1) as f32).log2()).collect();
    let ctx = Context { data, log2: &log2 };
    bisect(&ctx, &mut order, &mut Scratch::new(data.num_terms));
    order
}

struct Context<'a> {
    data: &'a DocTerms<'a>,
    log2: &'a [f32],
}

impl Context<'_> {
    /// Gap-cost estimate of a term in `d` of `n` documents (`log_n` = log2 n).
    fn cost(&self, d: u32, log_n: f32) -> f32 {
        d as f32 * (log_n - self.log2[d as usize + 1])
    }
}

/// Per-term buffers sized by the vocabulary; only the entries of touched terms are non-zero
/// between splits.
struct Scratch {
    /// Documents of the term in the left / right half.
    left: Vec<u32>,
    right: Vec<u32>,
    /// Gain of moving one of the term's documents left → right / right → left.
    to_right: Vec<f32>,
    to_left: Vec<f32>,
    touched: Vec<u32>,
    gains_left: Vec<(f32, u32)>,
    gains_right: Vec<(f32, u32)>,
}

impl Scratch {
    fn new(num_terms: usize) -> Self {
        Self {
            left: vec![0; num_terms],
            right: vec![0; num_terms],
            to_right: vec![0.0; num_terms],
            to_left: vec![0.0; num_terms],
            touched: Vec::new(),
            gains_left: Vec::new(),
            gains_right: Vec::new(),
        }
    }
}

fn bisect(ctx: &Context, docs: &mut [u32], scratch: &mut Scratch) {
    let len = docs.len();
    if len <= LEAF {
        return;
    }
    let unit = if len >= 256 { 64 } else { LEAF };
    let mid = ((len / 2 + unit / 2) / unit * unit).clamp(unit, len - 1);
    split(ctx, docs, mid, scratch);
    let (left, right) = docs.split_at_mut(mid);
    if len >= PARALLEL_MIN {
        rayon::join(
            || bisect(ctx, left, scratch),
            || bisect(ctx, right, &mut Scratch::new(ctx.data.num_terms)),
        );
    } else {
        bisect(ctx, left, scratch);
        bisect(ctx, right, scratch);
    }
}

/// Swap rounds between `docs[..mid]` and `docs[mid..]`.
fn split(ctx: &Context, docs: &mut [u32], mid: usize, s: &mut Scratch) {
    let data = ctx.data;
    let (log_l, log_r) = (ctx.log2[mid], ctx.log2[docs.len() - mid]);
    for (i, &d) in docs.iter().enumerate() {
        for t in data.term_ids(d) {
            let t = t as usize;
            if s.left[t] == 0 && s.right[t] == 0 {
                s.touched.push(t as u32);
            }
            if i < mid {
                s.left[t] += 1;
            } else {
                s.right[t] += 1;
            }
        }
    }
    for _ in 0..ROUNDS {
        for &t in &s.touched {
            let t = t as usize;
            let (l, r) = (s.left[t], s.right[t]);
            let now = ctx.cost(l, log_l) + ctx.cost(r, log_r);
            s.to_right[t] = if l > 0 {
                now - ctx.cost(l - 1, log_l) - ctx.cost(r + 1, log_r)
            } else {
                0.0
            };
            s.to_left[t] = if r > 0 {
                now - ctx.cost(l + 1, log_l) - ctx.cost(r - 1, log_r)
            } else {
                0.0
            };
        }
        let gains = |half: &[u32], per_term: &[f32], out: &mut Vec<(f32, u32)>| {
            out.clear();
            out.extend(half.iter().map(|&d| {
                let g: f32 = data.term_ids(d).map(|t| per_term[t as usize]).sum();
                (g, d)
            }));
            out.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        };
        let (left, right) = docs.split_at_mut(mid);
        gains(left, &s.to_right, &mut s.gains_left);
        gains(right, &s.to_left, &mut s.gains_right);
        let swaps = s
            .gains_left
            .iter()
            .zip(&s.gains_right)
            .take_while(|(a, b)| a.0 + b.0 > 0.0)
            .count();
        if swaps == 0 {
            break;
        }
        for i in 0..swaps {
            for t in data.term_ids(s.gains_left[i].1) {
                s.left[t as usize] -= 1;
                s.right[t as usize] += 1;
            }
            for t in data.term_ids(s.gains_right[i].1) {
                s.right[t as usize] -= 1;
                s.left[t as usize] += 1;
            }
        }
        // The halves in gain order, the swapped documents at the front of their new half.
        let moved_left = s.gains_right[..swaps].iter();
        let stay_left = s.gains_left[swaps..].iter();
        for (slot, &(_, d)) in left.iter_mut().zip(moved_left.chain(stay_left)) {
            *slot = d;
        }
        let moved_right = s.gains_left[..swaps].iter();
        let stay_right = s.gains_right[swaps..].iter();
        for (slot, &(_, d)) in right.iter_mut().zip(moved_right.chain(stay_right)) {
            *slot = d;
        }
    }
    for t in s.touched.drain(..) {
        s.left[t as usize] = 0;
        s.right[t as usize] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The topic of document `d`: mixed up, so that no split of the input order is balanced
    /// by construction (from a perfectly balanced split every document gains from moving, and
    /// the halves trade places round after round).
    fn topic(d: u32, topics: u32) -> u32 {
        (d.wrapping_mul(2_654_435_761) >> 7) % topics
    }

    /// `n` documents of `topics` mixed topics, 5 of a topic's 10 terms each.
    fn topical(n: u32, topics: u32) -> (Vec<u32>, Vec<u32>, Vec<f32>, usize) {
        let mut starts = vec![0u32];
        let mut term_of = Vec::new();
        for d in 0..n {
            let base = topic(d, topics) * 10;
            for t in 0..5 {
                term_of.push(base + (d / topics + t) % 10);
            }
            starts.push(term_of.len() as u32);
        }
        let weight = vec![1.0; term_of.len()];
        (starts, term_of, weight, (topics * 10) as usize)
    }

    #[test]
    fn order_is_a_permutation_that_groups_alike_documents() {
        let (n, topics) = (3000u32, 30u32);
        let (starts, term_of, weight, num_terms) = topical(n, topics);
        let data = DocTerms {
            starts: &starts,
            term_of: &term_of,
            weight: &weight,
            num_terms,
        };
        let order = bisection_order(&data);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        // Blocks of 16 documents hold one topic but where one topic ends and the next begins
        // (~100 documents per topic; in the input order nearly every block is mixed).
        let mixed = order
            .chunks(16)
            .filter(|b| b.iter().any(|&d| topic(d, topics) != topic(b[0], topics)))
            .count();
        assert!(mixed < 2 * topics as usize, "{mixed} mixed blocks");
        // Parallel == one thread.
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| bisection_order(&data));
        assert_eq!(order, one_thread);
    }

    #[test]
    fn small_and_empty_batches() {
        for n in [0u32, 1, 15, 16, 17, 100] {
            let (starts, term_of, weight, num_terms) = topical(n, 3);
            let data = DocTerms {
                starts: &starts,
                term_of: &term_of,
                weight: &weight,
                num_terms,
            };
            let mut order = bisection_order(&data);
            order.sort_unstable();
            assert_eq!(order, (0..n).collect::<Vec<_>>());
        }
    }
}
