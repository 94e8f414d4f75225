//! MaskVLM re-ranker training (`lexlip train --objective rerank --init LEXICON_MODEL`).
//!
//! The lexicon model's towers stay frozen; a small fusion encoder on top of their hidden states
//! learns (MaskVLM sec. 3.2, eq. 1):
//! - **ITC**: the tower states, through the projections the fusion encoder reads, pooled and
//!   contrasted in the batch (aligns the fusion's inputs, which frozen towers leave apart);
//! - **ITM**: whether a text and an image belong together, against hard negatives drawn from the
//!   lexicon model's own top-k (the mistakes the re-ranker exists to fix);
//! - **MLM**: the masked tokens of a caption (30 %, `[MASK]` only) from the unmasked image;
//! - **MIM**: the raw pixels of masked patches (60 %) from the unmasked caption (L1).
//!
//! The towers being frozen keeps a step cheap on a CPU (their passes need no gradients) and
//! keeps the re-ranker reading exactly the states the lexicon model produces.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use lexlip_model::rerank::{FORMAT, FusionConfig, RerankConfig, Towers};
use lexlip_model::{Encoders, LoadOptions, PreprocessedImage};
use lexlip_proto::SparseVector;
use rayon::prelude::*;

use crate::bert::{BertConfig, BertLayer};
use crate::checkpoint;
use crate::data::{self, Corpus, Order, mask_patches};
use crate::error::{Result, TrainError};
use crate::losses::{cross_entropy, info_nce, l1, l2_normalize};
use crate::nn::{Act, Dropout, INIT_STD, LayerNorm, Linear, attention_bias, gather_rows};
use crate::optim::{AdamW, AdamWConfig, Param};
use crate::options::TrainOptions;
use crate::params::{Init, ParamBuilder, Source, snapshot, sorted_vars};
use crate::rng::{Rng, key};
use crate::run::{Observer, RunControl, Summary};
use crate::steps::{Batches, Computed, Objective, Span};
use crate::text::TextTokenizer;

/// The trainable part: fusion encoder, ITM head and the two reconstruction heads.
pub struct RerankModel {
    pub store: VarMap,
    pub config: FusionConfig,
    text_projection: Linear,
    image_projection: Linear,
    modality: Tensor,
    norm: LayerNorm,
    layers: Vec<BertLayer>,
    itm: Linear,
    mlm_transform: Linear,
    mlm_norm: LayerNorm,
    mlm_bias: Tensor,
    /// The frozen text tower's word embeddings: the MLM decoder (tied, as in BERT).
    word_embeddings: Tensor,
    mim: Linear,
}

/// Fused states of a batch of pairs and where each part sits.
pub struct Fused {
    /// `(pairs, text tokens + image tokens, hidden)`.
    pub states: Tensor,
    pub text_tokens: usize,
}

