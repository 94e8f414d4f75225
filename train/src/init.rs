//! Where each tower starts: a model lexlip loads (a LexLIP directory, a LexLIP checkpoint
//! converted on the fly, a BERT masked-LM or BEiT + MLM head directory) or a size preset from
//! scratch. Resolves configs, weights and the tokenizer, and refuses models that cannot be
//! trained (no MLM head) with an error that names the missing tensor.

use std::path::{Path, PathBuf};

use lexlip_model::beit::Config as BeitConfig;
use lexlip_model::config::{read_json, with_defaults};
use lexlip_model::image::HeadConfig;
use lexlip_model::weight_sharing::SharedConfig;
use lexlip_model::{Architecture, ModelSource, Vocabulary, Weights};
use serde_json::json;

use crate::bert::BertConfig;
use crate::error::{Result, TrainError};
use crate::options::{HeadInit, Objective, Preset, TrainOptions};

/// The MLM head's first tensor: its absence means "no head".
pub const HEAD_PROBE: &str = "cls.predictions.transform.dense.weight";

/// The text tower's starting point.
#[derive(Debug, Clone)]
pub struct TextInit {
    pub config: BertConfig,
    /// `None`: random weights.
    pub weights: Option<Weights>,
    /// The file has its own `cls.predictions.decoder.weight` (not tied to the embeddings).
    pub untied: bool,
    /// What it came from (for train.json).
    pub from: String,
    /// The weight-sharing layers its directory declares (their weights are in `weights`).
    pub shared: Option<SharedConfig>,
}

/// The image tower's starting point.
#[derive(Debug, Clone)]
pub struct ImageInit {
    pub config: BeitConfig,
    pub head: HeadConfig,
    /// `None`: random weights.
    pub weights: Option<Weights>,
    /// Whether `weights` hold an MLM head (`cls.*`).
    pub has_head: bool,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub from: String,
}

/// COOKIE's weight-sharing layers of a LexLIP run (`--shared-layers`).
#[derive(Debug, Clone)]
pub struct SharedInit {
    pub config: SharedConfig,
    /// Loaded from the text tower's weights (`lexlip_shared.*`); random otherwise.
    pub pretrained: bool,
}

/// Both towers and the vocabulary they score.
#[derive(Debug, Clone)]
pub struct Init {
    pub text: TextInit,
    pub image: ImageInit,
    pub tokenizer: PathBuf,
    pub vocab: Vocabulary,
    pub head_init: HeadInit,
    pub shared: Option<SharedInit>,
}

/// Text presets: (hidden, layers, heads, intermediate).
pub fn text_preset(p: Preset) -> (usize, usize, usize, usize) {
    match p {
        Preset::Tiny => (128, 2, 2, 512),
        Preset::Small => (256, 4, 4, 1024),
        Preset::Base => (768, 12, 12, 3072),
    }
}

/// Image presets: (hidden, layers, heads, intermediate, image size, patch size).
pub fn image_preset(p: Preset) -> (usize, usize, usize, usize, usize, usize) {
    match p {
        Preset::Tiny => (128, 4, 2, 512, 64, 8),
        Preset::Small => (256, 6, 4, 1024, 64, 8),
        Preset::Base => (768, 12, 12, 3072, 224, 16),
    }
}

/// A BEiT config of the given shape (relative position bias per layer, layer scale 0.1, no
/// mean pooling: BEiT's pre-training layout without the inner norm).
pub fn beit_config(
    h: usize,
    l: usize,
    heads: usize,
    i: usize,
    size: usize,
    patch: usize,
) -> BeitConfig {
    BeitConfig {
        hidden_size: h,
        num_hidden_layers: l,
        num_attention_heads: heads,
        intermediate_size: i,
        image_size: size,
        patch_size: patch,
        ..BeitConfig::base_patch16_224()
    }
}

/// What a path given as an initial model holds, per tower.
struct Found {
    text: Option<PathBuf>,
    image: Option<PathBuf>,
}

