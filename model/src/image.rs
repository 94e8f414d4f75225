//! The image encoder: BEiT + a BERT-style MLM head over every output token (CLS + patches), pooled
//! into lexicon weights (LexLIP eq. 1-3); and image preprocessing shared with the dense encoder.

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::bert::Config as BertConfig;
use image::imageops::FilterType;
use lexlip_proto::{DenseVector, SparseVector, TermSpace};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::beit::{self, Beit};
use crate::config::{read_json, with_defaults};
use crate::dense::DenseEncoder;
use crate::error::{ModelError, Result};
use crate::heads::{LexiconHead, rows_tensor};
use crate::mlm_head::MlmHead;
use crate::pooling::{rows_to_sparse, to_sparse, top_k};
use crate::text::dir_name;
use crate::vocab::Vocabulary;
use crate::weight_sharing::SharedLayers;
use crate::weights::Weights;

/// Upper bound on logits elements per MLM-head pass (`images × tokens × vocab`), so that a batch of
/// 32 images at 384 × 384 does not materialise 2 GB of logits at once (on a GPU: on the CPU the
/// head pools block by block and never holds them, [`MlmHead::pooled`]).
const MAX_LOGITS_PER_PASS: usize = 64 << 20;

/// Resizing and normalisation of one model family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageProcessor {
    /// Output side in pixels (square).
    pub size: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    /// Resize both sides to `size` (SigLIP's processor) instead of the shorter side, then
    /// centre-crop (BEiT's and CLIP's).
    pub squash: bool,
}

impl ImageProcessor {
    /// BEiT / LexLIP: mean = std = 0.5 (inputs in [-1, 1]).
    pub fn beit(size: usize) -> Self {
        Self {
            size,
            mean: [0.5; 3],
            std: [0.5; 3],
            squash: false,
        }
    }

    /// SigLIP: mean = std = 0.5, both sides resized to `size` (no crop).
    pub fn siglip(size: usize) -> Self {
        Self {
            squash: true,
            ..Self::beit(size)
        }
    }

    /// OpenAI CLIP's normalisation.
    pub fn clip(size: usize) -> Self {
        Self {
            size,
            mean: [0.481_454_66, 0.457_827_5, 0.408_210_73],
            std: [0.268_629_54, 0.261_302_6, 0.275_777_1],
            squash: false,
        }
    }

    /// Overrides mean/std from a Hugging Face `preprocessor_config.json`, if the directory has one.
    pub fn with_preprocessor_config(self, dir: &Path) -> Result<Self> {
        let path = dir.join("preprocessor_config.json");
        if !path.exists() {
            return Ok(self);
        }
        let v = read_json(&path)?;
        let triple = |key: &str| -> Result<Option<[f32; 3]>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => serde_json::from_value::<[f32; 3]>(x.clone())
                    .map(Some)
                    .map_err(|e| ModelError::config(&path, format!("{key}: {e}"))),
            }
        };
        self.with_mean_std(
            triple("image_mean")?,
            triple("image_std")?,
            &path,
            "image_std",
        )
    }

    /// Overrides the mean and std that are given; a std that is not positive is refused,
    /// naming `std_key` of the configuration at `path`.
    pub(crate) fn with_mean_std(
        mut self,
        mean: Option<[f32; 3]>,
        std: Option<[f32; 3]>,
        path: &Path,
        std_key: &str,
    ) -> Result<Self> {
        if let Some(m) = mean {
            self.mean = m;
        }
        if let Some(s) = std {
            if s.iter().any(|x| *x <= 0.0 || !x.is_finite()) {
                return Err(ModelError::config(
                    path,
                    format!("{std_key} must be positive"),
                ));
            }
            self.std = s;
        }
        Ok(self)
    }

    /// Decodes (JPEG, PNG, WebP, GIF: first frame), converts to RGB, resizes the shorter side to
    /// `size` (bicubic), centre-crops to `size × size` and normalises. `input` names the image in
    /// errors. Pure CPU work with no shared state: call it from as many threads as you like.
    pub fn preprocess_named(&self, bytes: &[u8], input: &str) -> Result<PreprocessedImage> {
        self.preprocess_rgb(&*decode_rgb(bytes, input)?, input)
    }

    /// [`ImageProcessor::preprocess_named`] of pixels already decoded with [`decode_rgb`] (so that
    /// one decode also serves a thumbnail).
    pub fn preprocess_rgb(&self, rgb: &image::RgbImage, input: &str) -> Result<PreprocessedImage> {
        let (w, h) = rgb.dimensions();
        if w == 0 || h == 0 {
            return Err(ModelError::Image {
                input: input.to_string(),
                message: "the image is empty".into(),
            });
        }
        let size = self.size as u32;
        let resized;
        let rgb = if (w, h) == (size, size) {
            rgb
        } else {
            resized = self.resize(rgb);
            &resized
        };
        let n = self.size * self.size;
        let mut data = vec![0f32; 3 * n];
        for (i, px) in rgb.pixels().enumerate() {
            for c in 0..3 {
                data[c * n + i] = (px[c] as f32 / 255.0 - self.mean[c]) / self.std[c];
            }
        }
        Ok(PreprocessedImage {
            size: self.size,
            data,
        })
    }

    /// `rgb` at `size × size`: both sides resized when `squash`, else the shorter side resized
    /// and the middle cropped.
    fn resize(&self, rgb: &image::RgbImage) -> image::RgbImage {
        let (w, h) = rgb.dimensions();
        let size = self.size as u32;
        if self.squash {
            return image::imageops::resize(rgb, size, size, FilterType::CatmullRom);
        }
        // Shorter side → size, keeping the aspect ratio (as torchvision's Resize(int)).
        let (nw, nh) = if w <= h {
            (
                size,
                ((h as u64 * size as u64) / w as u64).max(size as u64) as u32,
            )
        } else {
            (
                ((w as u64 * size as u64) / h as u64).max(size as u64) as u32,
                size,
            )
        };
        let resized = image::imageops::resize(rgb, nw, nh, FilterType::CatmullRom);
        let (x, y) = ((nw - size) / 2, (nh - size) / 2);
        image::imageops::crop_imm(&resized, x, y, size, size).to_image()
    }

    /// [`ImageProcessor::preprocess_named`] with the input described by its length.
    pub fn preprocess(&self, bytes: &[u8]) -> Result<PreprocessedImage> {
        self.preprocess_named(bytes, &format!("<{} bytes>", bytes.len()))
    }
}