impl RerankModel {
    /// Builds the fusion encoder and heads with parameters from `source` (random ones keyed by
    /// the seed for a new run). `config.hidden_size` must be the text tower's width: the MLM
    /// decoder is its word embeddings.
    pub fn new(
        config: FusionConfig,
        text_hidden: usize,
        image_hidden: usize,
        word_embeddings: Tensor,
        pixels_per_patch: usize,
        source: Source<'_>,
        device: &Device,
    ) -> Result<Self> {
        config.validate()?;
        let h = config.hidden_size;
        if word_embeddings.dim(1)? != h {
            return Err(TrainError::invalid(format!(
                "the fusion width {h} must equal the text tower's {}",
                word_embeddings.dim(1)?
            )));
        }
        let vocab = word_embeddings.dim(0)?;
        let store = VarMap::new();
        let pb = ParamBuilder::new(&store, source, DType::F32, device);
        let f = pb.pp("fusion");
        let bert = BertConfig::sized(
            1,
            h,
            config.num_hidden_layers,
            config.num_attention_heads,
            config.intermediate_size,
        );
        let layers = (0..config.num_hidden_layers)
            .map(|i| BertLayer::new(&f.pp("encoder").pp("layer").pp(i), &bert))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            text_projection: Linear::new(&f.pp("text_projection"), text_hidden, h, true)?,
            image_projection: Linear::new(&f.pp("image_projection"), image_hidden, h, true)?,
            modality: f.get(
                &[2, h],
                "modality_embeddings.weight",
                Init::Normal(INIT_STD),
            )?,
            norm: LayerNorm::new(&f.pp("LayerNorm"), h, 1e-12)?,
            layers,
            itm: Linear::new(&pb.pp("itm"), h, 2, true)?,
            mlm_transform: Linear::new(&pb.pp("mlm").pp("dense"), h, h, true)?,
            mlm_norm: LayerNorm::new(&pb.pp("mlm").pp("LayerNorm"), h, 1e-12)?,
            mlm_bias: pb.pp("mlm").get(&[vocab], "bias", Init::Const(0.0))?,
            word_embeddings: word_embeddings.to_dtype(DType::F32)?.detach(),
            mim: Linear::new(&pb.pp("mim"), h, pixels_per_patch, true)?,
            store,
            config,
        })
    }

    /// The parameters AdamW updates, in name order (a reconstruction head whose loss is off
    /// gets no gradient and is left out).
    pub fn params(&self, weights: Weights) -> Vec<Param> {
        sorted_vars(&self.store)
            .into_iter()
            .filter(|(name, _)| {
                (weights.mlm > 0.0 || !name.starts_with("mlm."))
                    && (weights.mim > 0.0 || !name.starts_with("mim."))
            })
            .map(|(name, var)| Param::new(name, var, 1.0))
            .collect()
    }

    /// Fuses text states `(pairs, nt, ht)` (mask `(pairs, nt)`) with image states
    /// `(pairs, ni, hi)`: the same computation as the served [`lexlip_model::rerank::Fusion`].
    pub fn fuse(&self, text: &Tensor, mask: &Tensor, image: &Tensor) -> Result<Fused> {
        let (b, nt, _) = text.dims3()?;
        let ni = image.dim(1)?;
        let t = self
            .text_projection
            .forward(text)?
            .broadcast_add(&self.modality.narrow(0, 0, 1)?)?;
        let i = self
            .image_projection
            .forward(image)?
            .broadcast_add(&self.modality.narrow(0, 1, 1)?)?;
        let mut xs = self.norm.forward(&Tensor::cat(&[&t, &i], 1)?)?;
        let full = Tensor::cat(
            &[
                &mask.to_dtype(DType::F32)?,
                &Tensor::ones((b, ni), DType::F32, xs.device())?,
            ],
            1,
        )?;
        let bias = attention_bias(&full, DType::F32)?;
        let drop = Dropout::off();
        for layer in &self.layers {
            xs = layer.forward(&xs, &bias, &drop)?;
        }
        Ok(Fused {
            states: xs,
            text_tokens: nt,
        })
    }

    /// ITC features: the text's projected states averaged over its tokens and the image's over
    /// its patches, L2-normalised, as `(image, text)`. They go through the same projections the
    /// fusion encoder reads, so ITC aligns its inputs (MaskVLM's ITC, on top of frozen towers).
    pub fn itc_features(
        &self,
        text: &Tensor,
        mask: &Tensor,
        image: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let t = self
            .text_projection
            .forward(text)?
            .broadcast_mul(&m)?
            .sum(1)?;
        let t = t.broadcast_div(&m.sum(1)?)?;
        let i = self.image_projection.forward(image)?.mean(1)?;
        Ok((l2_normalize(&i)?, l2_normalize(&t)?))
    }

    /// ITM logits `(pairs, 2)`: the product of the fused text and image `[CLS]` states.
    pub fn itm_logits(&self, fused: &Fused) -> Result<Tensor> {
        let s = &fused.states;
        let cls =
            (s.narrow(1, 0, 1)?.squeeze(1)? * s.narrow(1, fused.text_tokens, 1)?.squeeze(1)?)?;
        self.itm.forward(&cls)
    }

    /// Vocabulary logits of fused states at `rows` (flattened `pair · tokens + position`).
    pub fn mlm_logits(&self, fused: &Fused, rows: &Tensor) -> Result<Tensor> {
        let x = gather_rows(&fused.states, rows)?;
        let x = self
            .mlm_norm
            .forward(&Act::Gelu.forward(&self.mlm_transform.forward(&x)?)?)?;
        Ok(x.matmul(&self.word_embeddings.t()?)?
            .broadcast_add(&self.mlm_bias)?)
    }

    /// Reconstructed pixels `(rows, 3·p·p)` of fused states at `rows`.
    pub fn mim_pixels(&self, fused: &Fused, rows: &Tensor) -> Result<Tensor> {
        self.mim.forward(&gather_rows(&fused.states, rows)?)
    }

    /// The tensors a served re-ranker loads (`fusion.*`, `itm.*`).
    pub fn served_tensors(&self) -> Result<HashMap<String, Tensor>> {
        Ok(snapshot(&self.store)?
            .into_iter()
            .filter(|(name, _)| name.starts_with("fusion.") || name.starts_with("itm."))
            .collect())
    }
}

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

/// Hard negatives from the lexicon model's own ranking: for each distinct caption, the images it
/// ranks highest that do not carry that caption; for each image, the distinct captions it ranks
/// highest that it does not carry.
#[derive(Debug, Clone, Default)]
pub struct HardNegatives {
    /// Distinct caption (token sequence) of each pair.
    pub caption_of_pair: Vec<u32>,
    /// A pair carrying each distinct caption.
    pub pair_of_caption: Vec<u32>,
    pub images_for_caption: Vec<Vec<u32>>,
    pub captions_for_image: Vec<Vec<u32>>,
    /// The images that carry each distinct caption (never its negatives).
    pub images_of_caption: Vec<Vec<u32>>,
}

