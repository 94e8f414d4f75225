//! Loading whatever a user points at: an official LexLIP Lightning checkpoint, a LexLIP model
//! directory (what [`convert_checkpoint`] writes), a published lexicon model as its repository
//! holds it (VDR's cross-modal directory, [`crate::vdr`]; a D2S pair of heads over BLIP that
//! `lexlip model pair` writes, [`crate::d2s`]), or a single Hugging Face encoder directory.
//!
//! A LexLIP directory:
//! ```text
//! lexlip.json          {"format": "lexlip", "image_size": 224, "max_length": 40,
//!                       "image_top_k": 64, "weak_match": {...}, "query_norm": {...},
//!                       "idf": 1, "scale": 100, "card": "…",
//!                       "text_terms": {"expansion": 8, "ignore": ["emoji"]}}
//!                      (all optional; `text_terms`: [`crate::text::TextTerms`])
//! text/                BertForMaskedLM: config.json, model.safetensors, tokenizer.json
//! image/               BEiT + MLM head: config.json, model.safetensors, tokenizer.json,
//!                      preprocessor_config.json
//! dense/               optional dense encoder for the fallback: a CLIP, SigLIP, MobileCLIP or
//!                      BLIP directory or a dual encoder directory (`lexlip train
//!                      --objective dense`, [`crate::dual`])
//! heads/               instead of text/ and image/: lexicon heads over dense/'s embeddings
//!                      (`lexlip train --objective heads`, [`crate::heads`])
//! ```
//!
//! Trained with `--shared-layers`, both `text/` and `image/` also hold COOKIE's shared layers
//! between the tower and its head ([`crate::weight_sharing`]).
//!
//! A dual encoder directory given on its own is a dense-only model: its texts and images are
//! encoded by [`Encoders::dense`] only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device};
use candle_transformers::models::bert::Config as BertConfig;
use lexlip_proto::TermSpace;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::clip::ClipEncoder;
use crate::config::{Architecture, architecture, read_json, with_defaults};
use crate::dense::DenseEncoder;
use crate::dual::DualEncoder;
use crate::error::{ModelError, Result};
use crate::fused::FusedEncoder;
use crate::heads::Heads;
use crate::image::{HeadConfig, ImageEncoder, ImageProcessor, default_dtype};
use crate::mobileclip::MobileClipEncoder;
use crate::siglip::SiglipEncoder;
use crate::text::{TextEncoder, bert_defaults};
use crate::tokens::dir_name;
use crate::vocab::Vocabulary;

use crate::checkpoint::CheckpointParts;
pub use crate::checkpoint::{IMAGE_HEAD_PREFIX, IMAGE_PREFIX, TEXT_PREFIX, convert_checkpoint};

/// What a model path holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A PyTorch Lightning checkpoint of LexLIP (`.ckpt`, `.pt`, `.pth`).
    Checkpoint(PathBuf),
    /// A LexLIP directory (`lexlip.json` and/or `text/`, `image/` subdirectories).
    LexLipDir(PathBuf),
    /// A single Hugging Face encoder directory.
    Single(PathBuf, Architecture),
}

/// Whether `dir` has the configuration of a single encoder directory: Hugging Face's
/// `config.json` or open_clip's `open_clip_config.json`.
pub fn has_model_config(dir: &Path) -> bool {
    dir.join("config.json").is_file() || dir.join(crate::mobileclip::CONFIG_FILE).is_file()
}

/// Tells what `path` is, without loading weights.
pub fn detect(path: &Path) -> Result<ModelSource> {
    let meta = std::fs::metadata(path).map_err(|e| ModelError::io(path, e))?;
    if meta.is_file() {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        return match ext.as_str() {
            "ckpt" | "pt" | "pth" => Ok(ModelSource::Checkpoint(path.to_path_buf())),
            _ => Err(ModelError::UnknownModel {
                path: path.to_path_buf(),
                message: "expected a LexLIP checkpoint (.ckpt) or a model directory".into(),
            }),
        };
    }
    if path.join("lexlip.json").is_file()
        || path.join("text").is_dir()
        || path.join("image").is_dir()
    {
        return Ok(ModelSource::LexLipDir(path.to_path_buf()));
    }
    let cfg = path.join("config.json");
    if cfg.is_file() {
        let arch = architecture(&cfg, &read_json(&cfg)?)?;
        return Ok(ModelSource::Single(path.to_path_buf(), arch));
    }
    let open_clip = path.join(crate::mobileclip::CONFIG_FILE);
    if open_clip.is_file() {
        crate::mobileclip::load_config(&open_clip)?;
        return Ok(ModelSource::Single(
            path.to_path_buf(),
            Architecture::MobileClip,
        ));
    }
    Err(ModelError::UnknownModel {
        path: path.to_path_buf(),
        message: "no config.json, open_clip_config.json, lexlip.json, text/ or image/ here".into(),
    })
}