/// The default of [`set_max_image_pixels`]: 40 megapixels, more than any camera photo.
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 40_000_000;

static MAX_IMAGE_PIXELS: AtomicU64 = AtomicU64::new(DEFAULT_MAX_IMAGE_PIXELS);

/// Sets the largest image (width × height) [`decode_rgb`] decodes, for the whole process (the
/// `--max-image-pixels` option). A small file can declare a huge picture (a 500 KB PNG of
/// 13,000 × 13,000 pixels decodes to 500 MB), so the size is checked from the header, before
/// any pixel is decoded.
pub fn set_max_image_pixels(pixels: u64) {
    MAX_IMAGE_PIXELS.store(pixels.max(1), Ordering::Relaxed);
}

/// The current limit of [`set_max_image_pixels`].
pub fn max_image_pixels() -> u64 {
    MAX_IMAGE_PIXELS.load(Ordering::Relaxed)
}

/// The default of [`set_decode_budget`]: 100 megapixels decoded at once in the process (two
/// images of the largest size, [`DEFAULT_MAX_IMAGE_PIXELS`], and more small ones), about 1 GB
/// of decoder buffers at most.
pub const DEFAULT_DECODE_BUDGET_PIXELS: u64 = 100_000_000;
/// How long a decode waits for its share of the budget before it gives up with
/// [`ModelError::Busy`].
const DECODE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

static DECODE_BUDGET: AtomicU64 = AtomicU64::new(DEFAULT_DECODE_BUDGET_PIXELS);
/// Pixels being decoded now, across threads and requests.
static DECODING: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
static DECODED: std::sync::Condvar = std::sync::Condvar::new();

/// Sets how many pixels the whole process decodes at once: images past it wait (up to 20 s,
/// then fail with [`ModelError::Busy`]), so concurrent requests cannot add up to more decoder
/// memory than this allows, whatever the per-image limit.
pub fn set_decode_budget(pixels: u64) {
    DECODE_BUDGET.store(pixels.max(1), Ordering::Relaxed);
}

/// A share of the decode budget, given back when dropped.
#[derive(Debug)]
struct DecodePermit(u64);

