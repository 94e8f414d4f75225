//! GRIT-VLP's grouped mini-batches (`--sampler grouped`; ECCV 2022, sec. 4.1 and Algorithms
//! 1-2 of its appendix): hard in-batch negatives for the contrastive loss at no extra forward
//! pass. The representations every step computes anyway are kept (their strongest
//! [`FEATURE_TERMS`] terms) for one epoch; at its end they are
//!
//! 1. shuffled at the example level (randomness between epochs),
//! 2. cut into search spaces of `--group-size` pairs, and in each a greedy walk goes from a
//!    random pair to the most similar unvisited one, alternating image→text and text→image
//!    similarity (eq. 5), so that consecutive pairs are hard negatives of each other,
//! 3. cut into mini-batches, which are shuffled as units (randomness between batches).
//!
//! The result is the next epoch's order. The first epoch is random, as in the paper.
//!
//! ```text
//! epoch e:   steps see pairs in order Oₑ, features of every trained pair are collected
//! boundary:  Oₑ₊₁ = grouped_order(features, …)  (the pairs epoch e left out lead epoch e + 1)
//! ```
//!
//! `Oₑ₊₁` is a permutation of all pairs; like the random order, an epoch trains its first
//! `pairs / batch` full mini-batches and leaves the rest (`pairs mod batch` pairs) for later.
//! Here those pairs are placed in the first mini-batch of the next epoch, so no pair sits out
//! two epochs in a row.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::rng::{Rng, key};

/// Terms (or dimensions) of a representation kept for grouping: the strongest by magnitude.
pub const FEATURE_TERMS: usize = 64;

/// How each epoch's order is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Sampler {
    /// A fresh uniform permutation per epoch.
    #[default]
    Random,
    /// GRIT-VLP: pairs whose representations were similar last epoch share a mini-batch.
    Grouped,
}

/// The strongest entries of one representation, sorted by id (term or dimension).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseRow {
    pub ids: Vec<u32>,
    pub weights: Vec<f32>,
}

impl SparseRow {
    /// The `k` non-zero entries of `values` with the largest magnitude (ties: lower id).
    pub fn strongest(values: &[f32], k: usize) -> Self {
        let mut nz: Vec<(u32, f32)> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0.0 && v.is_finite())
            .map(|(i, v)| (i as u32, *v))
            .collect();
        if nz.len() > k {
            let by_strength = |a: &(u32, f32), b: &(u32, f32)| {
                b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0))
            };
            nz.select_nth_unstable_by(k, by_strength);
            nz.truncate(k);
        }
        nz.sort_unstable_by_key(|e| e.0);
        Self {
            ids: nz.iter().map(|e| e.0).collect(),
            weights: nz.iter().map(|e| e.1).collect(),
        }
    }

    /// The rows of a `(batch, dim)` tensor.
    pub fn rows_of(t: &Tensor, k: usize) -> Result<Vec<Self>> {
        let rows = t.detach().to_dtype(DType::F32)?.to_vec2::<f32>()?;
        Ok(rows.iter().map(|r| Self::strongest(r, k)).collect())
    }

    /// Inner product (both sorted by id).
    pub fn dot(&self, other: &Self) -> f32 {
        let (mut i, mut j, mut s) = (0, 0, 0.0f32);
        while i < self.ids.len() && j < other.ids.len() {
            match self.ids[i].cmp(&other.ids[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    s += self.weights[i] * other.weights[j];
                    i += 1;
                    j += 1;
                }
            }
        }
        s
    }
}

/// One trained pair's representations, as collected during an epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    pub pair: u32,
    pub image: SparseRow,
    pub text: SparseRow,
}

/// `sim[i·m + j]` = image `i` · text `j` of a search space, through an inverted index of the
/// texts (cost: the term overlaps, not m² merges).
fn similarities(space: &[&Collected]) -> Vec<f32> {
    let m = space.len();
    let mut postings: HashMap<u32, Vec<(u32, f32)>> = HashMap::new();
    for (j, c) in space.iter().enumerate() {
        for (&t, &w) in c.text.ids.iter().zip(&c.text.weights) {
            postings.entry(t).or_default().push((j as u32, w));
        }
    }
    let mut sim = vec![0.0f32; m * m];
    for (i, c) in space.iter().enumerate() {
        let row = &mut sim[i * m..(i + 1) * m];
        for (t, &w) in c.image.ids.iter().zip(&c.image.weights) {
            for &(j, tw) in postings.get(t).map(Vec::as_slice).unwrap_or(&[]) {
                row[j as usize] += w * tw;
            }
        }
    }
    sim
}