/// Settings of a LexLIP directory (`lexlip.json`) or given when loading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadOptions {
    /// Maximum tokens per text ([`crate::DEFAULT_MAX_LENGTH`] when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// Input side for images (the checkpoint's native size when unset; 384 for LexLIP's
    /// fine-tuned models, which interpolate the relative position bias).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<usize>,
    /// Top-K pooling of image lexicons: the K a model was trained with (`lexlip train
    /// --image-top-k`); none keeps every non-zero term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_top_k: Option<usize>,
    /// The model's weak-match calibration: below these match strengths, a text (an image)
    /// query's hits are weak matches (measured by `scripts/match_strength.py`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weak_match: Option<WeakMatch>,
    /// The L2 norm of a typical real query's weights, by query modality (the median over
    /// real captions, measured by `scripts/match_strength.py`): a query of less weight, one the
    /// model hardly understood, has its hits' match strengths scaled down by its squared share
    /// of it (`lexlip_search::SearchPlan::query_norm`). Calibrate `weak_match` with it set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_norm: Option<QueryNorm>,
    /// The IDF exponent its queries are searched with when neither the request nor the command
    /// gives one (`lexlip serve`, `search` and `eval --idf`): a model whose lexicons put
    /// kind-of-picture terms on many documents finds more when its queries weigh them by
    /// rarity, measured per model with `lexlip eval --idf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idf: Option<f32>,
    /// One line on what the model was trained on and what it does not know, for the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<String>,
    /// The quantization scale a collection of this model's vectors is made with
    /// (`impact = floor(scale · w)`) unless the collection says otherwise: a model whose weights
    /// are not on LexLIP's scale (VDR's are unit length) carries its own. Unset: the
    /// architecture's (VDR: [`crate::vdr::QUANTIZATION_SCALE`]), else 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f32>,
    /// Which terms a text's lexicon keeps (unset: the model's own rule, see
    /// [`crate::text::TextTerms`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_terms: Option<crate::text::TextTerms>,
    /// Compute dtype of the image encoder (f32 on CPU, f16 on GPU when unset).
    #[serde(skip)]
    pub dtype: Option<DType>,
    /// `tokenizer.json` for a checkpoint (default: next to the checkpoint).
    #[serde(skip)]
    pub tokenizer: Option<PathBuf>,
}

impl LoadOptions {
    /// Explicit options win over a directory's `lexlip.json`.
    fn or(&self, file: &LoadOptions) -> LoadOptions {
        LoadOptions {
            max_length: self.max_length.or(file.max_length),
            image_size: self.image_size.or(file.image_size),
            image_top_k: self.image_top_k.or(file.image_top_k),
            weak_match: self.weak_match.or(file.weak_match),
            query_norm: self.query_norm.or(file.query_norm),
            idf: self.idf.or(file.idf),
            card: self.card.clone().or_else(|| file.card.clone()),
            scale: self.scale.or(file.scale),
            text_terms: text_terms_or(&self.text_terms, &file.text_terms),
            dtype: self.dtype,
            tokenizer: self.tokenizer.clone(),
        }
    }
}

/// Given text terms win over a `lexlip.json`'s, but a model's template words (`ignore`) stay
/// unless the given ones name their own: they are a property of the model, not of the rule.
fn text_terms_or(
    given: &Option<crate::text::TextTerms>,
    file: &Option<crate::text::TextTerms>,
) -> Option<crate::text::TextTerms> {
    match (given, file) {
        // A command line's expansion keeps the file's template words and expansion share.
        (Some(g), Some(f)) if g.ignore.is_empty() => Some(crate::text::TextTerms {
            ignore: f.ignore.clone(),
            expansion_share: g.expansion_share.or(f.expansion_share),
            own_floor: g.own_floor.or(f.own_floor),
            document_floor: g.document_floor.or(f.document_floor),
            expansion_scaled: g.expansion_scaled || f.expansion_scaled,
            ..g.clone()
        }),
        (Some(g), _) => Some(g.clone()),
        (None, f) => f.clone(),
    }
}