impl DecodePermit {
    fn acquire(pixels: u64, input: &str) -> Result<Self> {
        let budget = DECODE_BUDGET.load(Ordering::Relaxed);
        // An image larger than the whole budget decodes alone.
        let want = pixels.min(budget);
        let deadline = std::time::Instant::now() + DECODE_WAIT;
        let mut used = DECODING.lock().unwrap_or_else(|p| p.into_inner());
        while *used + want > budget {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(ModelError::Busy(format!(
                    "image {input}: the server is decoding {} megapixels of other images (its \
                     budget is {}); try again shortly",
                    *used / 1_000_000,
                    budget / 1_000_000
                )));
            }
            used = DECODED
                .wait_timeout(used, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *used += want;
        Ok(Self(want))
    }
}

impl Drop for DecodePermit {
    fn drop(&mut self) {
        let mut used = DECODING.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.0;
        DECODED.notify_all();
    }
}

/// Decodes an image (JPEG, PNG, WebP, GIF: first frame) to RGB pixels, transparency composited
/// over white ([`rgb_on_white`]). `input` names the image in errors; an empty image is an error,
/// so every later step can rely on at least one pixel, and so is one larger than
/// [`max_image_pixels`] (checked before decoding; the decoder's allocations are bounded too).
///
/// The pixels hold their share of the decode budget ([`set_decode_budget`]) until they are
/// dropped, so the budget bounds the full-size images alive at once (being decoded, thumbnailed
/// or resized), not only the decoding itself.
pub fn decode_rgb(bytes: &[u8], input: &str) -> Result<Decoded> {
    let err = |message: String| ModelError::Image {
        input: input.to_string(),
        message,
    };
    let reader = || {
        image::ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| err(e.to_string()))
    };
    let mut header = reader()?;
    if header.format().is_none() {
        return Err(err(
            "unrecognised image format (expected JPEG, PNG, WebP or GIF)".into(),
        ));
    }
    let max = max_image_pixels();
    header.no_limits();
    let (w, h) = header.into_dimensions().map_err(|e| err(e.to_string()))?;
    let pixels = u64::from(w) * u64::from(h);
    if pixels > max {
        return Err(err(format!(
            "the image is {w} × {h} = {pixels} pixels, more than the {max} this server decodes \
             (--max-image-pixels); send a smaller image"
        )));
    }
    let permit = DecodePermit::acquire(pixels, input)?;
    let mut limits = image::Limits::default();
    // 16-bit RGBA is the widest buffer a decoder fills, plus its working memory.
    limits.max_alloc = Some(max.saturating_mul(8).saturating_add(64 << 20));
    let mut decoder = reader()?;
    decoder.limits(limits);
    let rgb = rgb_on_white(decoder.decode().map_err(|e| err(e.to_string()))?);
    let (w, h) = rgb.dimensions();
    if w == 0 || h == 0 {
        return Err(err("the image is empty".into()));
    }
    Ok(Decoded {
        rgb,
        _permit: permit,
    })
}

/// Full-size decoded pixels and their share of the decode budget (see [`decode_rgb`]).
#[derive(Debug)]
pub struct Decoded {
    rgb: image::RgbImage,
    _permit: DecodePermit,
}

impl std::ops::Deref for Decoded {
    type Target = image::RgbImage;

    fn deref(&self) -> &image::RgbImage {
        &self.rgb
    }
}

/// The RGB pixels of a decoded image, transparent pixels composited over white as a viewer
/// shows them: emoji, clip art and logos are mostly transparent PNGs, and the colour hidden
/// under alpha 0 is arbitrary (often black), so dropping alpha would show the model another
/// picture than the user sees. Training decodes the same way.
pub fn rgb_on_white(image: image::DynamicImage) -> image::RgbImage {
    if !image.color().has_alpha() {
        return image.to_rgb8();
    }
    let rgba = image.to_rgba8();
    image::RgbImage::from_fn(rgba.width(), rgba.height(), |x, y| {
        let [r, g, b, a] = rgba.get_pixel(x, y).0;
        let over =
            |c: u8| ((u32::from(c) * u32::from(a) + 255 * (255 - u32::from(a)) + 127) / 255) as u8;
        image::Rgb([over(r), over(g), over(b)])
    })
}

/// Normalised pixels of one image, channel-first, ready for an encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct PreprocessedImage {
    size: usize,
    data: Vec<f32>,
}

impl PreprocessedImage {
    /// From normalised `(3, size, size)` values (e.g. computed elsewhere).
    pub fn from_chw(size: usize, data: Vec<f32>) -> Result<Self> {
        if data.len() != 3 * size * size {
            return Err(ModelError::Invalid(format!(
                "expected 3·{size}·{size} = {} values, got {}",
                3 * size * size,
                data.len()
            )));
        }
        Ok(Self { size, data })
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// `(3, size, size)` values, channel-first.
    pub fn data(&self) -> &[f32] {
        &self.data
    }
}

/// Stacks images of one size into a `(batch, 3, size, size)` tensor.
pub(crate) fn stack(images: &[PreprocessedImage], size: usize, device: &Device) -> Result<Tensor> {
    let mut flat = Vec::with_capacity(images.len() * 3 * size * size);
    for (i, img) in images.iter().enumerate() {
        if img.size != size {
            return Err(ModelError::Invalid(format!(
                "image {i} was preprocessed to {0}×{0} but the encoder expects {size}×{size}",
                img.size
            )));
        }
        flat.extend_from_slice(&img.data);
    }
    Ok(Tensor::from_vec(
        flat,
        (images.len(), 3, size, size),
        device,
    )?)
}

/// Settings of the MLM head on top of BEiT, stored as `lexlip_mlm_head` in the image
/// `config.json` (LexLIP's head is a copy of BERT's `cls`, so these are BERT's values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadConfig {
    #[serde(default = "gelu")]
    pub hidden_act: String,
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
}

