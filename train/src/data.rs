//! Training pairs from the corpora `lexlip index` reads (through `lexlip-corpus`'s readers,
//! with their bad-item handling): every caption of an image is one (image, caption) pair. Bad
//! items are skipped and counted by reason, as `lexlip index` does; images are decoded once up
//! front so a missing or corrupt one is skipped before training rather than failing a step.
//!
//! Batches are a pure function of (seed, step): the pairs of step `s` are a slice of the
//! permutation of epoch `s / steps_per_epoch` (the last partial batch of an epoch is dropped),
//! and their masks and augmentation come from streams keyed by (seed, step, index).

use std::collections::{BTreeMap, HashMap};

use candle_core::{Device, Tensor};
use lexlip_corpus::hash::id_digest;
use lexlip_corpus::item::reason;
use lexlip_corpus::{ImageRef, Input};
use lexlip_proto::Modality;
use rayon::prelude::*;

use crate::augment::{Augment, decode_rgb};
use crate::error::{Result, TrainError};
use crate::model::Batch;
use crate::options::TrainOptions;
use crate::rng::{Rng, key};
use crate::text::TextTokenizer;
use crate::token_heads::PatchMask;

/// Bad items whose messages are kept (the counts cover all).
const EXAMPLES: usize = 10;

/// One training pair: an image (index into [`Corpus::images`]) and a tokenised caption.
#[derive(Debug, Clone)]
pub struct Pair {
    pub image: u32,
    pub tokens: Vec<u32>,
}

/// The usable pairs of a corpus and what was skipped.
#[derive(Debug, Default)]
pub struct Corpus {
    pub images: Vec<ImageRef>,
    pub image_ids: Vec<String>,
    pub pairs: Vec<Pair>,
    /// Each pair's caption as written, when asked for (`load_with`: a frozen dense
    /// model tokenizes captions its own way).
    pub texts: Option<Vec<String>>,
    /// Items the reader produced (good and bad).
    pub read: u64,
    pub skipped: BTreeMap<String, u64>,
    /// The first few skipped items, `"reason: message"`.
    pub examples: Vec<String>,
}

impl Corpus {
    fn skip(&mut self, reason: &str, message: String) {
        *self.skipped.entry(reason.to_string()).or_default() += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(format!("{reason}: {message}"));
        }
    }
}

/// A caption as [`load`] holds it until the images are checked.
enum Caption {
    /// Its image came before it: tokenised at once.
    Tokenised {
        id: String,
        image: u32,
        tokens: Vec<u32>,
        /// Kept only when the caller asks for texts.
        text: Option<String>,
    },
    /// Its image had not come yet (or never does).
    Pending {
        id: String,
        image_id: String,
        text: String,
    },
}

/// Reason for a caption whose image was skipped or never given.
pub const NO_IMAGE: &str = "no_image";

