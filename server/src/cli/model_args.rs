//! The encoder options shared by every command that loads a model (`index`, `encode`,
//! `bench encode`, `serve`), and loading from them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use lexlip_model::text::TextTerms;
use lexlip_model::{Encoders, LoadOptions};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ModelArgs {
    /// Encoders: a model directory, a LexLIP .ckpt or hf:OWNER/NAME.
    ///
    /// A LexLIP Lightning .ckpt, a LexLIP directory, a Hugging Face encoder directory (BERT
    /// masked LM, BEiT + MLM head, CLIP, SigLIP, MobileCLIP; the kind is detected), a dense
    /// model from `lexlip train --objective dense` (dense only), or hf:OWNER/NAME (downloaded
    /// into the Hugging Face cache on first use, offline afterwards).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// tokenizer.json for a .ckpt (default: next to it).
    ///
    /// Or for a published model whose repository leaves its tokenizer to its base model (VDR:
    /// bert-base-uncased's).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// Terms kept per image lexicon (default: the model's).
    ///
    /// The K largest weights of every image lexicon; by default the model's (VDR 768).
    #[arg(long, value_name = "K")]
    pub image_top_k: Option<usize>,
    /// Terms kept per text lexicon, besides its own words.
    ///
    /// The K largest weights of every text lexicon, and the text's own word pieces (0: its own
    /// word pieces only, D2S's default). Default: the model's (VDR 768, with the text's own
    /// words; lexlip's own models every term).
    #[arg(long, value_name = "K")]
    pub text_top_k: Option<usize>,
    /// Encode a text as its own word pieces, each weighing 1.
    ///
    /// VDR's bag-of-words queries: no model weights, no expansion.
    #[arg(long, conflicts_with = "text_top_k")]
    pub text_bow: bool,
    /// Queries keep their own words and at most E other terms.
    ///
    /// Expansion control: a text keeps its own content words (function words and the model's
    /// template words aside), weighted by the model, and at most E other terms, the strongest,
    /// none above its weakest own word; texts stored as documents keep every term. Default: the
    /// model's (`text_terms` in its lexlip.json).
    #[arg(long, value_name = "E", conflicts_with_all = ["text_top_k", "text_bow"])]
    pub query_expansion: Option<usize>,
    /// Run the encoders on the GPU (build with --features cuda).
    #[arg(long)]
    pub gpu: bool,
    /// Largest image decoded, width × height [default: 40000000].
    ///
    /// In pixels; larger ones are refused from their header before decoding.
    #[arg(long, value_name = "PIXELS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_image_pixels: Option<u64>,
    /// Pixels decoded at once [default: 100000000].
    ///
    /// Across all images and requests; more wait their turn (a server answers 503 after 20 s).
    #[arg(long, value_name = "PIXELS", value_parser = clap::value_parser!(u64).range(1..))]
    pub decode_budget: Option<u64>,
}

impl ModelArgs {
    /// Applies the process-wide limits these options set (image decoding); call once, before
    /// any image is read.
    pub fn apply_limits(&self) {
        lexlip_model::image::set_max_image_pixels(
            self.max_image_pixels
                .unwrap_or(lexlip_model::image::DEFAULT_MAX_IMAGE_PIXELS),
        );
        lexlip_model::image::set_decode_budget(
            self.decode_budget
                .unwrap_or(lexlip_model::image::DEFAULT_DECODE_BUDGET_PIXELS),
        );
    }

    /// The model path, resolving `hf:` ids; an error naming `what` needs it when none is given.
    pub fn path(&self, what: &str) -> anyhow::Result<PathBuf> {
        let Some(model) = &self.model else {
            anyhow::bail!("{what} needs --model (the encoders)");
        };
        resolve_model(model)
    }

    /// Loads the encoders, with `options` for what only some commands set (max length, image
    /// size); the tokenizer comes from `--tokenizer`.
    pub fn load(&self, what: &str, options: LoadOptions) -> anyhow::Result<(PathBuf, Encoders)> {
        self.apply_limits();
        let path = self.path(what)?;
        let device = lexlip_model::device(self.gpu)?;
        let options = self.options(options);
        let encoders = Encoders::load_with(&path, &device, &options)
            .with_context(|| format!("loading model {}", path.display()))?;
        Ok((path, encoders))
    }
}

impl ModelArgs {
    /// `base` with what these options set: the tokenizer, the lexicons' top-K and terms.
    pub fn options(&self, base: LoadOptions) -> LoadOptions {
        let text_terms = if self.text_bow {
            Some(TextTerms {
                bow: true,
                ..TextTerms::default()
            })
        } else if let Some(e) = self.query_expansion {
            Some(TextTerms::expansion(e, Vec::new()))
        } else {
            self.text_top_k.map(TextTerms::top_k_and_own)
        };
        LoadOptions {
            tokenizer: self.tokenizer.clone().or(base.tokenizer),
            image_top_k: self.image_top_k.or(base.image_top_k),
            text_terms: text_terms.or(base.text_terms),
            ..base
        }
    }
}

/// A model argument: a local path, or `hf:OWNER/NAME` for a Hugging Face repository (downloaded
/// into the HF cache on first use; later runs, even offline, use the cache).
pub fn resolve_model(arg: &Path) -> anyhow::Result<PathBuf> {
    let Some(repo) = arg.to_str().and_then(|s| s.strip_prefix("hf:")) else {
        return Ok(arg.to_path_buf());
    };
    #[cfg(feature = "hub")]
    {
        lexlip_model::hub::download(repo).map_err(|e| anyhow::anyhow!("fetching hf:{repo}: {e}"))
    }
    #[cfg(not(feature = "hub"))]
    {
        anyhow::bail!(
            "hf:{repo}: this lexlip was built without the `hub` feature; download the model and pass its directory"
        )
    }
}