/// A setting of a model's by the modality of the query it encodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ByQueryModality<T> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<T>,
}

/// Match strengths (a hit's score over its query's self-score) below which a model's hits are
/// weak, by query modality: the strength scale depends on how heavy the model's text and image
/// lexicons are, so each model carries its own, measured on real and nonsense queries.
pub type WeakMatch = ByQueryModality<f64>;

/// A typical real query's weight norm, by query modality ([`LoadOptions::query_norm`]).
pub type QueryNorm = ByQueryModality<f32>;

/// The encoders of one model: text and/or image (sparse), and optionally a dense one.
#[derive(Debug)]
pub struct Encoders {
    path: PathBuf,
    weak_match: WeakMatch,
    query_norm: QueryNorm,
    idf: Option<f32>,
    card: Option<String>,
    scale: Option<f32>,
    text: Option<TextEncoder>,
    image: Option<ImageEncoder>,
    /// Shared with the sparse encoders of lexicon heads, which read its embeddings.
    dense: Option<Arc<Dense>>,
}

/// The dense encoders a model can hold.
#[derive(Debug)]
enum Dense {
    // Boxed: both are large, and of different sizes.
    Clip(Box<ClipEncoder>),
    Siglip(Box<SiglipEncoder>),
    MobileClip(Box<MobileClipEncoder>),
    Dual(Box<DualEncoder>),
    Fused(Box<FusedEncoder>),
    Blip(Box<crate::blip::BlipEncoder>),
}

impl Dense {
    /// Loads the dense encoder directory `dir` of architecture `arch`.
    fn load(dir: &Path, arch: Architecture, device: &Device, dtype: DType) -> Result<Self> {
        match arch {
            Architecture::Clip => Ok(Dense::Clip(Box::new(ClipEncoder::load(dir, device)?))),
            Architecture::Siglip => Ok(Dense::Siglip(Box::new(SiglipEncoder::load(dir, device)?))),
            Architecture::MobileClip => Ok(Dense::MobileClip(Box::new(MobileClipEncoder::load(
                dir, device,
            )?))),
            Architecture::DualEncoder => Ok(Dense::Dual(Box::new(DualEncoder::load_with_dtype(
                dir, device, dtype,
            )?))),
            Architecture::Fused => Ok(Dense::Fused(Box::new(FusedEncoder::load(dir, device)?))),
            Architecture::Blip => Ok(Dense::Blip(Box::new(
                crate::blip::BlipEncoder::load_with_dtype(dir, device, dtype)?,
            ))),
            other => Err(ModelError::UnknownModel {
                path: dir.to_path_buf(),
                message: format!(
                    "a {other:?} model is not a dense encoder (expected CLIP, SigLIP, MobileCLIP, \
                     BLIP or {})",
                    crate::dual::MODEL_TYPE
                ),
            }),
        }
    }

    fn as_dyn(&self) -> &dyn DenseEncoder {
        match self {
            Dense::Clip(c) => c.as_ref(),
            Dense::Siglip(s) => s.as_ref(),
            Dense::MobileClip(m) => m.as_ref(),
            Dense::Dual(d) => d.as_ref(),
            Dense::Fused(f) => f.as_ref(),
            Dense::Blip(b) => b.as_ref(),
        }
    }

    /// A dual encoder (a fused model's teacher too) reads texts up to its own `max_length` unless the caller gives one (a
    /// LexLIP directory's `lexlip.json` speaks for its sparse encoders only); its image size
    /// stays the one it was trained at.
    fn with(self, explicit: &LoadOptions) -> Result<Self> {
        Ok(match (self, explicit.max_length) {
            (Dense::Dual(d), Some(n)) => Dense::Dual(Box::new((*d).with_max_length(n)?)),
            (Dense::Fused(f), Some(n)) => Dense::Fused(Box::new((*f).with_max_length(n)?)),
            (d, _) => d,
        })
    }
}