/// Splits a model path into its text and image directories (a checkpoint is converted into
/// `scratch` first).
fn locate(path: &Path, tokenizer: Option<&Path>, scratch: &Path) -> Result<Found> {
    let sub = |dir: &Path, s: &str| {
        let p = dir.join(s);
        p.join("config.json").is_file().then_some(p)
    };
    Ok(match lexlip_model::detect(path)? {
        ModelSource::Checkpoint(ckpt) => {
            let dir = scratch.join("converted-init");
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
            }
            lexlip_model::convert_checkpoint(&ckpt, &dir, tokenizer)?;
            Found {
                text: sub(&dir, "text"),
                image: sub(&dir, "image"),
            }
        }
        ModelSource::LexLipDir(dir) => Found {
            text: sub(&dir, "text"),
            image: sub(&dir, "image"),
        },
        ModelSource::Single(dir, Architecture::Bert) => Found {
            text: Some(dir),
            image: None,
        },
        ModelSource::Single(dir, Architecture::Beit) => Found {
            text: None,
            image: Some(dir),
        },
        ModelSource::Single(
            dir,
            arch @ (Architecture::Clip
            | Architecture::Siglip
            | Architecture::MobileClip
            | Architecture::Blip),
        ) => {
            let name = match arch {
                Architecture::Clip => "CLIP",
                Architecture::Siglip => "SigLIP",
                Architecture::Blip => "BLIP",
                _ => "MobileCLIP",
            };
            return Err(TrainError::Untrainable {
                path: dir,
                message: format!(
                    "a {name} model is a dense encoder, not a LexLIP tower; train lexicon heads \
                     over it with --objective heads --backbone"
                ),
            });
        }
        ModelSource::Single(dir, Architecture::Vdr | Architecture::D2s) => {
            return Err(TrainError::Untrainable {
                path: dir,
                message: "a published VDR or D2S model is served as it is (lexlip serve --model); \
                          lexlip train starts from LexLIP towers, or trains heads over a dense \
                          model (--objective heads --backbone)"
                    .into(),
            });
        }
        ModelSource::Single(dir, Architecture::DualEncoder | Architecture::Fused) => {
            return Err(TrainError::Untrainable {
                path: dir,
                message: "a dense dual encoder is not an initial model; start its towers from \
                          the models it was trained from (--text-init, --image-init)"
                    .into(),
            });
        }
    })
}

/// The one tower directory `path` gives for `what` (a LexLIP directory's sub-directory, or the
/// directory itself).
fn tower_dir(path: &Path, what: &str, tokenizer: Option<&Path>, scratch: &Path) -> Result<PathBuf> {
    let found = locate(path, tokenizer, scratch)?;
    let dir = if what == "text" {
        found.text
    } else {
        found.image
    };
    dir.ok_or_else(|| TrainError::Untrainable {
        path: path.to_path_buf(),
        message: format!("no {what} model here"),
    })
}

/// A text tower directory; `need_head`: the objective trains the MLM head (LexLIP).
fn load_text(dir: &Path, need_head: bool) -> Result<(TextInit, PathBuf)> {
    let cfg_path = dir.join("config.json");
    let raw = read_json(&cfg_path)?;
    let config = BertConfig::read(&cfg_path, &raw)?;
    let shared = SharedConfig::of_tower(&cfg_path, &raw)?;
    let mut weights = Weights::from_safetensors_dir(dir)?;
    if need_head && !weights.contains(HEAD_PROBE) {
        return Err(TrainError::Untrainable {
            path: dir.to_path_buf(),
            message: format!(
                "no masked-LM head (tensor `{HEAD_PROBE}` is missing): the text tower must be a \
                 BertForMaskedLM"
            ),
        });
    }
    weights.alias("cls.predictions.bias", "cls.predictions.decoder.bias");
    let untied = weights.contains("cls.predictions.decoder.weight");
    Ok((
        TextInit {
            config,
            weights: Some(weights),
            untied,
            from: dir.display().to_string(),
            shared,
        },
        lexlip_model::vocab::tokenizer_json(dir),
    ))
}