/// Reads the corpus, pairs captions with images, validates images (in parallel) and tokenises
/// captions. `progress(done, total)` reports the image check.
///
/// What it holds per pair is small and fixed (an image reference, an id, the caption's tokens):
/// a caption whose image came before it, as in a WebDataset shard, is tokenised at once rather
/// than kept as text, and images are looked up by a 16-byte digest of their id.
pub fn load(
    input: &Input,
    tokenizer: &TextTokenizer,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Corpus> {
    load_with(input, tokenizer, progress, false)
}

/// [`load`], keeping every pair's caption text in [`Corpus::texts`] when `keep_text`.
pub(crate) fn load_with(
    input: &Input,
    tokenizer: &TextTokenizer,
    progress: &mut dyn FnMut(u64, u64),
    keep_text: bool,
) -> Result<Corpus> {
    let mut corpus = Corpus::default();
    let mut texts = Vec::new();
    let mut by_id: HashMap<u128, u32> = HashMap::new();
    // In input order; paired once the images are checked.
    let mut captions: Vec<Caption> = Vec::new();
    for item in input.open()? {
        corpus.read += 1;
        let item = match item {
            Ok(i) => i,
            Err(bad) => {
                let id = bad.id.clone().unwrap_or_default();
                corpus.skip(bad.reason, format!("{id} {}", bad.message));
                continue;
            }
        };
        match (item.modality, item.image) {
            (Modality::Image, Some(image)) => {
                let digest = id_digest(&item.id);
                if by_id.contains_key(&digest) {
                    corpus.skip(
                        reason::DUPLICATE_ID,
                        format!("image id {:?} appears earlier in this input", item.id),
                    );
                    continue;
                }
                by_id.insert(digest, corpus.images.len() as u32);
                corpus.images.push(image);
                corpus.image_ids.push(item.id);
            }
            (Modality::Text, _) => {
                let image_id = item
                    .metadata
                    .get("image_id")
                    .and_then(|v| v.as_str())
                    .map(str::to_string);
                match (image_id, item.text) {
                    (Some(img), Some(text)) => captions.push(match by_id.get(&id_digest(&img)) {
                        Some(&image) => Caption::Tokenised {
                            tokens: tokenizer.encode(&text)?,
                            id: item.id,
                            image,
                            text: keep_text.then_some(text),
                        },
                        None => Caption::Pending {
                            id: item.id,
                            image_id: img,
                            text,
                        },
                    }),
                    _ => corpus.skip(NO_IMAGE, format!("{}: a text without an image", item.id)),
                }
            }
            (Modality::Image, None) => {
                corpus.skip(reason::MISSING_FILE, format!("{}: no image", item.id))
            }
        }
    }
    let bad_images = check_images(&corpus.images, progress);
    let mut usable = vec![true; corpus.images.len()];
    for (i, why) in bad_images {
        usable[i] = false;
        let (reason, message) = why;
        corpus.skip(reason, format!("{}: {message}", corpus.image_ids[i]));
    }
    for caption in captions {
        let (id, img, tokens, text) = match caption {
            Caption::Tokenised {
                id,
                image,
                tokens,
                text,
            } => (id, image, tokens, text),
            Caption::Pending { id, image_id, text } => {
                let Some(&img) = by_id.get(&id_digest(&image_id)) else {
                    corpus.skip(
                        NO_IMAGE,
                        format!("{id}: image {image_id:?} is not in the corpus"),
                    );
                    continue;
                };
                let tokens = tokenizer.encode(&text)?;
                (id, img, tokens, keep_text.then_some(text))
            }
        };
        if !usable[img as usize] {
            let image_id = &corpus.image_ids[img as usize];
            corpus.skip(NO_IMAGE, format!("{id}: image {image_id:?} was skipped"));
            continue;
        }
        if tokens.len() < 3 {
            corpus.skip(
                reason::EMPTY_CAPTION,
                format!("{id}: no tokens in its caption"),
            );
            continue;
        }
        corpus.pairs.push(Pair { image: img, tokens });
        if let Some(t) = text {
            texts.push(t);
        }
    }
    if keep_text {
        corpus.texts = Some(texts);
    }
    Ok(corpus)
}

/// The images that cannot be used, with (reason, message).
fn check_images(
    images: &[ImageRef],
    progress: &mut dyn FnMut(u64, u64),
) -> Vec<(usize, (&'static str, String))> {
    let total = images.len() as u64;
    let mut bad = Vec::new();
    let mut done = 0u64;
    for (c, chunk) in images.chunks(256).enumerate() {
        let found: Vec<(usize, (&'static str, String))> = chunk
            .par_iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let checked = read_image(r).and_then(|bytes| {
                    decode_rgb(&bytes)
                        .map(|_| ())
                        .map_err(|m| (reason::CORRUPT_IMAGE, format!("{}: {m}", r.name())))
                });
                checked.err().map(|e| (c * 256 + i, e))
            })
            .collect();
        bad.extend(found);
        done += chunk.len() as u64;
        progress(done, total);
    }
    bad
}

/// The encoded bytes of an image.
pub fn read_image(r: &ImageRef) -> std::result::Result<Vec<u8>, (&'static str, String)> {
    r.read()
        .map(|b| b.into_owned())
        .map_err(|e| (reason::MISSING_FILE, format!("{}: {e}", r.name())))
}

/// Which pairs each step trains on.
#[derive(Debug, Clone)]
pub struct Order {
    seed: u64,
    pairs: usize,
    batch: usize,
    /// The permutation of the last epoch asked for.
    cached: Option<(u64, Vec<usize>)>,
}

impl Order {
    pub fn new(seed: u64, pairs: usize, batch: usize) -> Self {
        Self {
            seed,
            pairs,
            batch,
            cached: None,
        }
    }

    pub fn steps_per_epoch(&self) -> u64 {
        (self.pairs / self.batch) as u64
    }

    /// Whether epoch `epoch`'s order is set ([`Order::set`]) rather than drawn.
    pub fn has(&self, epoch: u64) -> bool {
        self.cached.as_ref().is_some_and(|(e, _)| *e == epoch)
    }

    /// Uses `order` (a permutation of the pairs, e.g. the grouped sampler's) for `epoch`.
    pub fn set(&mut self, epoch: u64, order: &[u32]) {
        self.cached = Some((epoch, order.iter().map(|&p| p as usize).collect()));
    }

    /// The pair indices of `step`: a slice of epoch `step / steps_per_epoch`'s order, set or
    /// (when none is) a uniform permutation of the seed and the epoch.
    pub fn batch(&mut self, step: u64) -> Vec<usize> {
        let steps_per_epoch = self.steps_per_epoch().max(1);
        let epoch = step / steps_per_epoch;
        let k = (step % steps_per_epoch) as usize;
        if self.cached.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let perm = Rng::new(&[self.seed, key("order"), epoch]).permutation(self.pairs);
            self.cached = Some((epoch, perm));
        }
        match &self.cached {
            Some((_, perm)) => perm[k * self.batch..(k + 1) * self.batch].to_vec(),
            None => Vec::new(),
        }
    }
}

/// Masking settings of a batch, and whether it carries a second view of each image.
#[derive(Debug, Clone, Copy)]
pub struct Masking {
    pub rate: f64,
    pub decoder_rate: f64,
    /// A second augmented view of every image (COOKIE's visual contrastive loss).
    pub second_view: bool,
    /// Image patches to mask (ConLIP's token-level objectives, `--dense-token`).
    pub patches: Option<PatchMasking>,
}

/// Which image patches a batch masks: `round(rate · grid²)` of each image's `grid × grid`.
#[derive(Debug, Clone, Copy)]
pub struct PatchMasking {
    pub grid: usize,
    pub rate: f64,
}

/// Picks `round(rate · patches)` (at least one) of `patches` patches to mask, ascending.
pub fn mask_patches(patches: usize, rate: f64, rng: &mut Rng) -> Vec<usize> {
    let n = ((rate * patches as f64).round() as usize).clamp(1, patches);
    let mut perm = rng.permutation(patches);
    perm.truncate(n);
    perm.sort_unstable();
    perm
}

/// A batch built on the host (in the prefetch thread), ready to move to the device.
#[derive(Debug, Clone)]
pub struct HostBatch {
    pub step: u64,
    /// The pairs of the batch (indices into [`Corpus::pairs`]).
    pub pairs: Vec<usize>,
    size: usize,
    pixels: Vec<f32>,
    /// The second views (empty without them).
    pixels_view: Vec<f32>,
    tokens: usize,
    ids: Vec<u32>,
    mask: Vec<u32>,
    enc_ids: Vec<u32>,
    enc_rows: Vec<u32>,
    enc_targets: Vec<u32>,
    dec_ids: Vec<u32>,
    dec_rows: Vec<u32>,
    dec_targets: Vec<u32>,
    /// Patch masking (empty without it): patches per side, 1 = kept / 0 = masked per image
    /// patch, and the masked patches flattened as `image · patches + k`.
    grid: usize,
    patch_keep: Vec<f32>,
    patch_rows: Vec<u32>,
}

/// Builds step `step`'s batch from the pairs `indices` (images decoded and augmented in
/// parallel).
pub fn make_batch(
    corpus: &Corpus,
    indices: &[usize],
    step: u64,
    seed: u64,
    augment: &Augment,
    tokenizer: &TextTokenizer,
    masking: Masking,
) -> Result<HostBatch> {
    let size = augment.processor.size;
    let views = |stream: &str| -> Result<Vec<f32>> {
        let images: Vec<std::result::Result<Vec<f32>, String>> = indices
            .par_iter()
            .enumerate()
            .map(|(i, &p)| {
                let r = &corpus.images[corpus.pairs[p].image as usize];
                let bytes = read_image(r).map_err(|(_, m)| m)?;
                let mut rng = Rng::new(&[seed, key(stream), step, i as u64]);
                augment.pixels(&bytes, &r.name(), &mut rng)
            })
            .collect();
        let mut pixels = Vec::with_capacity(indices.len() * 3 * size * size);
        for img in images {
            pixels.extend(img.map_err(|m| {
                TrainError::Corpus(format!(
                    "step {step}: an image checked at the start fails now: {m}"
                ))
            })?);
        }
        Ok(pixels)
    };
    let pixels = views("augment")?;
    let pixels_view = if masking.second_view {
        views("augment-view")?
    } else {
        Vec::new()
    };
    let rows: Vec<&[u32]> = indices
        .iter()
        .map(|&p| corpus.pairs[p].tokens.as_slice())
        .collect();
    let (ids, mask, tokens) = padded(&rows, tokenizer.pad);
    let mut b = HostBatch {
        step,
        pairs: indices.to_vec(),
        size,
        pixels,
        pixels_view,
        tokens,
        ids,
        mask,
        enc_ids: Vec::new(),
        enc_rows: Vec::new(),
        enc_targets: Vec::new(),
        dec_ids: Vec::new(),
        dec_rows: Vec::new(),
        dec_targets: Vec::new(),
        grid: 0,
        patch_keep: Vec::new(),
        patch_rows: Vec::new(),
    };
    if let Some(pm) = masking.patches {
        let n = pm.grid * pm.grid;
        b.grid = pm.grid;
        for i in 0..indices.len() {
            let mut keep = vec![1.0f32; n];
            let rng = &mut Rng::new(&[seed, key("patch-mask"), step, i as u64]);
            for k in mask_patches(n, pm.rate, rng) {
                keep[k] = 0.0;
                b.patch_rows.push((i * n + k) as u32);
            }
            b.patch_keep.extend(keep);
        }
    }
    for (i, row) in rows.into_iter().enumerate() {
        let enc = tokenizer.mask_tokens(
            row,
            masking.rate,
            &mut Rng::new(&[seed, key("mask"), step, i as u64]),
        );
        let dec = tokenizer.mask_tokens(
            row,
            masking.decoder_rate,
            &mut Rng::new(&[seed, key("decoder-mask"), step, i as u64]),
        );
        pad_row(&mut b.enc_ids, &enc.ids, tokens, tokenizer.pad);
        pad_row(&mut b.dec_ids, &dec.ids, tokens, tokenizer.pad);
        let base = (i * tokens) as u32;
        b.enc_rows
            .extend(enc.positions.iter().map(|&q| base + q as u32));
        b.enc_targets.extend(enc.targets);
        b.dec_rows
            .extend(dec.positions.iter().map(|&q| base + q as u32));
        b.dec_targets.extend(dec.targets);
    }
    Ok(b)
}

/// Token rows padded with `pad` to the longest, flattened, with their attention mask (1 on
/// tokens, 0 on padding) and the padded length.
pub fn padded(rows: &[&[u32]], pad: u32) -> (Vec<u32>, Vec<u32>, usize) {
    let tokens = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(rows.len() * tokens);
    let mut mask = Vec::with_capacity(rows.len() * tokens);
    for row in rows {
        pad_row(&mut ids, row, tokens, pad);
        mask.extend(std::iter::repeat_n(1u32, row.len()));
        mask.extend(std::iter::repeat_n(0u32, tokens - row.len()));
    }
    (ids, mask, tokens)
}

fn pad_row(out: &mut Vec<u32>, row: &[u32], tokens: usize, pad: u32) {
    out.extend_from_slice(row);
    out.extend(std::iter::repeat_n(pad, tokens - row.len()));
}

impl HostBatch {
    pub fn len(&self) -> usize {
        self.ids.len() / self.tokens.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_device(&self, device: &Device) -> Result<Batch> {
        let n = self.len();
        let bt = (n, self.tokens);
        let v = |x: &[u32], shape: (usize, usize)| Tensor::from_slice(x, shape, device);
        let r = |x: &[u32]| Tensor::from_slice(x, x.len(), device);
        let image_shape = (n, 3, self.size, self.size);
        Ok(Batch {
            pixels: Tensor::from_slice(&self.pixels, image_shape, device)?,
            pixels_view: (!self.pixels_view.is_empty())
                .then(|| Tensor::from_slice(&self.pixels_view, image_shape, device))
                .transpose()?,
            ids: v(&self.ids, bt)?,
            mask: v(&self.mask, bt)?,
            enc_ids: v(&self.enc_ids, bt)?,
            enc_rows: r(&self.enc_rows)?,
            enc_targets: r(&self.enc_targets)?,
            dec_ids: v(&self.dec_ids, bt)?,
            dec_rows: r(&self.dec_rows)?,
            dec_targets: r(&self.dec_targets)?,
            text_lexicon: None,
            patches: (self.grid > 0)
                .then(|| -> Result<PatchMask> {
                    // Image `i`'s patch `k` is row `i · n + k` of the pixels and row
                    // `i · (n + 1) + 1 + k` of the tower states (each image's [CLS] first).
                    let per_image = (self.grid * self.grid) as u32;
                    let state_rows: Vec<u32> = self
                        .patch_rows
                        .iter()
                        .map(|&r| r + r / per_image + 1)
                        .collect();
                    Ok(PatchMask {
                        grid: self.grid,
                        keep: Tensor::from_slice(
                            &self.patch_keep,
                            (n, self.grid * self.grid),
                            device,
                        )?,
                        rows: r(&self.patch_rows)?,
                        state_rows: r(&state_rows)?,
                    })
                })
                .transpose()?,
        })
    }
}

/// The corpus a run reads, from `--tsv`, `--manifest` or `--webdataset`.
pub(crate) fn input(opts: &TrainOptions) -> Result<Input> {
    Ok(if let Some(p) = &opts.data.tsv {
        Input::Tsv {
            path: p.clone(),
            images_root: opts.data.images_root.clone(),
        }
    } else if let Some(p) = &opts.data.manifest {
        Input::Manifest(p.clone())
    } else if !opts.data.webdataset.is_empty() {
        Input::WebDataset(opts.data.webdataset.clone())
    } else {
        return Err(TrainError::invalid(
            "give a corpus: --tsv, --manifest or --webdataset",
        ));
    })
}
