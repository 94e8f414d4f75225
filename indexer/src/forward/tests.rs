use super::*;

/// Every block's span holds exactly that block's postings and its bound is their largest
/// impact (rounded up to the step), in both layouts.
#[test]
fn spans_and_bounds_hold_each_blocks_postings() {
    let postings = [(1, 5), (3, 7), (40, 2), (70, 9), (71, 1), (200, 4)];
    let (shift, num_blocks) = (5, 7);
    let sparse = TermPostings::build(&postings, 9, shift, num_blocks);
    assert!(matches!(sparse, TermPostings::Sparse { .. }));
    // Many postings per block: dense.
    let many: Vec<(u32, u32)> = (0..200).map(|d| (d, 1 + d % 300)).collect();
    let dense = TermPostings::build(&many, 299, shift, num_blocks);
    assert!(matches!(dense, TermPostings::Dense { .. }));
    for (t, postings) in [(&sparse, &postings[..]), (&dense, &many[..])] {
        check(t, postings, shift, num_blocks);
    }
    // Sparse with skip groups (and bound bytes): 200 postings over 400 blocks, unevenly.
    let spread: Vec<(u32, u32)> = (0..200u32)
        .map(|i| (i * i / 4 + i, 1 + i % 7))
        .filter(|&(d, _)| d < 400 << shift)
        .collect();
    let grouped = TermPostings::build(&spread, 7, shift, 400);
    assert!(
        matches!(&grouped, TermPostings::Sparse { groups, maxima: Some(_), docs: Docs::Narrow(_), .. } if !groups.is_empty())
    );
    check(&grouped, &spread, shift, 400);
    // Without bound bytes: the spans handed out by the bounding pass are the same.
    let rare: Vec<(u32, u32)> = spread.iter().copied().step_by(3).collect();
    let few = TermPostings::build(&rare, 7, shift, 400);
    assert!(
        matches!(&few, TermPostings::Sparse { groups, maxima: None, .. } if !groups.is_empty())
    );
    check(&few, &rare, shift, 400);
    spans_match(&few, shift);
    // A large segment: groups of 2^16 documents for narrow doc ids pay for a term with
    // enough postings, not for one with few (its doc ids stay wide, its groups wider).
    let blocks = 1 << 17;
    for (count, narrow) in [(3_000u32, true), (80, false)] {
        let stride = (blocks << shift) / count;
        let postings: Vec<(u32, u32)> = (0..count)
            .map(|i| (i * stride + i % 29, 1 + i % 200))
            .collect();
        let t = TermPostings::build(&postings, 200, shift, blocks);
        let TermPostings::Sparse { docs, groups, .. } = &t else {
            panic!("sparse")
        };
        assert!(!groups.is_empty());
        assert_eq!(matches!(docs, Docs::Narrow(_)), narrow, "{count} postings");
        check(&t, &postings, shift, blocks);
        spans_match(&t, shift);
    }
}

/// The two-pass run splitting hands out every block's span and largest impact as a plain
/// grouping does, runs crossing chunk and group boundaries included.
#[test]
fn runs_equal_a_plain_grouping() {
    let shift = 5;
    for (n, stride) in [
        (0u32, 1u32),
        (1, 1),
        (63, 1),
        (64, 1),
        (65, 1),
        (300, 3),
        (500, 7),
        (700, 41),
    ] {
        let docs: Vec<u32> = (0..n).map(|i| i * stride + i % stride).collect();
        let impacts: Vec<u8> = (0..n).map(|i| (1 + i * 37 % 250) as u8).collect();
        let mut want: Vec<(u32, u32, (u32, u32))> = Vec::new();
        for (i, (&d, &w)) in docs.iter().zip(&impacts).enumerate() {
            match want.last_mut() {
                Some((b, m, span)) if *b == d >> shift => {
                    *m = (*m).max(u32::from(w));
                    span.1 = i as u32 + 1;
                }
                _ => want.push((d >> shift, u32::from(w), (i as u32, i as u32 + 1))),
            }
        }
        let mut got = Vec::new();
        block_spans(&docs, &impacts, shift, &mut |b, m, span| {
            got.push((b, m, span))
        });
        assert_eq!(got, want, "{n} postings, stride {stride}");
        // The same postings cut into skip groups of 4 blocks, doc ids counted per group.
        let group_shift = 2;
        let per_group = 1 << (shift + group_shift);
        let num_groups = docs.last().map_or(0, |&d| d / per_group + 1) as usize;
        let mut groups = vec![0u32; num_groups + 1];
        for (g, start) in groups.iter_mut().enumerate() {
            *start = docs.partition_point(|&d| d < g as u32 * per_group) as u32;
        }
        let narrow: Vec<u16> = docs.iter().map(|&d| (d % per_group) as u16).collect();
        let mut got = Vec::new();
        group_spans(
            &narrow,
            &impacts,
            &groups,
            group_shift,
            shift,
            &mut |b, m, span| got.push((b, m, span)),
        );
        assert_eq!(got, want, "{n} postings, stride {stride}, in groups");
    }
}

/// The bounding pass over a term's postings hands out each block's span and largest impact.
fn spans_match(t: &TermPostings, shift: u32) {
    let mut seen = 0;
    t.for_each_block_span(shift, |b, m, span| {
        assert_eq!(span, t.span(b, shift));
        assert_eq!(m, t.max_in(span));
        seen += 1;
    });
    assert!(seen > 0);
}

fn check(t: &TermPostings, postings: &[(u32, u32)], shift: u32, num_blocks: u32) {
    let mask = (1 << shift) - 1;
    let mut bounds = vec![0u32; num_blocks as usize];
    t.for_each_bound(shift, |b, m| bounds[b as usize] = m);
    for b in 0..num_blocks {
        let want: Vec<(u32, u32)> = postings
            .iter()
            .copied()
            .filter(|(d, _)| d >> shift == b)
            .collect();
        let mut acc = vec![0u64; 1 << shift];
        let n = t.accumulate(t.span(b, shift), 2, mask, &mut acc);
        assert_eq!(n as usize, want.len(), "block {b}");
        for &(d, w) in &want {
            assert_eq!(acc[(d & mask) as usize], 2 * u64::from(w));
        }
        let max = want.iter().map(|p| p.1).max().unwrap_or(0);
        assert!(bounds[b as usize] >= max, "block {b}");
        assert_eq!(bounds[b as usize] == 0, max == 0, "block {b}");
        // Codes are within one step of the block's largest impact.
        if let Some((codes, step)) = t.block_maxima() {
            assert!(bounds[b as usize] < max + step, "block {b}");
            assert_eq!(codes.get(b as usize) * step, bounds[b as usize]);
        }
    }
}