fn load_image(dir: &Path) -> Result<(ImageInit, PathBuf)> {
    let cfg_path = dir.join("config.json");
    let raw = read_json(&cfg_path)?;
    let config: BeitConfig = with_defaults(&cfg_path, &raw, json!({}))?;
    let head: HeadConfig = match raw.get("lexlip_mlm_head") {
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            TrainError::invalid(format!("{}: lexlip_mlm_head: {e}", cfg_path.display()))
        })?,
        None => HeadConfig::default(),
    };
    let mut weights = Weights::from_safetensors_dir(dir)?;
    weights.alias("cls.predictions.bias", "cls.predictions.decoder.bias");
    let has_head = weights.contains(HEAD_PROBE);
    let processor =
        lexlip_model::ImageProcessor::beit(config.image_size).with_preprocessor_config(dir)?;
    Ok((
        ImageInit {
            config,
            head,
            weights: Some(weights),
            has_head,
            mean: processor.mean,
            std: processor.std,
            from: dir.display().to_string(),
        },
        lexlip_model::vocab::tokenizer_json(dir),
    ))
}

/// Resolves where both towers start from the options. `scratch` is a directory for converted
/// checkpoints (inside the output directory).
pub fn resolve(opts: &TrainOptions, scratch: &Path) -> Result<Init> {
    let tok_opt = opts.model.tokenizer.as_deref();
    let lexlip = opts.method.objective == Objective::Lexlip;
    let (mut text_dir, mut image_dir) = (None, None);
    if let Some(p) = &opts.model.init {
        let found = locate(p, tok_opt, scratch)?;
        text_dir = found.text;
        image_dir = found.image;
    }
    if let Some(p) = &opts.model.text_init {
        text_dir = Some(tower_dir(p, "text", tok_opt, scratch)?);
    }
    if let Some(p) = &opts.model.image_init {
        image_dir = Some(tower_dir(p, "image", tok_opt, scratch)?);
    }
    let mut tokenizers: Vec<PathBuf> = Vec::new();
    let text = match &text_dir {
        Some(d) => {
            let (t, tok) = load_text(d, lexlip)?;
            tokenizers.push(tok);
            Some(t)
        }
        None => None,
    };
    let image = match &image_dir {
        Some(d) => {
            let (i, tok) = load_image(d)?;
            tokenizers.push(tok);
            Some(i)
        }
        None => None,
    };
    let tokenizer = match (
        &opts.model.tokenizer,
        tokenizers.into_iter().find(|t| t.is_file()),
    ) {
        (Some(t), _) => t.clone(),
        (None, Some(t)) => t,
        (None, None) => {
            return Err(TrainError::invalid(
                "no tokenizer: give --tokenizer tokenizer.json (e.g. bert-base-uncased's) or an \
                 initial text model that has one",
            ));
        }
    };
    let vocab = Vocabulary::from_tokenizer_json("lexlip-train", &tokenizer)?;
    let v = vocab.len();
    let text = match text {
        Some(t) => t,
        None => {
            let (h, l, heads, i) = text_preset(opts.model.text_config);
            TextInit {
                config: BertConfig::sized(v, h, l, heads, i),
                weights: None,
                untied: false,
                from: format!("random ({:?} preset)", opts.model.text_config).to_lowercase(),
                shared: None,
            }
        }
    };
    if text.config.vocab_size != v {
        return Err(TrainError::invalid(format!(
            "the text model scores {} terms but the tokenizer {} has {v}",
            text.config.vocab_size,
            tokenizer.display()
        )));
    }
    if text.config.max_position_embeddings < opts.data.max_length {
        return Err(TrainError::invalid(format!(
            "--max-length {} exceeds the text model's {} positions",
            opts.data.max_length, text.config.max_position_embeddings
        )));
    }
    let image = match image {
        Some(i) => {
            if opts
                .model
                .image_size
                .is_some_and(|s| s != i.config.image_size)
                || opts
                    .model
                    .patch_size
                    .is_some_and(|p| p != i.config.patch_size)
            {
                return Err(TrainError::invalid(format!(
                    "--image-size/--patch-size apply to an image tower from scratch; {} is {}px \
                     with patch {}",
                    i.from, i.config.image_size, i.config.patch_size
                )));
            }
            if lexlip && !i.has_head && opts.model.image_head_init == HeadInit::Auto {
                return Err(TrainError::Untrainable {
                    path: PathBuf::from(&i.from),
                    message: format!(
                        "no MLM head over the vocabulary (tensor `{HEAD_PROBE}` is missing); \
                         pass --image-head-init text (copy the text head, LexLIP's recipe) or \
                         random to add one"
                    ),
                });
            }
            i
        }
        None => {
            let (h, l, heads, inter, size, patch) = image_preset(opts.model.image_config);
            let size = opts.model.image_size.unwrap_or(size);
            let patch = opts.model.patch_size.unwrap_or(patch);
            ImageInit {
                config: beit_config(h, l, heads, inter, size, patch),
                head: HeadConfig::default(),
                weights: None,
                has_head: false,
                mean: [0.5; 3],
                std: [0.5; 3],
                from: format!("random ({:?} preset)", opts.model.image_config).to_lowercase(),
            }
        }
    };
    let head_init = match (opts.model.image_head_init, image.has_head) {
        (HeadInit::Auto, true) => HeadInit::Auto,
        (HeadInit::Auto, false) if image.config.hidden_size == text.config.hidden_size => {
            HeadInit::Text
        }
        (HeadInit::Auto, false) => HeadInit::Auto,
        (other, _) => other,
    };
    if lexlip && head_init == HeadInit::Text && image.config.hidden_size != text.config.hidden_size
    {
        return Err(TrainError::invalid(format!(
            "--image-head-init text needs equal hidden sizes (image {}, text {})",
            image.config.hidden_size, text.config.hidden_size
        )));
    }
    let shared = if lexlip {
        shared_init(opts, &text, &image)?
    } else {
        None
    };
    Ok(Init {
        text,
        image,
        tokenizer,
        vocab,
        head_init,
        shared,
    })
}