fn gelu() -> String {
    "gelu".into()
}
fn eps() -> f64 {
    1e-12
}

impl Default for HeadConfig {
    fn default() -> Self {
        Self {
            hidden_act: gelu(),
            layer_norm_eps: eps(),
        }
    }
}

/// BEiT + MLM head → sparse lexicon vectors.
pub struct ImageEncoder {
    tower: Tower,
    vocab: Vocabulary,
    processor: ImageProcessor,
    device: Device,
    /// Top-K pooling: every lexicon keeps its K largest weights (a model trained with
    /// `--image-top-k` records its K in `lexlip.json`).
    top_k: Option<usize>,
}

/// What turns pixels into lexicon weights.
// One per encoder: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Tower {
    /// BEiT's MLM logits of every patch, max-pooled (LexLIP).
    Mlm {
        beit: Beit,
        head: MlmHead,
        /// COOKIE's weight-sharing layers between the tower and its head, when trained with
        /// them.
        shared: Option<SharedLayers>,
    },
    /// A frozen dense model's image embedding through a lexicon head ([`crate::heads`]).
    Heads {
        backbone: Arc<dyn DenseEncoder>,
        head: LexiconHead,
    },
}

impl std::fmt::Debug for ImageEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageEncoder")
            .field("term_space", self.vocab.term_space())
            .field("image_size", &self.image_size())
            .field("top_k", &self.top_k)
            .field("dtype", &self.dtype())
            .field("device", &self.device)
            .finish()
    }
}

/// The dtype encoders run in on `device`: f32 on the CPU; f16 on a GPU, where tensor cores make
/// half precision several times faster (pooling and `log` still run in f32).
pub fn default_dtype(device: &Device) -> DType {
    if device.is_cuda() {
        DType::F16
    } else {
        DType::F32
    }
}

