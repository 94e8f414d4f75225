//! Masked captions and images, and the batches of re-ranker steps.

use lexlip_model::PreprocessedImage;

use super::model::RerankBatch;
use super::negatives::HardNegatives;
use crate::data::{Corpus, Order, mask_patches};
use crate::error::Result;
use crate::options::TrainOptions;
use crate::rng::{Rng, key};
use crate::steps::Batches;
use crate::text::TextTokenizer;

/// Masks [`TextTokenizer::mask_positions`] with `[MASK]` only (MaskVLM). Returns the masked
/// ids, the positions and their original ids.
pub fn mask_text(
    tokens: &[u32],
    tokenizer: &TextTokenizer,
    rate: f64,
    rng: &mut Rng,
) -> (Vec<u32>, Vec<usize>, Vec<u32>) {
    let positions = tokenizer.mask_positions(tokens, rate, rng);
    let mut ids = tokens.to_vec();
    let targets = positions.iter().map(|&p| tokens[p]).collect();
    for &p in &positions {
        ids[p] = tokenizer.mask;
    }
    (ids, positions, targets)
}

/// The pixels of patch `k` of a `(3, size, size)` image in `(channel, row, col)` order (the
/// order the patch embedding reads).
pub fn patch_pixels(image: &PreprocessedImage, patch: usize, k: usize) -> Vec<f32> {
    let size = image.size();
    let grid = size / patch;
    let (r0, c0) = ((k / grid) * patch, (k % grid) * patch);
    let data = image.data();
    let mut out = Vec::with_capacity(3 * patch * patch);
    for c in 0..3 {
        for r in r0..r0 + patch {
            let row = c * size * size + r * size;
            out.extend_from_slice(&data[row + c0..row + c0 + patch]);
        }
    }
    out
}

/// `image` with the given patches set to 0 (the mean colour after normalisation).
pub fn masked_image(
    image: &PreprocessedImage,
    patch: usize,
    masked: &[usize],
) -> Result<PreprocessedImage> {
    let size = image.size();
    let grid = size / patch;
    let mut data = image.data().to_vec();
    for &k in masked {
        let (r0, c0) = ((k / grid) * patch, (k % grid) * patch);
        for c in 0..3 {
            for r in r0..r0 + patch {
                let row = c * size * size + r * size;
                data[row + c0..row + c0 + patch].fill(0.0);
            }
        }
    }
    Ok(PreprocessedImage::from_chw(size, data)?)
}

/// The batch of `pairs` at `step` (its hard negatives and masks drawn from the step's seed).
fn make_batch(from: &RerankBatches, pairs: &[usize], step: u64) -> Result<RerankBatch> {
    let RerankBatches {
        corpus,
        images,
        negatives,
        tokenizer,
        patch,
        patches,
        opts,
        ..
    } = *from;
    let mut rng = Rng::new(&[opts.optim.seed, key("rerank-batch"), step]);
    let n = pairs.len();
    let mut ids = Vec::with_capacity(3 * n);
    let mut imgs = Vec::with_capacity(3 * n);
    let mut neg_ids = Vec::with_capacity(n);
    let mut neg_imgs = Vec::with_capacity(n);
    let mut masked_ids = Vec::with_capacity(n);
    let mut masked_imgs = Vec::with_capacity(n);
    let mut text_masks = Vec::with_capacity(n);
    let mut patch_masks = Vec::with_capacity(n);
    for &p in pairs {
        let pair = &corpus.pairs[p];
        let image = &images[pair.image as usize];
        ids.push(pair.tokens.clone());
        imgs.push(image.clone());
        let ni = negatives.image_for(
            p,
            pair.image,
            images.len(),
            opts.method.rerank_hard,
            &mut rng,
        );
        neg_imgs.push(images[ni as usize].clone());
        let np = negatives.pair_for(
            p,
            pair.image,
            corpus.pairs.len(),
            opts.method.rerank_hard,
            &mut rng,
        );
        neg_ids.push(corpus.pairs[np as usize].tokens.clone());
        let (m, positions, targets) =
            mask_text(&pair.tokens, tokenizer, opts.method.mask_rate, &mut rng);
        masked_ids.push(m);
        text_masks.push((positions, targets));
        let masked = mask_patches(patches, opts.method.image_mask_rate, &mut rng);
        let mut pixels = Vec::with_capacity(masked.len() * 3 * patch * patch);
        for &k in &masked {
            pixels.extend(patch_pixels(image, patch, k));
        }
        masked_imgs.push(masked_image(image, patch, &masked)?);
        patch_masks.push((masked, pixels));
    }
    ids.extend(neg_ids);
    ids.extend(masked_ids);
    imgs.extend(neg_imgs);
    imgs.extend(masked_imgs);
    Ok(RerankBatch {
        ids,
        images: imgs,
        text_masks,
        patch_masks,
    })
}

/// The re-ranker's batches: each pair with a hard negative image and caption, a masked copy
/// of its caption and of its image.
pub(super) struct RerankBatches<'a> {
    pub(super) corpus: &'a Corpus,
    pub(super) images: &'a [PreprocessedImage],
    pub(super) negatives: &'a HardNegatives,
    pub(super) tokenizer: &'a TextTokenizer,
    pub(super) order: Order,
    pub(super) patch: usize,
    pub(super) patches: usize,
    pub(super) opts: &'a TrainOptions,
}

impl Batches for RerankBatches<'_> {
    type Batch = RerankBatch;

    fn batch(&mut self, step: u64) -> Result<RerankBatch> {
        let pairs = self.order.batch(step);
        make_batch(self, &pairs, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_patches_are_zero_and_their_pixels_are_the_targets() {
        // A 4 × 4 image of 2 × 2 patches, pixel value = its index.
        let data: Vec<f32> = (0..48).map(|v| v as f32 + 1.0).collect();
        let image = PreprocessedImage::from_chw(4, data).unwrap();
        // Patch 1: rows 0-1, columns 2-3, in (channel, row, col) order.
        assert_eq!(
            patch_pixels(&image, 2, 1),
            vec![3., 4., 7., 8., 19., 20., 23., 24., 35., 36., 39., 40.]
        );
        let masked = masked_image(&image, 2, &[1]).unwrap();
        assert!(patch_pixels(&masked, 2, 1).iter().all(|&v| v == 0.0));
        for k in [0, 2, 3] {
            assert_eq!(patch_pixels(&masked, 2, k), patch_pixels(&image, 2, k));
        }
        let mut rng = Rng::new(&[1]);
        let chosen = mask_patches(16, 0.6, &mut rng);
        assert_eq!(chosen.len(), 10);
        assert!(chosen.windows(2).all(|w| w[0] < w[1]) && chosen[9] < 16);
    }
}
