//! VDR cross-modal (Zhou et al., ICLR 2024; `vsearch/vdr-cross-modal`, MIT), loaded as its
//! authors published it: texts and images become non-negative weights over BERT's word pieces.
//!
//! ```text
//! text:  BERT(ids padded to max_len) → LayerNorm → · Eᵀ (E: word embeddings of the terms) ┐
//! image: ViT/32, no class token → ln_post → · Pᵀ (P: (terms, width))                     ├→
//!   max over positions → elu(x) + 1 → unit length → top-k (a text also keeps its own terms)
//! ```
//!
//! The terms are the vocabulary ids from `shift_vocab_num` (999) on whose word piece is plain
//! ASCII: 27,623 of bert-base-uncased's 30,522. The reference spells them out as a list; it is
//! exactly this rule (checked when its fixtures were made, `scripts/make_vdr_fixtures.py`).
//! Lexicons here are vectors over the whole vocabulary, so other terms simply never weigh.
//!
//! A directory (what `save_pretrained` of the reference's `Retriever` writes):
//! ```text
//! config.json        {"encoder_q": {"type": "vdr_crossmodal_text", "model_id":
//!                     "bert-base-uncased", "max_len": 128, "topk": 768, ...},
//!                     "encoder_p": {"type": "vdr_crossmodal_image", "resolution": 224,
//!                     "patch_size": 32, "width": 768, "layers": 12, "heads": 12, "topk": 768}}
//! model.safetensors  or pytorch_model.bin: encoder_q.bert_model.*, encoder_q.ln.*,
//!                    encoder_p.{conv1, positional_embedding, ln_pre, transformer, ln_post, proj}
//! tokenizer.json     bert-base-uncased's, when the repository has it (else `--tokenizer`, or
//!                    the Hugging Face cache of `model_id`, which `hf:` downloads fill)
//! ```
//!
//! Its weights are unit-length vectors over 27,623 terms, so most lie near 0.01:
//! `floor(100·w)` would keep almost none. [`QUANTIZATION_SCALE`] is the model's own scale.

pub mod text;
pub mod vision;

use std::path::Path;

use candle_core::{D, DType, Device, Tensor};
use serde::Deserialize;
use serde_json::Value;

pub use crate::config::is_vdr;
use crate::config::{read_json, with_defaults};
use crate::error::{ModelError, Result};
use crate::image::{ImageEncoder, ImageLexicon, ImageProcessor};
use crate::text::{TextEncoder, TextLexicon};
use crate::vocab::Vocabulary;
use crate::weights::Weights;

pub use text::Text;
pub use vision::{Vision, VisionShape};

/// `type` of the two encoders in a VDR cross-modal `config.json`.
pub const TEXT_TYPE: &str = "vdr_crossmodal_text";
pub const IMAGE_TYPE: &str = "vdr_crossmodal_image";

/// The quantization scale of VDR's unit-length lexicons: `impact = floor(10⁴·w)` keeps the
/// float ranking (`docs/benchmarks.md`, "Published photo models") where LexLIP's 100 would
/// erase most terms.
pub const QUANTIZATION_SCALE: f32 = 10_000.0;

/// Logits elements per pooling pass (positions × terms), so a batch of texts padded to 128
/// positions does not hold gigabytes of logits at once.
const MAX_LOGITS_PER_PASS: usize = 32 << 20;

/// `encoder_q` of the config: the reference's defaults for what it leaves out.
#[derive(Debug, Clone, Deserialize)]
pub struct TextConfig {
    #[serde(rename = "type")]
    pub kind: String,
    pub model_id: String,
    pub max_len: usize,
    pub shift_vocab_num: usize,
    pub topk: usize,
}

/// `encoder_p` of the config.
#[derive(Debug, Clone, Deserialize)]
pub struct ImageConfig {
    #[serde(rename = "type")]
    pub kind: String,
    pub resolution: usize,
    pub patch_size: usize,
    pub width: usize,
    pub layers: usize,
    pub heads: usize,
    pub topk: usize,
}

/// A VDR cross-modal `config.json`.
#[derive(Debug, Clone)]
pub struct Config {
    pub text: TextConfig,
    pub image: ImageConfig,
}