impl ImageEncoder {
    /// Loads an image directory: `config.json` (HF `BeitConfig` + optional `lexlip_mlm_head`),
    /// `*.safetensors` (`beit.*`, `layernorm.*`, `cls.predictions.*`), `tokenizer.json` (the text
    /// vocabulary the head scores) and optionally `preprocessor_config.json`.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        Self::load_with_dtype(dir, device, default_dtype(device))
    }

    pub fn load_with_dtype(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let raw = read_json(&cfg_path)?;
        let config: beit::Config = with_defaults(&cfg_path, &raw, serde_json::json!({}))?;
        let head: HeadConfig = match raw.get("lexlip_mlm_head") {
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| ModelError::config(&cfg_path, format!("lexlip_mlm_head: {e}")))?,
            None => HeadConfig::default(),
        };
        let weights = Weights::from_safetensors_dir(dir)?;
        let shared =
            SharedLayers::load(&cfg_path, &raw, &weights, config.hidden_size, dtype, device)?;
        let vocab = Vocabulary::from_tokenizer_json(dir_name(dir), &dir.join("tokenizer.json"))?;
        let processor = ImageProcessor::beit(config.image_size).with_preprocessor_config(dir)?;
        let mut enc = Self::from_parts(&config, &head, weights, vocab, processor, device, dtype)?;
        if let Tower::Mlm { shared: s, .. } = &mut enc.tower {
            *s = shared;
        }
        Ok(enc)
    }

    /// Builds the encoder from weights rooted at `BeitForMaskedImageModeling` plus the head under
    /// `cls.`.
    pub fn from_parts(
        config: &beit::Config,
        head: &HeadConfig,
        mut weights: Weights,
        vocab: Vocabulary,
        processor: ImageProcessor,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        weights.alias("cls.predictions.bias", "cls.predictions.decoder.bias");
        let vb = weights.var_builder(dtype, device);
        let beit = Beit::load(vb.clone(), config).map_err(|e| weights.load_error(e))?;
        let head_config: BertConfig = with_defaults(
            weights.source(),
            &serde_json::json!({
                "hidden_size": config.hidden_size,
                "vocab_size": vocab.len(),
                "hidden_act": head.hidden_act,
                "layer_norm_eps": head.layer_norm_eps,
            }),
            crate::text::bert_defaults(),
        )?;
        let head = MlmHead::from_bert_config(&vb.pp("cls"), &head_config)
            .map_err(|e| weights.load_error(e))?;
        Ok(Self {
            tower: Tower::Mlm {
                beit,
                head,
                shared: None,
            },
            vocab,
            processor,
            device: device.clone(),
            top_k: None,
        })
    }

    /// Runs at `size × size` pixels (e.g. 384 for LexLIP's fine-tuned models; the relative position
    /// bias is interpolated as LexLIP does).
    pub fn with_image_size(mut self, size: usize) -> Result<Self> {
        match &mut self.tower {
            Tower::Mlm { beit, .. } => beit.set_input_size(size)?,
            Tower::Heads { .. } if size == self.processor.size => {}
            Tower::Heads { .. } => {
                return Err(ModelError::Invalid(format!(
                    "lexicon heads read their dense model's {0}×{0} images; another size ({size}) \
                     needs another dense model",
                    self.processor.size
                )));
            }
        }
        self.processor.size = size;
        Ok(self)
    }

    pub fn image_size(&self) -> usize {
        match &self.tower {
            Tower::Mlm { beit, .. } => beit.input_size(),
            Tower::Heads { .. } => self.processor.size,
        }
    }

    /// An image encoder whose lexicons are `head` over `backbone`'s image embeddings, in the
    /// term space of `vocab` (the caller checked that the three fit), cut to the head's K
    /// unless [`Self::with_top_k`] says otherwise.
    pub fn from_heads(
        backbone: Arc<dyn DenseEncoder>,
        head: LexiconHead,
        vocab: Vocabulary,
    ) -> Self {
        Self {
            processor: backbone.image_processor().clone(),
            device: backbone.device().clone(),
            top_k: head.top_k(),
            tower: Tower::Heads { backbone, head },
            vocab,
        }
    }

    /// Keeps the `k` largest weights of every lexicon (the K the model was trained with).
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.top_k = (k > 0).then_some(k);
        self
    }

    /// The K of top-K pooling, if the model has one.
    pub fn top_k(&self) -> Option<usize> {
        self.top_k
    }

    /// Side of the square patches the tower cuts images into (0 for lexicon heads over a
    /// dense model, which read no patches).
    pub fn patch_size(&self) -> usize {
        match &self.tower {
            Tower::Mlm { beit, .. } => beit.config().patch_size,
            Tower::Heads { .. } => 0,
        }
    }

    /// Width of the hidden states the head reads (for lexicon heads, the dense embedding's).
    pub fn hidden_size(&self) -> usize {
        match &self.tower {
            Tower::Mlm { beit, .. } => beit.config().hidden_size,
            Tower::Heads { head, .. } => head.dim(),
        }
    }

    pub fn term_space(&self) -> &TermSpace {
        self.vocab.term_space()
    }

    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocab
    }

    pub fn processor(&self) -> &ImageProcessor {
        &self.processor
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        match &self.tower {
            Tower::Mlm { beit, .. } => beit.dtype(),
            Tower::Heads { .. } => DType::F32,
        }
    }

    /// See [`ImageProcessor::preprocess`]; cheap to call from worker threads.
    pub fn preprocess(&self, bytes: &[u8]) -> Result<PreprocessedImage> {
        self.processor.preprocess(bytes)
    }

    pub fn preprocess_named(&self, bytes: &[u8], input: &str) -> Result<PreprocessedImage> {
        self.processor.preprocess_named(bytes, input)
    }

    /// Hidden states `(batch, 1 + patches, hidden)` the head reads: after the final layer norm
    /// and the shared layers, if any.
    pub fn hidden_states(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        let Tower::Mlm { beit, shared, .. } = &self.tower else {
            return Err(ModelError::Invalid(
                "a lexicon head over a dense model has no per-patch states".into(),
            ));
        };
        let pixels = stack(images, beit.input_size(), &self.device)?;
        let hidden = beit.forward(&pixels)?;
        match shared {
            Some(shared) => Ok(shared.forward(&hidden, None, &crate::nn::Inference)?),
            None => Ok(hidden),
        }
    }

    /// MLM logits `(batch, 1 + patches, vocab)` (f32), for tests and inspection.
    pub fn logits(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        let hidden = self.hidden_states(images)?;
        match &self.tower {
            Tower::Mlm { head, .. } => Ok(head
                .forward(&hidden, &crate::nn::Inference)?
                .to_dtype(DType::F32)?),
            Tower::Heads { .. } => Err(ModelError::Invalid(
                "a lexicon head over a dense model has no per-patch logits".into(),
            )),
        }
    }

    /// Pooled lexicon weights `(batch, vocab)` in f32.
    pub fn pooled(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        if images.is_empty() {
            return Ok(Tensor::zeros(
                (0, self.vocab.len()),
                DType::F32,
                &self.device,
            )?);
        }
        let head = match &self.tower {
            Tower::Heads { backbone, head } => {
                // `encode_images` is the embedding the training cache holds.
                let embeddings = backbone.encode_images(images)?;
                let p = head.weights(&rows_tensor(&embeddings, &self.device)?)?;
                return Ok(match self.top_k {
                    Some(k) => top_k(&p, k)?,
                    None => p,
                });
            }
            Tower::Mlm { head, .. } => head,
        };
        let hidden = self.hidden_states(images)?;
        let tokens = hidden.dim(1)?;
        let per_pass = (MAX_LOGITS_PER_PASS / (tokens * self.vocab.len()).max(1)).max(1);
        let mut parts = Vec::new();
        let mut start = 0;
        while start < images.len() {
            let n = per_pass.min(images.len() - start);
            let pooled = head.pooled(&hidden.narrow(0, start, n)?, None)?;
            parts.push(match self.top_k {
                Some(k) => top_k(&pooled, k)?,
                None => pooled,
            });
            start += n;
        }
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// Encodes preprocessed images into sparse lexicon vectors, in input order.
    pub fn encode(&self, images: &[PreprocessedImage]) -> Result<Vec<SparseVector>> {
        Ok(self.encode_with_dense(images)?.0)
    }

    /// [`Self::encode`], and the dense embeddings of the same images where this encoder's
    /// lexicons are heads over a dense model (computed in the same pass; `None` otherwise).
    pub fn encode_with_dense(
        &self,
        images: &[PreprocessedImage],
    ) -> Result<(Vec<SparseVector>, Option<Vec<DenseVector>>)> {
        if images.is_empty() {
            return Ok((Vec::new(), None));
        }
        if let Tower::Heads { backbone, .. } = &self.tower {
            let embeddings = backbone.encode_images(images)?;
            return Ok((self.encode_embeddings(&embeddings)?, Some(embeddings)));
        }
        // Lexicons of pixels through an MLM head have no dense embedding beside them.
        Ok((to_sparse(&self.pooled(images)?, &self.vocab)?, None))
    }

    /// The lexicons of backbone embeddings, as [`Self::encode`] computes them from pixels: only
    /// lexicon heads have them, their lexicons being a function of the dense embedding. A
    /// collection indexed with `--dense` keeps those embeddings, so other heads over the same
    /// backbone are measured on it without a picture being decoded again.
    pub fn encode_embeddings(&self, embeddings: &[DenseVector]) -> Result<Vec<SparseVector>> {
        let Tower::Heads { head, .. } = &self.tower else {
            return Err(crate::heads::not_heads("image encoder reads pixels"));
        };
        if embeddings.is_empty() {
            return Ok(Vec::new());
        }
        let rows = head.sparse_rows(&rows_tensor(embeddings, &self.device)?, self.top_k)?;
        rows_to_sparse(rows, &self.vocab)
    }

    /// A BEiT-B/16 (224) + MLM head with random weights from a fixed seed, for measuring speed
    /// without a checkpoint. Its vector values mean nothing.
    pub fn random_beit_base(
        vocab: Vocabulary,
        device: &Device,
        dtype: DType,
        seed: u64,
    ) -> Result<Self> {
        let config = beit::Config::base_patch16_224();
        let weights = random_weights(&config, vocab.len(), seed)?;
        Self::from_parts(
            &config,
            &HeadConfig::default(),
            weights,
            vocab,
            ImageProcessor::beit(config.image_size),
            device,
            dtype,
        )
    }
}