impl DenseEncoder for Dense {
    fn dim(&self) -> usize {
        self.as_dyn().dim()
    }
    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<lexlip_proto::DenseVector>> {
        self.as_dyn().encode_texts(texts)
    }
    fn image_processor(&self) -> &ImageProcessor {
        self.as_dyn().image_processor()
    }
    fn image_features(&self, pixels: &candle_core::Tensor) -> Result<candle_core::Tensor> {
        self.as_dyn().image_features(pixels)
    }
    fn device(&self) -> &Device {
        self.as_dyn().device()
    }
    fn encode_images(
        &self,
        images: &[crate::image::PreprocessedImage],
    ) -> Result<Vec<lexlip_proto::DenseVector>> {
        self.as_dyn().encode_images(images)
    }
}

/// The name the issue uses for a loaded LexLIP model.
pub type LexLipModel = Encoders;

impl Encoders {
    /// Detects what `path` is and loads every encoder it holds.
    pub fn load(path: &Path, device: &Device) -> Result<Self> {
        Self::load_with(path, device, &LoadOptions::default())
    }

    pub fn load_with(path: &Path, device: &Device, options: &LoadOptions) -> Result<Self> {
        let mut enc = Encoders {
            path: path.to_path_buf(),
            weak_match: WeakMatch::default(),
            query_norm: QueryNorm::default(),
            idf: None,
            card: None,
            scale: None,
            text: None,
            image: None,
            dense: None,
        };
        match detect(path)? {
            ModelSource::Checkpoint(ckpt) => {
                let parts = CheckpointParts::read(&ckpt, options.tokenizer.as_deref())?;
                let name = ckpt
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "lexlip".into());
                if let Some((cfg, w)) = parts.text {
                    let cfg: BertConfig = with_defaults(&ckpt, &cfg, bert_defaults())?;
                    enc.text = Some(TextEncoder::from_parts(
                        &cfg,
                        w,
                        &parts.tokenizer,
                        &name,
                        device,
                    )?);
                }
                if let Some((cfg, w)) = parts.image {
                    let vocab = Vocabulary::from_tokenizer_json(&name, &parts.tokenizer)?;
                    enc.image = Some(ImageEncoder::from_parts(
                        &cfg,
                        &HeadConfig::default(),
                        w,
                        vocab,
                        ImageProcessor::beit(cfg.image_size),
                        device,
                        options.dtype.unwrap_or_else(|| default_dtype(device)),
                    )?);
                }
            }
            ModelSource::LexLipDir(dir) => {
                let file_opts = match dir.join("lexlip.json") {
                    p if p.is_file() => with_defaults(&p, &read_json(&p)?, json!({}))?,
                    _ => LoadOptions::default(),
                };
                let opts = options.or(&file_opts);
                let load_sub = |sub: &str| -> Result<Option<PathBuf>> {
                    let p = dir.join(sub);
                    Ok(p.join("config.json").is_file().then_some(p))
                };
                if let Some(p) = load_sub("text")? {
                    enc.text = Some(TextEncoder::load(&p, device)?);
                }
                if let Some(p) = load_sub("image")? {
                    let dtype = opts.dtype.unwrap_or_else(|| default_dtype(device));
                    enc.image = Some(ImageEncoder::load_with_dtype(&p, device, dtype)?);
                }
                let dense = dir.join("dense");
                if has_model_config(&dense) {
                    let ModelSource::Single(p, arch) = detect(&dense)? else {
                        return Err(ModelError::UnknownModel {
                            path: dense,
                            message: "dense/ holds no single dense model directory".into(),
                        });
                    };
                    let dtype = opts.dtype.unwrap_or_else(|| default_dtype(device));
                    enc.dense = Some(Arc::new(
                        Dense::load(&p, arch, device, dtype)?.with(options)?,
                    ));
                }
                if let Some(p) = load_sub("heads")? {
                    enc.load_heads(&p, device)?;
                }
                enc.apply(&opts)?;
                return Ok(enc);
            }
            ModelSource::Single(dir, arch) => match arch {
                Architecture::Bert => enc.text = Some(TextEncoder::load(&dir, device)?),
                Architecture::Beit => {
                    let dtype = options.dtype.unwrap_or_else(|| default_dtype(device));
                    enc.image = Some(ImageEncoder::load_with_dtype(&dir, device, dtype)?)
                }
                Architecture::D2s => {
                    return Err(ModelError::UnknownModel {
                        path: dir,
                        message: "a D2S model is a lexicon head over a dense model's embeddings \
                                  and does not load alone: pair it with the dense model it was \
                                  trained over (BLIP's for lsr42/d2s_*-blip-*): `lexlip model \
                                  pair --heads <this model> --dense \
                                  hf:Salesforce/blip-itm-base-coco --out DIR`, then --model DIR"
                            .into(),
                    });
                }
                Architecture::Vdr => {
                    let dtype = options.dtype.unwrap_or_else(|| default_dtype(device));
                    let (text, image) =
                        crate::vdr::load(&dir, options.tokenizer.as_deref(), device, dtype)?;
                    enc.text = Some(text);
                    enc.image = Some(image);
                    enc.scale = Some(crate::vdr::QUANTIZATION_SCALE);
                }
                Architecture::Clip
                | Architecture::Siglip
                | Architecture::MobileClip
                | Architecture::DualEncoder
                | Architecture::Fused
                | Architecture::Blip => {
                    let dtype = options.dtype.unwrap_or_else(|| default_dtype(device));
                    let dense = Dense::load(&dir, arch, device, dtype)?.with(options)?;
                    enc.dense = Some(Arc::new(dense))
                }
            },
        }
        enc.apply(options)?;
        Ok(enc)
    }

    /// Lexicon heads (`heads/`, [`crate::heads`]) over the directory's dense model: the text
    /// and image encoders of the model.
    fn load_heads(&mut self, dir: &Path, device: &Device) -> Result<()> {
        let Some(dense) = self.dense.clone() else {
            return Err(ModelError::UnknownModel {
                path: dir.to_path_buf(),
                message: "lexicon heads read a dense model's embeddings, but this model \
                          directory has no dense/ model beside heads/"
                    .into(),
            });
        };
        if self.text.is_some() || self.image.is_some() {
            return Err(ModelError::UnknownModel {
                path: dir.to_path_buf(),
                message: "a model directory holds either text/ and image/ towers or heads/, \
                          not both"
                    .into(),
            });
        }
        let heads = Heads::load(dir, device)?;
        let tokenizer = crate::vocab::tokenizer_json(dir);
        if !tokenizer.is_file() && heads.kind == crate::heads::HeadsKind::D2s {
            return Err(ModelError::Tokenizer {
                path: tokenizer,
                message: "D2S's terms are the word pieces of its mlm_head \
                          (distilbert-base-uncased): put that model's tokenizer.json here \
                          (`lexlip model pair` does)"
                    .into(),
            });
        }
        let vocab = Vocabulary::from_tokenizer_json(dir_name(self.path.as_path()), &tokenizer)?;
        vocab.check_len(heads.config.vocab_size, &tokenizer)?;
        if heads.config.dim != dense.dim() {
            return Err(ModelError::Invalid(format!(
                "{}: the lexicon heads read {}-dimensional embeddings but the dense model gives {}",
                dir.display(),
                heads.config.dim,
                dense.dim()
            )));
        }
        let backbone: Arc<dyn DenseEncoder> = dense;
        self.image = Some(ImageEncoder::from_heads(
            backbone.clone(),
            heads.image,
            vocab.clone(),
        ));
        let text = TextEncoder::from_heads(backbone, heads.text, vocab, &tokenizer, device)?;
        self.text = Some(match heads.kind {
            // The reference's retrieval restricts a query to its own word pieces, as many as
            // DistilBERT reads (the backbone cuts the text it embeds itself).
            crate::heads::HeadsKind::D2s => text
                .with_max_length(512)?
                .with_terms(crate::text::TextTerms::own_only())?,
            crate::heads::HeadsKind::Lexlip => text,
        });
        Ok(())
    }

    fn apply(&mut self, opts: &LoadOptions) -> Result<()> {
        if let Some(n) = opts.max_length
            && let Some(t) = self.text.take()
        {
            self.text = Some(t.with_max_length(n)?);
        }
        if let Some(s) = opts.image_size
            && let Some(i) = self.image.take()
        {
            self.image = Some(i.with_image_size(s)?);
        }
        if let Some(k) = opts.image_top_k
            && let Some(i) = self.image.take()
        {
            self.image = Some(i.with_top_k(k));
        }
        if let Some(w) = opts.weak_match {
            self.weak_match = w;
        }
        if let Some(n) = opts.query_norm {
            for norm in [n.text, n.image].into_iter().flatten() {
                lexlip_proto::sparse::check_query_norm(norm).map_err(|e| {
                    ModelError::Invalid(format!(
                        "{}: query_norm in lexlip.json: {e}",
                        self.path.display()
                    ))
                })?;
            }
            self.query_norm = n;
        }
        if let Some(a) = opts.idf {
            let a = lexlip_proto::idf::check_idf(a).map_err(|e| {
                ModelError::Invalid(format!("{}: idf in lexlip.json: {e}", self.path.display()))
            })?;
            self.idf = Some(a);
        }
        if let Some(c) = &opts.card {
            self.card = Some(c.clone());
        }
        if let Some(scale) = opts.scale {
            if !scale.is_finite() || scale <= 0.0 {
                return Err(ModelError::Invalid(format!(
                    "{}: scale in lexlip.json must be a positive number, got {scale}",
                    self.path.display()
                )));
            }
            self.scale = Some(scale);
        }
        if let Some(terms) = &opts.text_terms
            && let Some(t) = self.text.take()
        {
            self.text = Some(t.with_terms(terms.clone())?);
        }
        Ok(())
    }

    /// The quantization scale of the model's vectors: `lexlip.json`'s `scale`, else the
    /// architecture's (VDR's unit-length lexicons need a larger one than LexLIP's 100); `None`
    /// where the collection's default (100) fits.
    pub fn scale(&self) -> Option<f32> {
        self.scale
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model's weak-match calibration (`lexlip.json`'s `weak_match`; empty when none).
    pub fn weak_match(&self) -> WeakMatch {
        self.weak_match
    }

    /// A typical real query's weight norm (`lexlip.json`'s `query_norm`; empty when none).
    pub fn query_norm(&self) -> QueryNorm {
        self.query_norm
    }

    /// The IDF exponent of the model's queries when the search gives none (`lexlip.json`'s
    /// `idf`).
    pub fn idf(&self) -> Option<f32> {
        self.idf
    }

    /// The model's one-line card (`lexlip.json`'s `card`), when it has one.
    pub fn card(&self) -> Option<&str> {
        self.card.as_deref()
    }

    /// The text encoder, or an error saying this model has none.
    pub fn text(&self) -> Result<&TextEncoder> {
        self.text.as_ref().ok_or_else(|| ModelError::NoEncoder {
            path: self.path.clone(),
            what: "text",
        })
    }

    /// The image encoder, or an error saying this model has none (e.g. a text-only SPLADE model).
    pub fn image(&self) -> Result<&ImageEncoder> {
        self.image.as_ref().ok_or_else(|| ModelError::NoEncoder {
            path: self.path.clone(),
            what: "image",
        })
    }

    pub fn has_text(&self) -> bool {
        self.text.is_some()
    }

    pub fn has_image(&self) -> bool {
        self.image.is_some()
    }

    /// The dense encoder, if the model has one.
    pub fn dense(&self) -> Option<&dyn DenseEncoder> {
        self.dense.as_deref().map(Dense::as_dyn)
    }

    /// Takes the dense encoder of `other` (a CLIP, SigLIP, MobileCLIP or dense dual-encoder model loaded on
    /// its own) as this model's: a sparse model indexed with a separate dense model for the
    /// fallback (`lexlip index --dense-model`). A model with a dense encoder of its own (lexicon
    /// heads, a directory with `dense/`) keeps it and refuses a second.
    pub fn attach_dense(&mut self, other: Encoders) -> Result<()> {
        if self.dense.is_some() {
            return Err(ModelError::Invalid(format!(
                "the model at {} has a dense encoder of its own; a second one ({}) is for a \
                 model without one",
                self.path.display(),
                other.path.display()
            )));
        }
        match other.dense {
            Some(dense) => {
                self.dense = Some(dense);
                Ok(())
            }
            None => Err(ModelError::NoEncoder {
                path: other.path,
                what: "dense",
            }),
        }
    }

    /// Whether the model gives dense embeddings and no lexicon (CLIP, SigLIP, MobileCLIP, `lexlip train
    /// --objective dense`): it is searched with `mode: dense` only.
    pub fn is_dense_only(&self) -> bool {
        self.term_space().is_none() && self.dense.is_some()
    }

    /// The lexicon term space (text and image encoders of one model share it).
    pub fn term_space(&self) -> Option<&TermSpace> {
        self.text
            .as_ref()
            .map(TextEncoder::term_space)
            .or_else(|| self.image.as_ref().map(ImageEncoder::term_space))
    }
}
