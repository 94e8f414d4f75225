//! GRIT-VLP's grouped mini-batches over fixed representations (`--sampler grouped` for the
//! objectives that train on cached embeddings: the lexicon heads and the adapter). Their
//! inputs never change, so every epoch is grouped, the first one too, from the seed and the
//! epoch alone: a resumed run draws the same order without a checkpointed one.
//!
//! ```text
//! epoch e:  the entries a uniform permutation trains (pairs, and each pair once per view)
//!           → search spaces of --group-size entries, each walked from image to most similar
//!             caption and back ([`crate::sampler::grouped_order`])
//!           → repeats of a picture or caption moved out of each mini-batch
//! ```

use crate::cache::rows::PairRows;
use crate::cache::views::{PairInputs, drawn, pair_and_view};
use crate::error::Result;
use crate::options::TrainOptions;
use crate::sampler::{Collected, FEATURE_TERMS, Sampler, SparseRow, grouped_order};

/// How one run groups its entries: the cached rows that represent them and the sampler's sizes.
pub(crate) struct Grouping<'a> {
    /// The pictures' (and views') and captions' cached rows, read on the CPU.
    pub inputs: PairInputs<'a>,
    /// The leading columns of a picture's row that live in the captions' space (the adapter's
    /// rows hold the teacher's embedding, then the tower's features); `None`: the whole row.
    pub columns: Option<usize>,
    /// Entries an epoch orders: pairs × (views + 1).
    pub entries: usize,
    pub seed: u64,
    pub batch: usize,
    pub space: usize,
}

impl<'a> Grouping<'a> {
    /// The grouping of a run over `entries` entries read through `inputs` (`columns` as
    /// above), when `--sampler grouped` asks for one.
    pub fn asked(
        opts: &TrainOptions,
        inputs: PairInputs<'a>,
        columns: Option<usize>,
        entries: usize,
    ) -> Option<Self> {
        (opts.optim.sampler == Sampler::Grouped).then_some(Self {
            inputs,
            columns,
            entries,
            seed: opts.optim.seed,
            batch: opts.optim.batch_size,
            space: opts.optim.group_size,
        })
    }

    /// Epoch `epoch`'s order: the entries a uniform permutation trains this epoch, grouped
    /// into search spaces of `space` entries by a walk over their rows' similarities, then
    /// [`separate_repeats`].
    pub fn order(&self, rows: &PairRows, epoch: u64) -> Result<Vec<u32>> {
        let steps = self.entries / self.batch;
        let trained: Vec<usize> =
            crate::rng::Rng::new(&[self.seed, crate::rng::key("order"), epoch])
                .permutation(self.entries)
                .into_iter()
                .take(steps * self.batch)
                .collect();
        let mut collected = Vec::with_capacity(trained.len());
        for chunk in trained.chunks(4096) {
            let (image, text) = self.inputs.rows(&drawn(chunk.to_vec(), rows))?;
            let image = match self.columns {
                Some(n) => image.narrow(1, 0, n)?,
                None => image,
            };
            let image = SparseRow::rows_of(&image, FEATURE_TERMS)?;
            let text = SparseRow::rows_of(&text, FEATURE_TERMS)?;
            for ((&entry, image), text) in chunk.iter().zip(image).zip(text) {
                collected.push(Collected {
                    pair: entry as u32,
                    image,
                    text,
                });
            }
        }
        let mut rng = crate::rng::Rng::new(&[self.seed, crate::rng::key("group"), epoch]);
        let mut order = grouped_order(&collected, self.entries, self.batch, self.space, &mut rng)?;
        separate_repeats(&mut order, self.batch, rows);
        Ok(order)
    }

    /// Sets `order`'s epoch of `step` to its grouped order, unless it holds it already.
    pub fn refresh(
        &self,
        order: &mut crate::data::Order,
        rows: &PairRows,
        step: u64,
    ) -> Result<()> {
        let epoch = step / order.steps_per_epoch().max(1);
        if !order.has(epoch) {
            let grouped = self.order(rows, epoch)?;
            order.set(epoch, &grouped);
        }
        Ok(())
    }
}