/// Phase 3 (Algorithm 2, eq. 5): a walk over one search space from a random pair, each step to
/// the unvisited pair whose text is most similar to the current image, then the one whose image
/// is most similar to the current text, alternating. Returns positions in `space`.
pub fn group(space: &[&Collected], rng: &mut Rng) -> Vec<usize> {
    let m = space.len();
    if m == 0 {
        return Vec::new();
    }
    let sim = similarities(space);
    let mut visited = vec![false; m];
    let mut cur = rng.below(m);
    let mut walk = Vec::with_capacity(m);
    let mut image_to_text = true;
    for _ in 0..m {
        visited[cur] = true;
        walk.push(cur);
        let score = |j: usize| {
            if image_to_text {
                sim[cur * m + j]
            } else {
                sim[j * m + cur]
            }
        };
        // Ties go to the lower position (deterministic).
        let next = (0..m)
            .filter(|&j| !visited[j])
            .fold(None::<(usize, f32)>, |best, j| {
                let s = score(j);
                match best {
                    Some((_, b)) if b >= s => best,
                    _ => Some((j, s)),
                }
            });
        let Some((next, _)) = next else { break };
        cur = next;
        image_to_text = !image_to_text;
    }
    walk
}

/// The order of the epoch after the one whose trained pairs are `collected`: phases 2-4 above.
/// `pairs` is the corpus size, `batch` the mini-batch, `space` the search-space size; `rng`
/// draws the shuffles and walk starts. Errors if `collected` is not `(pairs / batch) · batch`
/// distinct pairs below `pairs`.
pub fn grouped_order(
    collected: &[Collected],
    pairs: usize,
    batch: usize,
    space: usize,
    rng: &mut Rng,
) -> Result<Vec<u32>> {
    let steps = pairs / batch;
    let mut seen = vec![false; pairs];
    for c in collected {
        let p = c.pair as usize;
        if p >= pairs || std::mem::replace(&mut seen[p], true) {
            return Err(TrainError::invalid(format!(
                "grouped sampler: pair {p} collected twice or out of range (corpus of {pairs})"
            )));
        }
    }
    if collected.len() != steps * batch {
        return Err(TrainError::invalid(format!(
            "grouped sampler: {} pairs collected in an epoch of {steps} steps of {batch}",
            collected.len()
        )));
    }
    // Phase 2: example-level shuffle, then search spaces of `space` pairs.
    let shuffled: Vec<&Collected> = rng
        .permutation(collected.len())
        .into_iter()
        .map(|i| &collected[i])
        .collect();
    let mut grouped: Vec<u32> = Vec::with_capacity(pairs);
    for chunk in shuffled.chunks(space.max(1)) {
        grouped.extend(group(chunk, rng).into_iter().map(|i| chunk[i].pair));
    }
    // Phase 4: mini-batch-level shuffle.
    let mut batches: Vec<&[u32]> = grouped.chunks(batch).collect();
    let perm = rng.permutation(batches.len());
    batches = perm.into_iter().map(|i| batches[i]).collect();
    // The pairs this epoch left out replace the tail of the first mini-batch; that tail is left
    // out next.
    let mut left_out: Vec<u32> = (0..pairs as u32).filter(|&p| !seen[p as usize]).collect();
    let shuffle = rng.permutation(left_out.len());
    left_out = shuffle.into_iter().map(|i| left_out[i]).collect();
    let mut order = Vec::with_capacity(pairs);
    let Some((first, rest)) = batches.split_first() else {
        return Ok(left_out);
    };
    let keep = batch - left_out.len();
    order.extend_from_slice(&first[..keep]);
    order.extend_from_slice(&left_out);
    for b in rest {
        order.extend_from_slice(b);
    }
    order.extend_from_slice(&first[keep..]);
    Ok(order)
}