impl HardNegatives {
    /// Ranks with the lexicon vectors of every image and distinct caption; `top` per list.
    pub fn mine(
        corpus: &Corpus,
        image_vectors: &[SparseVector],
        caption_vectors: &[SparseVector],
        caption_of_pair: Vec<u32>,
        top: usize,
    ) -> Self {
        let n_captions = caption_vectors.len();
        let mut pair_of_caption = vec![0u32; n_captions];
        let mut images_of_caption: Vec<Vec<u32>> = vec![Vec::new(); n_captions];
        let mut captions_of_image: Vec<Vec<u32>> = vec![Vec::new(); corpus.images.len()];
        for (p, pair) in corpus.pairs.iter().enumerate() {
            let c = caption_of_pair[p] as usize;
            pair_of_caption[c] = p as u32;
            images_of_caption[c].push(pair.image);
            captions_of_image[pair.image as usize].push(c as u32);
        }
        let mut terms: HashMap<String, u32> = HashMap::new();
        let ids = |v: &SparseVector, terms: &mut HashMap<String, u32>| -> Vec<(u32, f32)> {
            v.iter()
                .map(|(t, w)| {
                    let n = terms.len() as u32;
                    (*terms.entry(t.to_string()).or_insert(n), w)
                })
                .collect()
        };
        let images: Vec<Vec<(u32, f32)>> =
            image_vectors.iter().map(|v| ids(v, &mut terms)).collect();
        let captions: Vec<Vec<(u32, f32)>> =
            caption_vectors.iter().map(|v| ids(v, &mut terms)).collect();
        let postings = |docs: &[Vec<(u32, f32)>]| {
            let mut p: Vec<Vec<(u32, f32)>> = vec![Vec::new(); terms.len()];
            for (d, v) in docs.iter().enumerate() {
                for &(t, w) in v {
                    p[t as usize].push((d as u32, w));
                }
            }
            p
        };
        let rank = |queries: &[Vec<(u32, f32)>],
                    docs: usize,
                    index: &[Vec<(u32, f32)>],
                    exclude: &(dyn Fn(usize) -> Vec<u32> + Sync)| {
            queries
                .par_iter()
                .enumerate()
                .map(|(q, v)| {
                    let mut scores = vec![0f32; docs];
                    for &(t, w) in v {
                        for &(d, dw) in &index[t as usize] {
                            scores[d as usize] += w * dw;
                        }
                    }
                    for d in exclude(q) {
                        scores[d as usize] = f32::NEG_INFINITY;
                    }
                    let mut order: Vec<u32> = (0..docs as u32)
                        .filter(|&d| scores[d as usize] > 0.0)
                        .collect();
                    order.sort_by(|&a, &b| {
                        scores[b as usize]
                            .total_cmp(&scores[a as usize])
                            .then(a.cmp(&b))
                    });
                    order.truncate(top);
                    order
                })
                .collect::<Vec<_>>()
        };
        let image_index = postings(&images);
        let caption_index = postings(&captions);
        let images_for_caption = rank(&captions, images.len(), &image_index, &|c| {
            images_of_caption[c].clone()
        });
        let captions_for_image = rank(&images, captions.len(), &caption_index, &|i| {
            captions_of_image[i].clone()
        });
        Self {
            caption_of_pair,
            pair_of_caption,
            images_for_caption,
            captions_for_image,
            images_of_caption,
        }
    }

    /// A negative image for pair `p`: with probability `hard`, one of its caption's hard
    /// negatives; otherwise (or when it has none) any other image that does not carry the
    /// caption.
    pub fn image_for(&self, p: usize, image: u32, images: usize, hard: f64, rng: &mut Rng) -> u32 {
        let caption = self.caption_of_pair[p] as usize;
        let list = &self.images_for_caption[caption];
        if !list.is_empty() && rng.uniform() < hard {
            return list[rng.below(list.len())];
        }
        let positives = &self.images_of_caption[caption];
        for _ in 0..8 {
            let candidate = other(image, images, rng);
            if !positives.contains(&candidate) {
                return candidate;
            }
        }
        other(image, images, rng)
    }

    /// A negative caption (as a pair index) for image `image` of pair `p`, likewise.
    pub fn pair_for(&self, p: usize, image: u32, pairs: usize, hard: f64, rng: &mut Rng) -> u32 {
        let list = &self.captions_for_image[image as usize];
        if !list.is_empty() && rng.uniform() < hard {
            return self.pair_of_caption[list[rng.below(list.len())] as usize];
        }
        let own = self.caption_of_pair[p];
        for _ in 0..8 {
            let candidate = other(p as u32, pairs, rng);
            if self.caption_of_pair[candidate as usize] != own
                && !self.images_of_caption[self.caption_of_pair[candidate as usize] as usize]
                    .contains(&image)
            {
                return candidate;
            }
        }
        other(p as u32, pairs, rng)
    }
}