/// The weight-sharing layers of a LexLIP run: those of the initial text tower, or
/// `--shared-layers` new ones shaped like a text layer; refused when the towers' widths differ
/// (COOKIE projects both into one space first; lexlip's heads read the towers' own width).
fn shared_init(
    opts: &TrainOptions,
    text: &TextInit,
    image: &ImageInit,
) -> Result<Option<SharedInit>> {
    let shared = match (opts.method.shared_layers, &text.shared) {
        (None, None) | (Some(0), None) => return Ok(None),
        (None, Some(c)) => SharedInit {
            config: c.clone(),
            pretrained: true,
        },
        (Some(n), Some(c)) if n == c.num_hidden_layers => SharedInit {
            config: c.clone(),
            pretrained: true,
        },
        (Some(n), Some(c)) => {
            return Err(TrainError::invalid(format!(
                "--shared-layers {n}: the initial model {} has {} shared layers; leave the option \
                 out to keep them",
                text.from, c.num_hidden_layers
            )));
        }
        (Some(n), None) => {
            let act = serde_json::from_value(json!(text.config.hidden_act)).map_err(|e| {
                TrainError::invalid(format!(
                    "the text activation {:?} has no shared-layer equivalent: {e}",
                    text.config.hidden_act
                ))
            })?;
            SharedInit {
                config: SharedConfig {
                    num_hidden_layers: n,
                    num_attention_heads: text.config.num_attention_heads,
                    intermediate_size: text.config.intermediate_size,
                    hidden_act: act,
                    layer_norm_eps: text.config.layer_norm_eps,
                    layer_scale_init_value: 0.1,
                },
                pretrained: false,
            }
        }
    };
    if image.config.hidden_size != text.config.hidden_size {
        return Err(TrainError::invalid(format!(
            "--shared-layers needs towers of one width (text {}, image {}): the shared layers \
             feed both towers' lexicon heads",
            text.config.hidden_size, image.config.hidden_size
        )));
    }
    Ok(Some(shared))
}