/// The grouped sampler's state within a run: the current epoch's order (from epoch 1 on) and
/// what this epoch has collected so far. Checkpoints hold both ([`GroupState::tensors`]).
#[derive(Debug, Clone, Default)]
pub struct GroupState {
    /// `(epoch, order)` of the epoch being trained, once grouped.
    pub current: Option<(u64, Vec<u32>)>,
    pub collected: Vec<Collected>,
}

/// A new epoch order and how hard its in-batch negatives are.
#[derive(Debug, Clone)]
pub struct Regrouped {
    pub order: Vec<u32>,
    /// Mean image·text similarity of the in-batch negatives, in the epoch just trained and in
    /// the new order (on the kept representations).
    pub before: f64,
    pub after: f64,
}

/// Mean image·text similarity over the negative (i ≠ j) pairs of each mini-batch of `order`,
/// on the representations in `by_pair` (pairs without one are skipped).
pub fn negative_similarity(by_pair: &HashMap<u32, &Collected>, order: &[u32], batch: usize) -> f64 {
    let (mut sum, mut n) = (0.0f64, 0u64);
    for b in order.chunks_exact(batch.max(1)) {
        let members: Vec<&Collected> = b.iter().filter_map(|p| by_pair.get(p).copied()).collect();
        for (i, a) in members.iter().enumerate() {
            for (j, c) in members.iter().enumerate() {
                if i != j {
                    sum += f64::from(a.image.dot(&c.text));
                    n += 1;
                }
            }
        }
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// Checkpoint tensor names.
const ORDER: &str = "sampler/order";
const EPOCH: &str = "sampler/epoch";
const PAIRS: &str = "sampler/pairs";

impl GroupState {
    /// Keeps the representations of a step's pairs.
    pub fn collect(&mut self, pairs: &[usize], image: &Tensor, text: &Tensor) -> Result<()> {
        let image = SparseRow::rows_of(image, FEATURE_TERMS)?;
        let text = SparseRow::rows_of(text, FEATURE_TERMS)?;
        for ((&pair, image), text) in pairs.iter().zip(image).zip(text) {
            self.collected.push(Collected {
                pair: pair as u32,
                image,
                text,
            });
        }
        Ok(())
    }

    /// Ends epoch `epoch`: the order of `epoch + 1` from what it collected.
    pub fn next_epoch(
        &mut self,
        epoch: u64,
        seed: u64,
        pairs: usize,
        batch: usize,
        space: usize,
    ) -> Result<Regrouped> {
        let mut rng = Rng::new(&[seed, key("group"), epoch]);
        let order = grouped_order(&self.collected, pairs, batch, space, &mut rng)?;
        let by_pair: HashMap<u32, &Collected> =
            self.collected.iter().map(|c| (c.pair, c)).collect();
        // Collected in training order: consecutive chunks are the batches just trained.
        let trained: Vec<u32> = self.collected.iter().map(|c| c.pair).collect();
        let before = negative_similarity(&by_pair, &trained, batch);
        let after = negative_similarity(&by_pair, &order, batch);
        self.collected.clear();
        self.current = Some((epoch + 1, order.clone()));
        Ok(Regrouped {
            order,
            before,
            after,
        })
    }

    /// The state as checkpoint tensors (rows padded to [`FEATURE_TERMS`] with zero weights).
    pub fn tensors(&self) -> Result<Vec<(String, Tensor)>> {
        let dev = &candle_core::Device::Cpu;
        let mut out = Vec::new();
        if let Some((epoch, order)) = &self.current {
            out.push((ORDER.into(), Tensor::from_slice(order, order.len(), dev)?));
            out.push((EPOCH.into(), Tensor::new(&[*epoch as u32], dev)?));
        }
        let n = self.collected.len();
        if n > 0 {
            let pairs: Vec<u32> = self.collected.iter().map(|c| c.pair).collect();
            out.push((PAIRS.into(), Tensor::from_slice(&pairs, n, dev)?));
            let image: Vec<&SparseRow> = self.collected.iter().map(|c| &c.image).collect();
            let text: Vec<&SparseRow> = self.collected.iter().map(|c| &c.text).collect();
            for (side, rows) in [("image", image), ("text", text)] {
                let mut ids = vec![0u32; n * FEATURE_TERMS];
                let mut weights = vec![0f32; n * FEATURE_TERMS];
                for (r, row) in rows.iter().enumerate() {
                    let at = r * FEATURE_TERMS;
                    ids[at..at + row.ids.len()].copy_from_slice(&row.ids);
                    weights[at..at + row.weights.len()].copy_from_slice(&row.weights);
                }
                let shape = (n, FEATURE_TERMS);
                out.push((
                    format!("sampler/{side}_ids"),
                    Tensor::from_slice(&ids, shape, dev)?,
                ));
                out.push((
                    format!("sampler/{side}_weights"),
                    Tensor::from_slice(&weights, shape, dev)?,
                ));
            }
        }
        Ok(out)
    }

    /// The state a checkpoint's tensors hold (empty when it has none).
    pub fn from_tensors(all: &HashMap<String, Tensor>) -> Result<Self> {
        let mut state = Self::default();
        if let (Some(order), Some(epoch)) = (all.get(ORDER), all.get(EPOCH)) {
            let epoch = epoch.to_vec1::<u32>()?.first().copied().unwrap_or(0);
            state.current = Some((u64::from(epoch), order.to_vec1::<u32>()?));
        }
        if let Some(pairs) = all.get(PAIRS) {
            let pairs = pairs.to_vec1::<u32>()?;
            let side = |name: &str| -> Result<Vec<SparseRow>> {
                let get = |what: &str| {
                    all.get(&format!("sampler/{name}_{what}")).ok_or_else(|| {
                        TrainError::invalid(format!("checkpoint lacks sampler/{name}_{what}"))
                    })
                };
                let ids = get("ids")?.to_vec2::<u32>()?;
                let weights = get("weights")?.to_vec2::<f32>()?;
                Ok(ids
                    .into_iter()
                    .zip(weights)
                    .map(|(ids, weights)| {
                        let (ids, weights) = ids
                            .into_iter()
                            .zip(weights)
                            .filter(|(_, w)| *w != 0.0)
                            .unzip();
                        SparseRow { ids, weights }
                    })
                    .collect())
            };
            let image = side("image")?;
            let text = side("text")?;
            state.collected = pairs
                .into_iter()
                .zip(image)
                .zip(text)
                .map(|((pair, image), text)| Collected { pair, image, text })
                .collect();
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(entries: &[(u32, f32)]) -> SparseRow {
        SparseRow {
            ids: entries.iter().map(|e| e.0).collect(),
            weights: entries.iter().map(|e| e.1).collect(),
        }
    }

    #[test]
    fn strongest_keeps_the_largest_magnitudes_sorted_by_id() {
        let r = SparseRow::strongest(&[0.0, 0.5, -3.0, 0.1, 2.0, 0.0], 3);
        assert_eq!(r, row(&[(1, 0.5), (2, -3.0), (4, 2.0)]));
        assert_eq!(SparseRow::strongest(&[0.0, 1.0], 8), row(&[(1, 1.0)]));
        assert_eq!(
            row(&[(1, 2.0), (5, 1.0)]).dot(&row(&[(0, 9.0), (5, 3.0)])),
            3.0
        );
    }

    /// The walk visits every pair once and, on two clear clusters, stays inside one before
    /// crossing to the other.
    #[test]
    fn the_walk_chains_similar_pairs() {
        let pairs: Vec<Collected> = (0..8u32)
            .map(|p| {
                let t = if p % 2 == 0 { 1 } else { 2 };
                let w = 1.0 + p as f32 * 0.01;
                Collected {
                    pair: p,
                    image: row(&[(t, w)]),
                    text: row(&[(t, w)]),
                }
            })
            .collect();
        let space: Vec<&Collected> = pairs.iter().collect();
        let walk = group(&space, &mut Rng::new(&[3]));
        let mut sorted = walk.clone();
        sorted.sort();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
        let parity: Vec<usize> = walk.iter().map(|i| i % 2).collect();
        assert!(parity[..4].iter().all(|&p| p == parity[0]), "{walk:?}");
        assert!(parity[4..].iter().all(|&p| p != parity[0]), "{walk:?}");
    }
}