fn other(x: u32, n: usize, rng: &mut Rng) -> u32 {
    if n < 2 {
        return x;
    }
    let y = rng.below(n - 1) as u32;
    if y >= x { y + 1 } else { y }
}

/// The distinct captions (token sequences) of the corpus and each pair's.
pub fn distinct_captions(corpus: &Corpus) -> (Vec<Vec<u32>>, Vec<u32>) {
    let mut index: HashMap<&[u32], u32> = HashMap::new();
    let mut distinct = Vec::new();
    let mut of_pair = Vec::with_capacity(corpus.pairs.len());
    for pair in &corpus.pairs {
        let n = index.len() as u32;
        let id = *index.entry(pair.tokens.as_slice()).or_insert_with(|| {
            distinct.push(pair.tokens.clone());
            n
        });
        of_pair.push(id);
    }
    (distinct, of_pair)
}

/// The losses of one step.
pub struct RerankLosses {
    pub total: Tensor,
    pub parts: Vec<(&'static str, Tensor)>,
    /// Fraction of the ITM pairs classified correctly.
    pub itm_accuracy: f64,
}

/// One step's inputs, on the host.
pub struct RerankBatch {
    /// Captions, their negatives and their masked copies (3·B rows).
    pub ids: Vec<Vec<u32>>,
    /// Images, their negatives and their masked copies (3·B).
    pub images: Vec<PreprocessedImage>,
    /// MLM positions per pair and original ids.
    pub text_masks: Vec<(Vec<usize>, Vec<u32>)>,
    /// MIM patches per pair and their pixels.
    pub patch_masks: Vec<(Vec<usize>, Vec<f32>)>,
}

/// The weights of the objectives besides ITM.
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub mlm: f64,
    pub mim: f64,
    pub itc: f64,
}

/// ITC temperature (ALBEF's and MaskVLM's starting value).
pub const ITC_TAU: f64 = 0.07;

/// The losses of a batch of `B` pairs (see the module docs): 3·B ITM pairs (positive, negative
/// image, negative caption), B MLM pairs and B MIM pairs in one fusion pass.
pub fn step_losses(
    model: &RerankModel,
    towers: &Towers,
    batch: &RerankBatch,
    weights: Weights,
) -> Result<RerankLosses> {
    let b = batch.text_masks.len();
    let device = towers.image_encoder().device().clone();
    let (text, mask) = towers.text_states(&batch.ids)?;
    let image = towers.image_states(&batch.images)?;
    let nt = text.dim(1)?;
    let ni = image.dim(1)?;
    let range = |a: usize, n: usize| -> Result<Tensor> {
        Ok(Tensor::arange(a as u32, (a + n) as u32, &device)?)
    };
    // Pairs: (t, v), (t, v⁻), (t⁻, v), (t_masked, v), (t, v_masked).
    let t_idx = Tensor::cat(
        &[
            &range(0, b)?,
            &range(0, b)?,
            &range(b, b)?,
            &range(2 * b, b)?,
            &range(0, b)?,
        ],
        0,
    )?;
    let v_idx = Tensor::cat(
        &[
            &range(0, b)?,
            &range(b, b)?,
            &range(0, b)?,
            &range(0, b)?,
            &range(2 * b, b)?,
        ],
        0,
    )?;
    let fused = model.fuse(
        &text.index_select(&t_idx, 0)?,
        &mask.index_select(&t_idx, 0)?,
        &image.index_select(&v_idx, 0)?,
    )?;
    let n = nt + ni;
    let itm_all = model.itm_logits(&fused)?;
    let itm_logits = itm_all.narrow(0, 0, 3 * b)?;
    let labels: Vec<u32> = (0..3 * b).map(|i| u32::from(i < b)).collect();
    let itm = cross_entropy(&itm_logits, &Tensor::new(labels.as_slice(), &device)?)?;
    let predicted: Vec<u32> = itm_logits.argmax(1)?.to_vec1()?;
    let correct = predicted
        .iter()
        .zip(&labels)
        .filter(|(p, l)| p == l)
        .count();
    let mut parts = vec![("itm", itm.clone())];
    let mut total = itm;
    if weights.itc > 0.0 {
        let (i, t) = model.itc_features(
            &text.narrow(0, 0, b)?,
            &mask.narrow(0, 0, b)?,
            &image.narrow(0, 0, b)?,
        )?;
        let (itc, _, _) = info_nce(&i, &t, ITC_TAU)?;
        total = (total + (&itc * weights.itc)?)?;
        parts.push(("itc", itc));
    }
    if weights.mlm > 0.0 {
        let mut rows = Vec::new();
        let mut targets = Vec::new();
        for (k, (positions, ids)) in batch.text_masks.iter().enumerate() {
            for (&p, &t) in positions.iter().zip(ids) {
                rows.push(((3 * b + k) * n + p) as u32);
                targets.push(t);
            }
        }
        let logits = model.mlm_logits(&fused, &Tensor::new(rows.as_slice(), &device)?)?;
        let mlm = cross_entropy(&logits, &Tensor::new(targets.as_slice(), &device)?)?;
        total = (total + (&mlm * weights.mlm)?)?;
        parts.push(("mlm", mlm));
    }
    if weights.mim > 0.0 {
        let mut rows = Vec::new();
        let mut pixels = Vec::new();
        for (k, (patches, px)) in batch.patch_masks.iter().enumerate() {
            for &p in patches {
                // Image tokens follow the text; the first is the image's [CLS].
                rows.push(((4 * b + k) * n + nt + 1 + p) as u32);
            }
            pixels.extend_from_slice(px);
        }
        let predicted = model.mim_pixels(&fused, &Tensor::new(rows.as_slice(), &device)?)?;
        let target = Tensor::from_vec(pixels, predicted.dims(), &device)?;
        let mim = l1(&predicted, &target)?;
        total = (total + (&mim * weights.mim)?)?;
        parts.push(("mim", mim));
    }
    Ok(RerankLosses {
        total,
        parts,
        itm_accuracy: correct as f64 / (3 * b) as f64,
    })
}

