//! Recall@K from ranked lists, by the Flickr30k / MS-COCO rule that LexLIP's Tables 1 and 2
//! follow: a query is answered at K when ANY of its relevant items is among its first K results
//! (a caption has one relevant image; an image has all its captions).

/// The cut-offs reported: R@1, R@5, R@10.
pub const KS: [usize; 3] = [1, 5, 10];

/// The deepest cut-off: how many results each query asks for.
pub const DEPTH: usize = 10;

/// Position (0-based) of the first relevant item of `ranking`, if any is there.
pub fn first_relevant(ranking: &[usize], relevant: &[usize]) -> Option<usize> {
    ranking.iter().position(|item| relevant.contains(item))
}

/// R@k for each `k` of `ks`: the fraction of queries whose first relevant item is ranked before
/// position `k`. `first` holds, per query, what [`first_relevant`] found. No queries: 0.
pub fn recall_at(first: &[Option<usize>], ks: &[usize]) -> Vec<f64> {
    ks.iter()
        .map(|&k| {
            let found = first.iter().filter(|f| f.is_some_and(|p| p < k)).count();
            if first.is_empty() {
                0.0
            } else {
                found as f64 / first.len() as f64
            }
        })
        .collect()
}

/// R@1, R@5, R@10 of queries given as (ranking, relevant items).
pub fn recall<'a>(queries: impl IntoIterator<Item = (&'a [usize], &'a [usize])>) -> [f64; 3] {
    let first: Vec<Option<usize>> = queries
        .into_iter()
        .map(|(ranking, relevant)| first_relevant(ranking, relevant))
        .collect();
    let r = recall_at(&first, &KS);
    [r[0], r[1], r[2]]
}

/// Each query's first [`DEPTH`] results, per direction, in query order: what a later setting's
/// overlap with the exact one is computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rankings {
    pub t2i: Vec<Vec<usize>>,
    pub i2t: Vec<Vec<usize>>,
}

/// Of each query's `reference` results (an exact search's first [`DEPTH`]), the share `ours`
/// also returns, averaged over the queries whose reference is not empty; None when no query has
/// one. The same queries must come in the same order in both.
pub fn overlap(ours: &[Vec<usize>], reference: &[Vec<usize>]) -> Option<f64> {
    let shares: Vec<f64> = ours
        .iter()
        .zip(reference)
        .filter(|(_, r)| !r.is_empty())
        .map(|(o, r)| r.iter().filter(|x| o.contains(x)).count() as f64 / r.len() as f64)
        .collect();
    (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_relevant_is_the_earliest_of_any() {
        // Relevant items 7 and 3; 3 comes first, at position 1.
        assert_eq!(first_relevant(&[5, 3, 7], &[7, 3]), Some(1));
        assert_eq!(first_relevant(&[5, 6], &[7]), None);
        assert_eq!(first_relevant(&[], &[7]), None);
        assert_eq!(first_relevant(&[7], &[]), None);
    }

    /// Text → image: one relevant image per caption.
    #[test]
    fn text_to_image_by_hand() {
        // Images 0..=11. Caption queries and the image each belongs to:
        // q0 → image 0, ranked first                       (found at 1, 5, 10)
        // q1 → image 1, ranked 3rd                         (found at 5, 10)
        // q2 → image 2, ranked 7th                         (found at 10)
        // q3 → image 3, ranked 11th (beyond the depth)     (never found)
        // q4 → image 4, not returned (shares no term)      (never found)
        let q0 = [0, 1, 2];
        let q1 = [9, 8, 1, 0];
        let q2 = [9, 8, 7, 6, 5, 4, 2];
        let q3 = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 3];
        let q4 = [0, 1];
        let queries: Vec<(&[usize], &[usize])> = vec![
            (&q0, &[0]),
            (&q1, &[1]),
            (&q2, &[2]),
            (&q3, &[3]),
            (&q4, &[4]),
        ];
        // R@1 = 1/5 (q0); R@5 = 2/5 (q0, q1); R@10 = 3/5 (q0, q1, q2).
        assert_eq!(recall(queries), [0.2, 0.4, 0.6]);
    }

    /// Image → text: an image is found at K when any of its captions is in its top K.
    #[test]
    fn image_to_text_any_caption_counts() {
        // Captions 0..=19; image A owns captions {0, 1, 2}, image B {3, 4}, image C {5}, image D
        // {6, 7}.
        // A: ranking 9, 8, 2, 0 → first caption of A (2) at position 2: found at 5 and 10.
        // B: ranking 4, 3 → caption 4 first: found at 1, 5, 10 (the second one changes nothing).
        // C: ranking 0, 1, 2, 3, 4, 6, 7, 8, 9, 5 → caption 5 at position 9: found at 10 only.
        // D: ranking 0, 1, 2 → none of 6, 7: never found.
        let a = [9, 8, 2, 0];
        let b = [4, 3];
        let c = [0, 1, 2, 3, 4, 6, 7, 8, 9, 5];
        let d = [0, 1, 2];
        let queries: Vec<(&[usize], &[usize])> =
            vec![(&a, &[0, 1, 2]), (&b, &[3, 4]), (&c, &[5]), (&d, &[6, 7])];
        // R@1 = 1/4 (B); R@5 = 2/4 (A, B); R@10 = 3/4 (A, B, C).
        assert_eq!(recall(queries), [0.25, 0.5, 0.75]);
    }

    /// Order within the first results does not count; a query without exact results is left
    /// out of the mean.
    #[test]
    fn overlap_by_hand() {
        let exact = vec![vec![1, 2, 3, 4], vec![5, 6], vec![]];
        // Query 0: 3 of 4 found (2 missing, order changed); query 1: 1 of 2; query 2 left out.
        let ours = vec![vec![4, 3, 9, 1], vec![6, 7], vec![8]];
        assert_eq!(overlap(&ours, &exact), Some((0.75 + 0.5) / 2.0));
        assert_eq!(overlap(&exact, &exact), Some(1.0));
        assert_eq!(overlap(&ours, &[vec![], vec![], vec![]]), None);
        assert_eq!(overlap(&[], &[]), None);
    }

    #[test]
    fn recall_at_any_cut_off_and_no_queries() {
        // First relevant at positions 0, 1, 4, none: R@1 = 1/4, R@2 = 2/4, R@4 = 2/4, R@5 = 3/4.
        let first = [Some(0), Some(1), Some(4), None];
        assert_eq!(recall_at(&first, &[1, 2, 4, 5]), [0.25, 0.5, 0.5, 0.75]);
        assert_eq!(recall_at(&[], &KS), [0.0, 0.0, 0.0]);
        // Recall never decreases with k.
        let r = recall_at(&first, &[1, 3, 5, 10, 100]);
        assert!(r.windows(2).all(|w| w[0] <= w[1]));
    }
}