impl Config {
    pub fn read(path: &Path) -> Result<Self> {
        let raw = read_json(path)?;
        let part = |key: &str| raw.get(key).cloned().unwrap_or(Value::Null);
        let text: TextConfig = with_defaults(
            path,
            &part("encoder_q"),
            serde_json::json!({"type": "", "model_id": "bert-base-uncased", "max_len": 256,
                               "shift_vocab_num": 999, "topk": 768}),
        )?;
        let image: ImageConfig = with_defaults(
            path,
            &part("encoder_p"),
            serde_json::json!({"type": "", "resolution": 224, "patch_size": 32, "width": 768,
                               "layers": 12, "heads": 12, "topk": 768}),
        )?;
        if text.kind != TEXT_TYPE || image.kind != IMAGE_TYPE {
            return Err(ModelError::config(
                path,
                format!(
                    "encoders {:?} and {:?}: lexlip loads VDR's cross-modal model ({TEXT_TYPE} \
                     and {IMAGE_TYPE}); VDR's text-to-text retrievers are not image-text models",
                    text.kind, image.kind
                ),
            ));
        }
        let i = &image;
        if i.patch_size == 0 || !i.resolution.is_multiple_of(i.patch_size) || i.heads == 0 {
            return Err(ModelError::config(
                path,
                format!(
                    "encoder_p: resolution {} must be a multiple of patch_size {}, heads > 0",
                    i.resolution, i.patch_size
                ),
            ));
        }
        if text.max_len < 2 {
            return Err(ModelError::config(
                path,
                "encoder_q: max_len must be at least 2",
            ));
        }
        Ok(Self { text, image })
    }
}

/// The vocabulary ids of VDR's terms: from `shift` on, word pieces of plain ASCII.
pub fn term_ids(vocab: &Vocabulary, shift: usize) -> Vec<u32> {
    vocab
        .tokens()
        .iter()
        .enumerate()
        .filter(|(i, t)| *i >= shift && t.is_ascii())
        .map(|(i, _)| i as u32)
        .collect()
}

/// Both encoders of a VDR cross-modal directory, in `dtype` on `device` (the text tower always
/// runs in f32, as lexlip's other BERT towers: its attention mask overflows f16).
pub fn load(
    dir: &Path,
    tokenizer: Option<&Path>,
    device: &Device,
    dtype: DType,
) -> Result<(TextEncoder, ImageEncoder)> {
    let config = Config::read(&dir.join("config.json"))?;
    let base = &config.text.model_id;
    let hint = format!(
        "put {base}'s tokenizer.json there or pass --tokenizer (hf:vsearch/vdr-cross-modal \
         fetches it)"
    );
    let tokenizer = crate::vocab::find_tokenizer(dir, tokenizer, base, &hint)?;
    let name = crate::tokens::dir_name(dir);
    let vocab = Vocabulary::from_tokenizer_json(&name, &tokenizer)?;
    let terms = term_ids(&vocab, config.text.shift_vocab_num);
    let weights = Weights::from_model_dir(dir)?;
    let bert = bert_shape(&weights)?;
    let shape = vision_shape(&config.image, &weights)?;
    weights.require("VDR cross-modal", &expected_tensors(&bert, &shape))?;
    check_terms(&weights, &vocab, &bert, &terms, &tokenizer)?;

    let text_vb = weights.var_builder(DType::F32, device).pp("encoder_q");
    let pad_id = crate::tokens::pad_id(&crate::tokens::load_tokenizer(&tokenizer)?, 0);
    let tower = Text::load(&text_vb, &bert, &terms, config.text.max_len, pad_id)
        .map_err(|e| load_error(&weights, e))?;
    if config.text.max_len > tower.positions() {
        return Err(ModelError::config(
            dir.join("config.json"),
            format!(
                "encoder_q: max_len {} is more than BERT's {} positions",
                config.text.max_len,
                tower.positions()
            ),
        ));
    }
    let image_vb = weights.var_builder(dtype, device).pp("encoder_p");
    let vision = Vision::load(&image_vb, shape).map_err(|e| weights.load_error(e))?;
    let projection = image_vb
        .get((terms.len(), shape.width), "proj")
        .and_then(crate::fast::layers::Linear::without_bias)
        .map_err(|e| weights.load_error(e))?;
    let lexicon = Lexicon {
        terms,
        vocab: vocab.len(),
    };
    let processor = ImageProcessor::clip(shape.resolution).with_pillow_resampling();
    let text = TextEncoder::from_lexicon(
        Box::new(TextTower {
            tower,
            lexicon: lexicon.clone(),
        }),
        vocab.clone(),
        &tokenizer,
        device,
    )?
    .with_terms(crate::text::TextTerms::top_k_and_own(config.text.topk))?;
    let image = ImageEncoder::from_lexicon(
        Box::new(ImageTower {
            vision,
            projection,
            lexicon,
        }),
        vocab,
        processor,
        device,
    )
    .with_top_k(config.image.topk);
    Ok((text, image))
}