/// The text tower's encoder layers renamed as fusion layers (`bert.encoder.layer.i.*` →
/// `fusion.encoder.layer.i.*`), cycling when the fusion encoder is deeper.
pub fn fusion_init(text: &lexlip_model::Weights, layers: usize) -> lexlip_model::Weights {
    let text_layers = (0..)
        .take_while(|i| {
            text.names()
                .any(|n| n.starts_with(&format!("bert.encoder.layer.{i}.")))
        })
        .count();
    let mut tensors = HashMap::new();
    if text_layers > 0 {
        for i in 0..layers {
            let from = format!("bert.encoder.layer.{}.", i % text_layers);
            for name in text.names().filter(|n| n.starts_with(&from)) {
                if let Some(t) = text.get(name) {
                    let to = format!("fusion.encoder.layer.{i}.{}", &name[from.len()..]);
                    tensors.insert(to, t.to_dtype(DType::F32).unwrap_or_else(|_| t.clone()));
                }
            }
        }
    }
    lexlip_model::Weights::from_tensors(tensors, text.source())
}

/// What `--objective rerank` reads from a lexicon model directory.
fn lexicon_dirs(init: Option<&Path>) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let Some(dir) = init else {
        return Err(TrainError::invalid(
            "--objective rerank trains on top of a lexicon model: give it as --init (e.g. \
             --init models/emoji-tiny)",
        ));
    };
    let (text, image) = (dir.join("text"), dir.join("image"));
    if !text.join("config.json").is_file() || !image.join("config.json").is_file() {
        return Err(TrainError::invalid(format!(
            "{}: --objective rerank needs a lexicon model directory with text/ and image/ \
             towers (what `lexlip train` writes, e.g. models/emoji-tiny)",
            dir.display()
        )));
    }
    Ok((text, image))
}