/// Writes a BEiT-B/16 (224) + MLM head directory with random weights (fixed seed) and the given
/// tokenizer: a stand-in of the real image encoder's size for throughput measurements of the
/// whole indexing pipeline (`lexlip bench random-beit-base`). Its vectors mean nothing.
pub fn write_random_beit_base(out: &Path, tokenizer_json: &Path, seed: u64) -> Result<()> {
    let vocab = Vocabulary::from_tokenizer_json("random-beit-base", tokenizer_json)?;
    let config = beit::Config::base_patch16_224();
    let weights = random_weights(&config, vocab.len(), seed)?;
    std::fs::create_dir_all(out).map_err(|e| ModelError::io(out, e))?;
    let safetensors = out.join("model.safetensors");
    candle_core::safetensors::save(weights.tensors(), &safetensors)
        .map_err(|e| ModelError::from_load(&safetensors, e))?;
    let json = serde_json::json!({
        "architectures": ["BeitForMaskedImageModeling"],
        "model_type": "beit",
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",
        "layer_norm_eps": config.layer_norm_eps,
        "image_size": config.image_size,
        "patch_size": config.patch_size,
        "num_channels": config.num_channels,
        "use_absolute_position_embeddings": config.use_absolute_position_embeddings,
        "use_relative_position_bias": config.use_relative_position_bias,
        "use_shared_relative_position_bias": config.use_shared_relative_position_bias,
        "layer_scale_init_value": config.layer_scale_init_value,
        "use_mean_pooling": config.use_mean_pooling,
        "vocab_size": vocab.len(),
        "lexlip_mlm_head": {"hidden_act": "gelu", "layer_norm_eps": 1e-12},
    });
    let write = |name: &str, text: String| {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| ModelError::io(&p, e))
    };
    write("config.json", json.to_string())?;
    write(
        "preprocessor_config.json",
        serde_json::json!({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "size": {"height": config.image_size, "width": config.image_size}})
        .to_string(),
    )?;
    std::fs::copy(tokenizer_json, out.join("tokenizer.json"))
        .map_err(|e| ModelError::io(tokenizer_json, e))?;
    Ok(())
}

