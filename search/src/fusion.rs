//! Reciprocal-rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): each list gives a document
//! `1 / (RRF_K + rank)` (rank from 1), the sums decide. It needs no score calibration between
//! a sparse dot product and a cosine, which is why hybrid search uses it.

use std::collections::HashMap;
use std::hash::Hash;

/// The fusion constant: how much the first ranks dominate (60, the paper's value).
pub const RRF_K: f64 = 60.0;

/// The `k` best documents of the fused lists, best first, with their fused scores. Ties go to
/// the smaller key, so the order never depends on hashing.
///
/// ```
/// use lexlip_search::fusion::{RRF_K, reciprocal_rank};
/// let fused = reciprocal_rank(&[vec!["a", "b"], vec!["b", "c"]], 2);
/// assert_eq!(fused[0], ("b", 1.0 / (RRF_K + 2.0) + 1.0 / (RRF_K + 1.0)));
/// assert_eq!(fused[1].0, "a");
/// ```
pub fn reciprocal_rank<K: Copy + Eq + Hash + Ord>(lists: &[Vec<K>], k: usize) -> Vec<(K, f64)> {
    let mut fused: HashMap<K, f64> = HashMap::new();
    for list in lists {
        for (rank, key) in list.iter().enumerate() {
            *fused.entry(*key).or_default() += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
    }
    let mut order: Vec<(K, f64)> = fused.into_iter().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    order.truncate(k);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(rank: usize) -> f64 {
        1.0 / (60.0 + rank as f64)
    }

    /// Two lists worked out by hand: a document in both beats one ranked first in only one.
    #[test]
    fn two_lists_by_hand() {
        let sparse = vec![1, 2, 3];
        let dense = vec![3, 4, 1];
        let fused = reciprocal_rank(&[sparse, dense], 10);
        // 1: ranks 1 and 3; 3: ranks 3 and 1 (tie, smaller key first); 2: rank 2; 4: rank 2.
        let expected = vec![
            (1, rr(1) + rr(3)),
            (3, rr(3) + rr(1)),
            (2, rr(2)),
            (4, rr(2)),
        ];
        assert_eq!(fused.len(), expected.len());
        for ((key, score), (want_key, want)) in fused.iter().zip(&expected) {
            assert_eq!(key, want_key);
            assert!((score - want).abs() < 1e-15, "{key}: {score} vs {want}");
        }
    }

    #[test]
    fn cut_to_k_and_empty_lists() {
        assert_eq!(reciprocal_rank::<u32>(&[vec![], vec![]], 5), vec![]);
        let one = reciprocal_rank(&[vec![7, 8, 9], vec![]], 2);
        assert_eq!(one, vec![(7, rr(1)), (8, rr(2))]);
    }
}