/// Trains a re-ranker into `opts.out` (checkpoints, resume and Ctrl-C as `lexlip train`).
pub fn train(
    opts: &TrainOptions,
    ctl: &RunControl,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let started = Instant::now();
    let (text_dir, image_dir) = lexicon_dirs(opts.init.as_deref())?;
    let init = opts.init.clone().unwrap_or_default();
    std::fs::create_dir_all(&opts.out).map_err(|e| TrainError::io(&opts.out, e))?;
    let input = crate::run::input(opts)?;
    let device = lexlip_model::device(opts.gpu)?;
    let tokenizer = TextTokenizer::load(&text_dir.join("tokenizer.json"), opts.max_length)?;
    let encoders = Encoders::load_with(
        &init,
        &device,
        &LoadOptions {
            max_length: Some(opts.max_length),
            image_size: opts.image_size,
            ..Default::default()
        },
    )?;
    let image_size = encoders.image()?.image_size();
    let towers = Towers::load(&text_dir, &image_dir, image_size, opts.max_length, &device)?;
    let corpus = data::load(&input, &tokenizer, &mut |d, t| observer.checking(d, t))?;
    for e in &corpus.examples {
        observer.message(&format!("skipped {e}"));
    }
    if corpus.pairs.len() < opts.batch_size || corpus.images.len() < 2 {
        return Err(TrainError::Corpus(format!(
            "{} usable pairs over {} images; a re-ranker needs at least one batch \
             (--batch-size {}) and two images",
            corpus.pairs.len(),
            corpus.images.len(),
            opts.batch_size
        )));
    }
    // Every image once, preprocessed (the towers are frozen: no augmentation).
    let processor = towers.image_encoder().processor().clone();
    let images: Vec<PreprocessedImage> = corpus
        .images
        .par_iter()
        .map(|r| {
            let bytes = data::read_image(r).map_err(|(_, m)| TrainError::Corpus(m))?;
            Ok(processor.preprocess(&bytes)?)
        })
        .collect::<Result<_>>()?;
    // Hard negatives from the lexicon model's ranking of the whole training set.
    observer.message(&format!(
        "ranking {} images and their captions with the lexicon model {} for hard negatives",
        images.len(),
        init.display()
    ));
    let (distinct, caption_of_pair) = distinct_captions(&corpus);
    let image_vectors = {
        let enc = encoders.image()?;
        let mut out = Vec::with_capacity(images.len());
        for (k, chunk) in images.chunks(64).enumerate() {
            out.extend(enc.encode(chunk)?);
            observer.encoding(
                (k * 64 + chunk.len()) as u64,
                (images.len() + distinct.len()) as u64,
            );
        }
        out
    };
    let caption_vectors = {
        let enc = encoders.text()?;
        let mut out = Vec::with_capacity(distinct.len());
        for chunk in distinct.chunks(256) {
            out.extend(enc.encode_ids(chunk)?);
            observer.encoding(
                (images.len() + out.len()) as u64,
                (images.len() + distinct.len()) as u64,
            );
        }
        out
    };
    let negatives = HardNegatives::mine(
        &corpus,
        &image_vectors,
        &caption_vectors,
        caption_of_pair,
        opts.rerank_negatives,
    );
    drop(encoders);
    let patch = towers.image_encoder().patch_size();
    let patches = (image_size / patch) * (image_size / patch);
    let h = towers.text_hidden_size();
    let heads = towers.text_config().num_attention_heads;
    let config = FusionConfig {
        hidden_size: h,
        num_hidden_layers: opts.fusion_layers,
        num_attention_heads: heads,
        intermediate_size: 4 * h,
    };
    let words = lexlip_model::Weights::from_safetensors_dir(&text_dir)?;
    let word_embeddings = words
        .get("bert.embeddings.word_embeddings.weight")
        .ok_or_else(|| TrainError::invalid("the text tower has no word embeddings"))?
        .to_device(&device)?;
    // The fusion layers start as copies of the text tower's layers (ALBEF and MaskVLM start
    // their cross-modality encoders from a pre-trained text encoder); the rest is random.
    let start_from = fusion_init(&words, opts.fusion_layers);
    let model = RerankModel::new(
        config,
        h,
        towers.image_hidden_size(),
        word_embeddings,
        3 * patch * patch,
        Source::WeightsOr(&start_from, opts.seed ^ key("rerank")),
        &device,
    )?;
    let weights = Weights {
        mlm: opts.rerank_mlm,
        mim: opts.rerank_mim,
        itc: opts.rerank_itc,
    };
    let params = model.params(weights);
    let mut adam = AdamW::new(AdamWConfig {
        weight_decay: opts.weight_decay,
        ..AdamWConfig::default()
    });
    let order = Order::new(opts.seed, corpus.pairs.len(), opts.batch_size);
    let spe = order.steps_per_epoch();
    let total = opts
        .steps
        .unwrap_or_else(|| ((opts.epochs * spe as f64).ceil() as u64).max(1));
    let fp = {
        use sha2::{Digest, Sha256};
        let desc = serde_json::json!({
            "options": opts.fingerprint_json(),
            "input": input.signature()?,
            "init": init,
        });
        format!("{:x}", Sha256::digest(desc.to_string().as_bytes()))
    };
    let mut start = 0;
    if let Some((dir, state)) = checkpoint::resumable(&opts.out, &fp, opts.restart)? {
        let all = checkpoint::tensors(&dir)?;
        let group = |prefix: &str| checkpoint::group(&all, prefix);
        crate::params::restore(&model.store, &group("rerank"), &dir.display().to_string())?;
        adam.restore(state.adam_t, &group("adam"), &params)?;
        start = state.step;
        observer.message(&format!(
            "resuming from {} (step {start} of {total})",
            dir.display()
        ));
    }
    let stop_at = opts.stop_at.unwrap_or(total).min(total);
    let mut summary = Summary::starting(opts, 1, start, total, &corpus);
    observer.message(&format!(
        "re-ranker: fusion {} layers × {h} over the frozen towers of {}; ITM with negatives \
         {:.0} % from the lexicon top-{}, ITC ×{}, MLM ×{} (mask {}), MIM ×{} (mask {})",
        opts.fusion_layers,
        init.display(),
        100.0 * opts.rerank_hard,
        opts.rerank_negatives,
        weights.itc,
        weights.mlm,
        opts.mask_rate,
        weights.mim,
        opts.image_mask_rate
    ));
    let batches = RerankBatches {
        corpus: &corpus,
        images: &images,
        negatives: &negatives,
        tokenizer: &tokenizer,
        order,
        patch,
        patches,
        opts,
    };
    let mut objective = RerankSteps {
        model: &model,
        towers: &towers,
        params: &params,
        weights,
    };
    let span = Span {
        start,
        end: stop_at,
        total,
        steps_per_epoch: spe,
    };
    crate::steps::run(
        opts,
        ctl,
        &fp,
        &mut objective,
        batches,
        &mut adam,
        span,
        observer,
        &mut summary,
    )?;
    summary.seconds = started.elapsed().as_secs_f64();
    summary.interrupted = summary.steps_done < total;
    if summary.steps_done > start || !opts.out.join("rerank.json").is_file() {
        export(&model, &text_dir, &image_dir, image_size, opts)?;
    }
    // A start that finds the run complete keeps the record of the run that trained it.
    if summary.steps_done > start || !opts.out.join("train.json").is_file() {
        write_record(opts, ctl, &summary, &fp, &init)?;
    }
    Ok(summary)
}

