//! The block tables against plain scans of the postings (`blocks.rs`).

use super::*;
use crate::synth::Rng;

/// The bounding pass of terms without bound bytes adds each block's largest impact times
/// `q` and the table then answers every (slot, block) with the block's postings, as a
/// plain scan of the postings does: several terms per table, segments of several sizes,
/// one- and two-byte impacts, wide and narrow doc ids, and reuse across segments.
#[test]
fn span_table_equals_a_scan_of_the_postings() {
    use crate::forward::TermPostings;
    let mut rng = Rng::new(3);
    let mut table = SpanTable::default();
    let shift = 5;
    for num_blocks in [5u32, 63, 64, 65, 200, 1000, 1 << 17] {
        table.reset(num_blocks as usize);
        let mut ub = vec![0u32; num_blocks as usize];
        let mut want_ub = vec![0u32; num_blocks as usize];
        let mut terms = Vec::new();
        for t in 0..4u32 {
            // At most one posting per 4 blocks: the term keeps no bound bytes.
            let n = if num_blocks == 1 << 17 {
                [3_000, 80, 5_000, 1][t as usize]
            } else {
                rng.range(1, (num_blocks as usize - 1) / 4) as u32
            };
            let largest = if t == 2 { 900 } else { 255 };
            let mut postings: Vec<(u32, u32)> = (0..n)
                .map(|_| {
                    let doc = rng.range(0, (num_blocks << shift) as usize - 1) as u32;
                    (doc, rng.range(1, largest) as u32)
                })
                .collect();
            postings.sort_unstable();
            postings.dedup_by_key(|p| p.0);
            let max = postings.iter().map(|p| p.1).max().unwrap_or(1);
            let m = ForwardTerm::new(
                Default::default(),
                max,
                shift,
                TermPostings::build(&postings, max, shift, num_blocks),
            );
            assert!(!m.has_bound_bytes());
            let q = 1 + t;
            for &(doc, w) in &postings {
                let r = (doc >> shift) as usize;
                want_ub[r] = want_ub[r].max(q * w);
            }
            assert_eq!(table.add(&m, q, &mut ub), terms.len());
            terms.push(postings);
            for (u, w) in ub.iter_mut().zip(&mut want_ub) {
                // Bounds add up over terms; compare this term's share.
                assert_eq!(*u, *w, "term {t}: {num_blocks} blocks");
                *u = 0;
                *w = 0;
            }
        }
        for (slot, postings) in terms.iter().enumerate() {
            let mut want = vec![(0u32, 0u32); num_blocks as usize];
            for (i, &(doc, _)) in postings.iter().enumerate() {
                let span = &mut want[(doc >> shift) as usize];
                if span.1 == 0 {
                    span.0 = i as u32;
                }
                span.1 = i as u32 + 1;
            }
            for r in 0..num_blocks {
                assert_eq!(
                    table.span(slot, r),
                    want[r as usize],
                    "slot {slot} block {r}"
                );
            }
        }
    }
}