/// Moves apart entries of one mini-batch that share their picture or their caption's tokens
/// (a picture's other captions or views, one caption over several art styles). Grouping puts
/// them side by side, the most alike of all, and in-batch InfoNCE would push each away from the
/// other as a negative. A repeat swaps places with the first pair of a later mini-batch (wrapping
/// around) that repeats nothing in either; the order stays a permutation of the same pairs.
pub(crate) fn separate_repeats(order: &mut [u32], batch: usize, rows: &PairRows) {
    use std::collections::HashSet;
    let batches = order.len() / batch.max(1);
    if batches < 2 {
        return;
    }
    // An entry's picture and caption tokens (a view's are its pair's): what a mini-batch must
    // not hold twice.
    let key = |v: u32| {
        let (p, _) = pair_and_view(v as usize, rows.len().max(1));
        (rows.image(p), rows.tokens(p))
    };
    let members = |order: &[u32], b: usize| -> (HashSet<u32>, HashSet<&[u32]>) {
        order[b * batch..(b + 1) * batch]
            .iter()
            .map(|&p| key(p))
            .unzip()
    };
    for b in 0..batches {
        let (mut images, mut captions) = (HashSet::new(), HashSet::new());
        for i in b * batch..(b + 1) * batch {
            let (image, caption) = key(order[i]);
            if !images.contains(&image) && !captions.contains(caption) {
                images.insert(image);
                captions.insert(caption);
                continue;
            }
            // A partner from a later mini-batch that fits here, and where this pair fits.
            let mut swapped = false;
            'search: for step in 1..batches {
                let other = (b + step) % batches;
                let (o_images, o_captions) = members(order, other);
                if o_images.contains(&image) || o_captions.contains(caption) {
                    continue;
                }
                for j in other * batch..(other + 1) * batch {
                    let (oi, oc) = key(order[j]);
                    if !images.contains(&oi) && !captions.contains(oc) {
                        order.swap(i, j);
                        images.insert(oi);
                        captions.insert(oc);
                        swapped = true;
                        break 'search;
                    }
                }
            }
            if !swapped {
                // Nowhere to go (a corpus of a few repeated items): the repeat stays.
                images.insert(image);
                captions.insert(caption);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::separate_repeats;
    use crate::cache::rows::PairRows;
    use crate::data::{Corpus, Pair};
    use proptest::prelude::*;

    fn rows_of(pairs: &[(u32, u32)]) -> PairRows {
        let mut corpus = Corpus {
            pairs: pairs
                .iter()
                .map(|&(image, caption)| Pair {
                    image,
                    tokens: vec![101, caption, 102],
                })
                .collect(),
            ..Corpus::default()
        };
        PairRows::take(&mut corpus)
    }

    /// Mini-batches holding a picture or a caption twice.
    fn repeats(order: &[u32], batch: usize, rows: &PairRows) -> usize {
        order
            .chunks_exact(batch)
            .map(|b| {
                let images: std::collections::HashSet<u32> =
                    b.iter().map(|&p| rows.image(p as usize)).collect();
                let captions: std::collections::HashSet<&[u32]> =
                    b.iter().map(|&p| rows.tokens(p as usize)).collect();
                usize::from(images.len() < b.len() || captions.len() < b.len())
            })
            .sum()
    }

    proptest! {
        /// The repaired order is a permutation of the same pairs, and no mini-batch repeats a
        /// picture or a caption when the corpus has few enough repeats to spread them (each
        /// picture and caption at most twice, with four or more mini-batches).
        #[test]
        fn separated_orders_keep_their_pairs_and_repeat_nothing(
            images in 8u32..40,
            twice in proptest::collection::vec(any::<bool>(), 40),
            batch in 2usize..5,
            seed in any::<u64>(),
        ) {
            // Pairs (picture, caption): every picture has a caption of its own, some a second.
            let mut pairs: Vec<(u32, u32)> = (0..images).map(|i| (i, 1000 + i)).collect();
            for i in 0..images {
                if twice[i as usize] {
                    pairs.push((i, 2000 + i));
                }
            }
            let rows = rows_of(&pairs);
            let n = (pairs.len() / batch) * batch;
            prop_assume!(n / batch >= 4);
            // The worst order: each picture's pairs side by side.
            let mut order: Vec<u32> = (0..pairs.len() as u32).collect();
            order.sort_by_key(|&p| (pairs[p as usize].0, seed.rotate_left(p)));
            let mut repaired = order.clone();
            separate_repeats(&mut repaired, batch, &rows);
            let mut sorted = repaired.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..pairs.len() as u32).collect::<Vec<_>>());
            prop_assert_eq!(repeats(&repaired[..n], batch, &rows), 0);
        }
    }

    /// One caption shared by two pictures (one concept in two art styles) counts as a repeat too.
    #[test]
    fn a_shared_caption_is_separated() {
        let rows = rows_of(&[(0, 7), (1, 7), (2, 8), (3, 9), (4, 10), (5, 11)]);
        let mut order: Vec<u32> = (0..6).collect();
        assert_eq!(repeats(&order, 2, &rows), 1);
        separate_repeats(&mut order, 2, &rows);
        assert_eq!(repeats(&order, 2, &rows), 0, "{order:?}");
    }

    /// With views, entry `v` is pair `v mod P` seen through view `v div P`: a pair's views are
    /// one picture and one caption, so they are moved apart too.
    #[test]
    fn a_pairs_views_are_separated() {
        let rows = rows_of(&[(0, 7), (1, 8), (2, 9), (3, 10)]);
        // Entries 0 and 4 are pair 0 and its first view.
        let mut order: Vec<u32> = vec![0, 4, 1, 5, 2, 6, 3, 7];
        assert_eq!(repeats_of_entries(&order, 2, &rows), 4);
        separate_repeats(&mut order, 2, &rows);
        assert_eq!(repeats_of_entries(&order, 2, &rows), 0, "{order:?}");
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<u32>>());
    }

    fn repeats_of_entries(order: &[u32], batch: usize, rows: &PairRows) -> usize {
        let pairs: Vec<u32> = order.iter().map(|&v| v % rows.len() as u32).collect();
        repeats(&pairs, batch, rows)
    }
}