#[allow(clippy::too_many_arguments)]
fn make_batch(
    corpus: &Corpus,
    images: &[PreprocessedImage],
    negatives: &HardNegatives,
    tokenizer: &TextTokenizer,
    pairs: &[usize],
    patch: usize,
    patches: usize,
    opts: &TrainOptions,
    step: u64,
) -> Result<RerankBatch> {
    let mut rng = Rng::new(&[opts.seed, key("rerank-batch"), step]);
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
        let ni = negatives.image_for(p, pair.image, images.len(), opts.rerank_hard, &mut rng);
        neg_imgs.push(images[ni as usize].clone());
        let np = negatives.pair_for(
            p,
            pair.image,
            corpus.pairs.len(),
            opts.rerank_hard,
            &mut rng,
        );
        neg_ids.push(corpus.pairs[np as usize].tokens.clone());
        let (m, positions, targets) = mask_text(&pair.tokens, tokenizer, opts.mask_rate, &mut rng);
        masked_ids.push(m);
        text_masks.push((positions, targets));
        let masked = mask_patches(patches, opts.image_mask_rate, &mut rng);
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
struct RerankBatches<'a> {
    corpus: &'a Corpus,
    images: &'a [PreprocessedImage],
    negatives: &'a HardNegatives,
    tokenizer: &'a TextTokenizer,
    order: Order,
    patch: usize,
    patches: usize,
    opts: &'a TrainOptions,
}

impl Batches for RerankBatches<'_> {
    type Batch = RerankBatch;

    fn batch(&mut self, step: u64) -> Result<RerankBatch> {
        let pairs = self.order.batch(step);
        make_batch(
            self.corpus,
            self.images,
            self.negatives,
            self.tokenizer,
            &pairs,
            self.patch,
            self.patches,
            self.opts,
            step,
        )
    }
}

/// Re-ranker steps over the frozen towers.
struct RerankSteps<'a> {
    model: &'a RerankModel,
    towers: &'a Towers,
    params: &'a [Param],
    weights: Weights,
}

impl Objective for RerankSteps<'_> {
    type Batch = RerankBatch;

    fn params(&self) -> &[Param] {
        self.params
    }

    fn losses(&mut self, _step: u64, batch: RerankBatch) -> Result<Computed> {
        let losses = step_losses(self.model, self.towers, &batch, self.weights)?;
        Ok(Computed {
            total: losses.total,
            parts: losses.parts,
            figures: vec![("itm_accuracy", losses.itm_accuracy)],
            nnz_image: None,
            nnz_text: None,
        })
    }

    fn checkpoint(&self) -> Result<(HashMap<String, Tensor>, (usize, usize))> {
        let mut tensors: HashMap<String, Tensor> = HashMap::new();
        for (name, t) in snapshot(&self.model.store)? {
            tensors.insert(format!("rerank/{name}"), t);
        }
        Ok((tensors, (0, 0)))
    }
}