/// Random weights with the shapes of `BeitForMaskedImageModeling` + MLM head (xorshift, N(0, 0.02)-ish
/// uniform values; layer norms at 1/0; layer scale 0.1).
fn random_weights(cfg: &beit::Config, vocab: usize, seed: u64) -> Result<Weights> {
    use std::collections::HashMap;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.07
    };
    let h = cfg.hidden_size;
    let i = cfg.intermediate_size;
    let p = cfg.patch_size;
    let g = cfg.native_grid();
    let mut shapes: Vec<(String, Vec<usize>, f32)> = vec![
        ("beit.embeddings.cls_token".into(), vec![1, 1, h], f32::NAN),
        (
            "beit.embeddings.patch_embeddings.projection.weight".into(),
            vec![h, 3, p, p],
            f32::NAN,
        ),
        (
            "beit.embeddings.patch_embeddings.projection.bias".into(),
            vec![h],
            0.0,
        ),
        ("layernorm.weight".into(), vec![h], 1.0),
        ("layernorm.bias".into(), vec![h], 0.0),
        (
            "cls.predictions.transform.dense.weight".into(),
            vec![h, h],
            f32::NAN,
        ),
        ("cls.predictions.transform.dense.bias".into(), vec![h], 0.0),
        (
            "cls.predictions.transform.LayerNorm.weight".into(),
            vec![h],
            1.0,
        ),
        (
            "cls.predictions.transform.LayerNorm.bias".into(),
            vec![h],
            0.0,
        ),
        (
            "cls.predictions.decoder.weight".into(),
            vec![vocab, h],
            f32::NAN,
        ),
        ("cls.predictions.bias".into(), vec![vocab], 0.0),
    ];
    for l in 0..cfg.num_hidden_layers {
        let pre = format!("beit.encoder.layer.{l}.");
        for (name, shape, fill) in [
            ("attention.attention.query.weight", vec![h, h], f32::NAN),
            ("attention.attention.query.bias", vec![h], 0.0),
            ("attention.attention.key.weight", vec![h, h], f32::NAN),
            ("attention.attention.value.weight", vec![h, h], f32::NAN),
            ("attention.attention.value.bias", vec![h], 0.0),
            (
                "attention.attention.relative_position_bias.relative_position_bias_table",
                vec![beit::relative_table_len(g), cfg.num_attention_heads],
                f32::NAN,
            ),
            ("attention.output.dense.weight", vec![h, h], f32::NAN),
            ("attention.output.dense.bias", vec![h], 0.0),
            ("intermediate.dense.weight", vec![i, h], f32::NAN),
            ("intermediate.dense.bias", vec![i], 0.0),
            ("output.dense.weight", vec![h, i], f32::NAN),
            ("output.dense.bias", vec![h], 0.0),
            ("layernorm_before.weight", vec![h], 1.0),
            ("layernorm_before.bias", vec![h], 0.0),
            ("layernorm_after.weight", vec![h], 1.0),
            ("layernorm_after.bias", vec![h], 0.0),
            ("lambda_1", vec![h], 0.1),
            ("lambda_2", vec![h], 0.1),
        ] {
            shapes.push((format!("{pre}{name}"), shape, fill));
        }
    }
    let mut tensors = HashMap::new();
    for (name, shape, fill) in shapes {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = if fill.is_nan() {
            (0..n).map(|_| next()).collect()
        } else {
            vec![fill; n]
        };
        tensors.insert(name, Tensor::from_vec(data, shape, &Device::Cpu)?);
    }
    Ok(Weights::from_tensors(tensors, "<random BEiT-B/16>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two images that together exceed the budget are decoded one after the other: the second
    /// waits until the first one's pixels are dropped (not merely decoded).
    #[test]
    fn the_decode_budget_makes_large_images_wait_their_turn() {
        use std::sync::atomic::AtomicBool;
        let image = png(image::DynamicImage::new_rgb8(1000, 600));
        set_decode_budget(1_000_000);
        let first = decode_rgb(&image, "first").unwrap();
        let second_in = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let second = decode_rgb(&image, "second").unwrap();
                second_in.store(true, Ordering::SeqCst);
                drop(second);
            });
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert!(
                !second_in.load(Ordering::SeqCst),
                "the second decode started while the first image held 600,000 of 1,000,000 pixels"
            );
            assert_eq!(first.dimensions(), (1000, 600));
            drop(first);
            waiter.join().unwrap();
        });
        assert!(second_in.load(Ordering::SeqCst));
        // An image larger than the whole budget still decodes, alone.
        drop(DecodePermit::acquire(5_000_000, "huge").unwrap());
        set_decode_budget(DEFAULT_DECODE_BUDGET_PIXELS);
    }

    fn png(img: image::DynamicImage) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    /// A PNG that declares `w × h` RGB pixels and carries almost no data: what a
    /// decompression bomb's header looks like.
    fn png_header_only(w: u32, h: u32) -> Vec<u8> {
        fn crc32(bytes: &[u8]) -> u32 {
            let mut crc = 0xffff_ffffu32;
            for &b in bytes {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
                }
            }
            !crc
        }
        let chunk = |kind: &[u8], data: &[u8]| {
            let mut c = (data.len() as u32).to_be_bytes().to_vec();
            let body = [kind, data].concat();
            c.extend_from_slice(&body);
            c.extend_from_slice(&crc32(&body).to_be_bytes());
            c
        };
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        let empty_zlib = [0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0, 0, 0, 1];
        [
            b"\x89PNG\r\n\x1a\n".to_vec(),
            chunk(b"IHDR", &ihdr),
            chunk(b"IDAT", &empty_zlib),
            chunk(b"IEND", &[]),
        ]
        .concat()
    }

    /// A 13,000 × 13,000 PNG of a few dozen bytes is refused from its header, naming the limit,
    /// instead of allocating half a gigabyte; a real image under the limit decodes.
    #[test]
    fn images_over_the_pixel_limit_are_refused_before_decoding() {
        let bomb = png_header_only(13_000, 13_000);
        assert!(bomb.len() < 100);
        let e = decode_rgb(&bomb, "bomb.png").unwrap_err().to_string();
        assert!(e.contains("13000 × 13000 = 169000000 pixels"), "{e}");
        assert!(e.contains("--max-image-pixels"), "{e}");
        assert!(e.contains("bomb.png"), "{e}");
        // Under the limit, the same (broken) file gets to the decoder, which reports its own error.
        let small = png_header_only(64, 64);
        let e = decode_rgb(&small, "small.png").unwrap_err().to_string();
        assert!(!e.contains("--max-image-pixels"), "{e}");
        let real = png(image::DynamicImage::new_rgb8(64, 48));
        assert_eq!(
            decode_rgb(&real, "real.png").unwrap().dimensions(),
            (64, 48)
        );
    }

    /// A transparent PNG whose hidden colour is black is seen as the same picture on white;
    /// half-transparent pixels are blended.
    #[test]
    fn transparency_is_composited_over_white() {
        let rgba = image::RgbaImage::from_fn(8, 8, |x, _| match x {
            0..3 => image::Rgba([0, 0, 0, 0]),
            3..6 => image::Rgba([200, 20, 20, 255]),
            _ => image::Rgba([0, 0, 100, 128]),
        });
        let on_white = image::RgbImage::from_fn(8, 8, |x, _| match x {
            0..3 => image::Rgb([255, 255, 255]),
            3..6 => image::Rgb([200, 20, 20]),
            _ => image::Rgb([127, 127, 177]),
        });
        assert_eq!(
            rgb_on_white(image::DynamicImage::ImageRgba8(rgba.clone())),
            on_white
        );
        let p = ImageProcessor::beit(8);
        let a = p
            .preprocess(&png(image::DynamicImage::ImageRgba8(rgba)))
            .unwrap();
        let b = p
            .preprocess(&png(image::DynamicImage::ImageRgb8(on_white)))
            .unwrap();
        assert_eq!(a.data, b.data);
    }
}