/// The BERT's shape from its tensors (the published config leaves it to `model_id`'s).
fn bert_shape(weights: &Weights) -> Result<crate::fast::BertShape> {
    let mut prefixed = Weights::from_tensors(Default::default(), weights.source());
    prefixed.extend_prefixed("bert.", &weights.with_prefix("encoder_q.bert_model."));
    let json = crate::checkpoint::infer_bert_config(&prefixed)?;
    with_defaults(weights.source(), &json, crate::text::bert_defaults())
}

/// Errors of building the text tower: Candle's, classified by tensor, or ours.
fn load_error(weights: &Weights, e: ModelError) -> ModelError {
    match e {
        ModelError::Candle(c) => weights.load_error(c),
        other => other,
    }
}

/// The image tower's shape from `encoder_p` and the tensors (which win where the config is
/// silent: the published config states only some keys).
fn vision_shape(c: &ImageConfig, w: &Weights) -> Result<VisionShape> {
    let conv = w.shape("encoder_p.conv1.weight")?;
    let [width, 3, patch, patch2] = conv[..] else {
        return Err(ModelError::Weights {
            file: w.source().to_path_buf(),
            message: format!(
                "encoder_p.conv1.weight has shape {conv:?}, expected (width, 3, p, p)"
            ),
        });
    };
    let positions = w.shape("encoder_p.positional_embedding")?;
    let grid = (positions[0] as f64).sqrt().round() as usize;
    let shape = VisionShape {
        resolution: grid * patch,
        patch_size: patch,
        width,
        layers: crate::beit::count_layers(w, "encoder_p.transformer.resblocks."),
        heads: c.heads,
    };
    if patch != patch2 || grid * grid != positions[0] || shape.resolution != c.resolution {
        return Err(ModelError::Weights {
            file: w.source().to_path_buf(),
            message: format!(
                "encoder_p: {} positions of {patch}×{patch2}-pixel patches do not make the \
                 configured {}-pixel images",
                positions[0], c.resolution
            ),
        });
    }
    if !width.is_multiple_of(c.heads) {
        return Err(ModelError::config(
            w.source(),
            format!(
                "encoder_p: width {width} is not a multiple of its {} heads",
                c.heads
            ),
        ));
    }
    Ok(shape)
}

/// Every tensor the two towers read.
fn expected_tensors(bert: &crate::fast::BertShape, s: &VisionShape) -> Vec<String> {
    let mut names: Vec<String> = [
        "encoder_q.ln.weight",
        "encoder_q.ln.bias",
        "encoder_p.conv1.weight",
        "encoder_p.positional_embedding",
        "encoder_p.ln_pre.weight",
        "encoder_p.ln_pre.bias",
        "encoder_p.ln_post.weight",
        "encoder_p.ln_post.bias",
        "encoder_p.proj",
    ]
    .map(String::from)
    .to_vec();
    names.extend(bert.tensor_names("encoder_q.bert_model."));
    for i in 0..s.layers {
        let b = format!("encoder_p.transformer.resblocks.{i}");
        names.push(format!("{b}.attn.in_proj_weight"));
        names.push(format!("{b}.attn.in_proj_bias"));
        for part in ["attn.out_proj", "ln_1", "ln_2", "mlp.c_fc", "mlp.c_proj"] {
            names.push(format!("{b}.{part}.weight"));
            names.push(format!("{b}.{part}.bias"));
        }
    }
    names
}