/// Copies the towers, writes the fusion weights, then `rerank.json` (last: its presence says
/// the directory is complete).
fn export(
    model: &RerankModel,
    text_dir: &Path,
    image_dir: &Path,
    image_size: usize,
    opts: &TrainOptions,
) -> Result<()> {
    for (from, name) in [(text_dir, "text"), (image_dir, "image")] {
        let to = opts.out.join(name);
        std::fs::create_dir_all(&to).map_err(|e| TrainError::io(&to, e))?;
        for entry in std::fs::read_dir(from).map_err(|e| TrainError::io(from, e))? {
            let entry = entry.map_err(|e| TrainError::io(from, e))?;
            if entry.path().is_file() {
                let dest = to.join(entry.file_name());
                std::fs::copy(entry.path(), &dest).map_err(|e| TrainError::io(&dest, e))?;
            }
        }
    }
    let fusion = opts.out.join("fusion");
    std::fs::create_dir_all(&fusion).map_err(|e| TrainError::io(&fusion, e))?;
    let dtype = match opts.save_dtype {
        crate::options::SaveDtype::F32 => DType::F32,
        crate::options::SaveDtype::F16 => DType::F16,
    };
    let tensors = model
        .served_tensors()?
        .into_iter()
        .map(|(k, t)| Ok((k, t.to_dtype(dtype)?.to_device(&Device::Cpu)?)))
        .collect::<Result<HashMap<_, _>>>()?;
    let path = fusion.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &path)
        .map_err(|e| TrainError::invalid(format!("{}: {e}", path.display())))?;
    let config = RerankConfig {
        format: FORMAT.into(),
        image_size,
        max_length: opts.max_length,
        fusion: model.config,
        source: Some("lexlip train --objective rerank".into()),
    };
    let mut text =
        serde_json::to_string_pretty(&config).map_err(|e| TrainError::invalid(e.to_string()))?;
    text.push('\n');
    checkpoint::write_atomic(&opts.out.join("rerank.json"), text.as_bytes())
}

fn write_record(
    opts: &TrainOptions,
    ctl: &RunControl,
    summary: &Summary,
    fp: &str,
    init: &Path,
) -> Result<()> {
    let doc = serde_json::json!({
        "status": if summary.interrupted { "interrupted" } else { "complete" },
        "command": ctl.command_line,
        "seed": opts.seed,
        "fingerprint": fp,
        "options": opts,
        "init": init,
        "summary": summary,
    });
    let mut text =
        serde_json::to_string_pretty(&doc).map_err(|e| TrainError::invalid(e.to_string()))?;
    text.push('\n');
    checkpoint::write_atomic(&opts.out.join("train.json"), text.as_bytes())
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

    #[test]
    fn hard_negatives_rank_by_lexicon_score_and_skip_positives() {
        use lexlip_corpus::ImageRef;
        let v = |terms: &[(&str, f32)]| SparseVector::new(terms.iter().copied()).unwrap();
        let corpus = Corpus {
            images: (0..3)
                .map(|i| ImageRef::File(format!("{i}.png").into()))
                .collect(),
            image_ids: vec!["a".into(), "b".into(), "c".into()],
            pairs: vec![
                data::Pair {
                    image: 0,
                    tokens: vec![1, 5, 2],
                },
                data::Pair {
                    image: 1,
                    tokens: vec![1, 6, 2],
                },
                // The same wording as pair 0, for another image: never its negative.
                data::Pair {
                    image: 2,
                    tokens: vec![1, 5, 2],
                },
            ],
            ..Corpus::default()
        };
        let (distinct, of_pair) = distinct_captions(&corpus);
        assert_eq!(distinct.len(), 2);
        assert_eq!(of_pair, vec![0, 1, 0]);
        let images = [
            v(&[("cat", 1.0), ("dog", 0.1)]),
            v(&[("cat", 0.5), ("dog", 1.0)]),
            v(&[("cat", 2.0), ("dog", 0.2)]),
        ];
        let captions = [v(&[("cat", 1.0)]), v(&[("dog", 1.0)])];
        let n = HardNegatives::mine(&corpus, &images, &captions, of_pair, 4);
        // Caption "cat" (images 0 and 2) can only take image 1; "dog" (image 1) takes the
        // others, best first.
        assert_eq!(n.images_for_caption[0], vec![1]);
        assert_eq!(n.images_for_caption[1], vec![2, 0]);
        // Each image gets the caption it does not carry.
        assert_eq!(n.captions_for_image[1], vec![0]);
        assert_eq!(n.captions_for_image[0], vec![1]);
        let mut rng = Rng::new(&[7]);
        assert_eq!(n.image_for(0, 0, 3, 1.0, &mut rng), 1);
        assert_eq!(n.pair_for(0, 0, 3, 1.0, &mut rng), 1);
        // Easy negatives never carry the caption either: image 2 shares pair 0's wording.
        for _ in 0..20 {
            assert_eq!(n.image_for(0, 0, 3, 0.0, &mut rng), 1);
        }
        // No hard negative: any other image.
        let lonely = HardNegatives {
            images_for_caption: vec![Vec::new(); 2],
            ..n
        };
        assert_ne!(lonely.image_for(0, 0, 3, 1.0, &mut rng), 0);
    }
}