/// The tokenizer must be the BERT's, and the image projection must have a row per term.
fn check_terms(
    w: &Weights,
    vocab: &Vocabulary,
    bert: &crate::fast::BertShape,
    terms: &[u32],
    tokenizer: &Path,
) -> Result<()> {
    vocab.check_len(bert.vocab_size, tokenizer)?;
    let proj = w.shape("encoder_p.proj")?;
    if proj.first() != Some(&terms.len()) {
        return Err(ModelError::ShapeMismatch {
            file: w.source().to_path_buf(),
            name: "encoder_p.proj".into(),
            expected: vec![terms.len(), proj.get(1).copied().unwrap_or(0)],
            got: proj,
        });
    }
    Ok(())
}

/// Where VDR's term axis lies in the vocabulary, and its pooling.
#[derive(Debug, Clone)]
pub struct Lexicon {
    terms: Vec<u32>,
    vocab: usize,
}

impl Lexicon {
    /// `(batch, positions, terms)` logits → `(batch, vocab)` lexicons: max over positions,
    /// `elu + 1`, unit length, placed at the terms' vocabulary ids (zero elsewhere).
    pub fn pool(&self, logits: &Tensor) -> Result<Tensor> {
        let max = logits.max(1)?.to_dtype(DType::F32)?;
        let p = (max.elu(1.0)? + 1.0)?;
        let norm = p
            .sqr()?
            .sum_keepdim(D::Minus1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        let p = p.broadcast_div(&norm)?;
        let rows = p.to_vec2::<f32>()?;
        let mut out = vec![0f32; rows.len() * self.vocab];
        for (r, row) in rows.iter().enumerate() {
            let base = r * self.vocab;
            for (w, &t) in row.iter().zip(&self.terms) {
                out[base + t as usize] = *w;
            }
        }
        Ok(Tensor::from_vec(out, (rows.len(), self.vocab), p.device())?)
    }

    /// How many items fit one pooling pass of `positions` each.
    fn per_pass(&self, positions: usize) -> usize {
        (MAX_LOGITS_PER_PASS / (positions * self.terms.len()).max(1)).max(1)
    }
}

/// VDR's text side: token ids → `(batch, vocab)` lexicons before the top-k cut.
#[derive(Debug)]
pub struct TextTower {
    tower: Text,
    lexicon: Lexicon,
}

impl TextLexicon for TextTower {
    fn max_len(&self) -> usize {
        self.tower.max_len()
    }

    fn positions(&self) -> usize {
        self.tower.positions()
    }

    /// Every text padded to `max_len`, as VDR pools its padding too.
    fn pooled(&self, ids: &[Vec<u32>], max_len: usize) -> Result<Tensor> {
        let mut parts = Vec::new();
        for chunk in ids.chunks(self.lexicon.per_pass(max_len)) {
            parts.push(self.lexicon.pool(&self.tower.logits(chunk, max_len)?)?);
        }
        if parts.is_empty() {
            return Ok(Tensor::zeros(
                (0, self.lexicon.vocab),
                DType::F32,
                self.tower.device(),
            )?);
        }
        Ok(Tensor::cat(&parts, 0)?)
    }
}

/// VDR's image side: pixels → `(batch, vocab)` lexicons before the top-k cut.
#[derive(Debug)]
pub struct ImageTower {
    vision: Vision,
    /// `encoder_p.proj`, `(terms, width)`, with a zero bias.
    projection: crate::fast::layers::Linear,
    lexicon: Lexicon,
}

impl ImageLexicon for ImageTower {
    fn patch_size(&self) -> usize {
        self.vision.shape().patch_size
    }

    fn hidden_size(&self) -> usize {
        self.vision.shape().width
    }

    fn dtype(&self) -> DType {
        self.vision.dtype()
    }

    fn pooled(&self, pixels: &Tensor) -> Result<Tensor> {
        let batch = pixels.dim(0)?;
        let grid = self.vision.shape().grid();
        let per_pass = self.lexicon.per_pass(grid * grid);
        let mut parts = Vec::new();
        let mut start = 0;
        while start < batch {
            let n = per_pass.min(batch - start);
            let states = self.vision.forward(&pixels.narrow(0, start, n)?)?;
            parts.push(self.lexicon.pool(&self.projection.forward(&states)?)?);
            start += n;
        }
        Ok(Tensor::cat(&parts, 0)?)
    }
}
