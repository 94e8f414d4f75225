//! The text encoder: a BERT masked language model whose per-token MLM logits are pooled into
//! lexicon weights (LexLIP eq. 4-6; SPLADE).
//!
//! Weights use the Hugging Face `BertForMaskedLM` layout (`bert.*`, `cls.predictions.*`); the
//! decoder is tied to the word embeddings unless the file has its own. Candle's BERT runs it.
//! The text encoder always runs in f32: its attention mask uses `f32::MIN`, which overflows f16, and
//! text is cheap next to images.

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use lexlip_proto::{DenseVector, SparseVector, TermSpace};
use serde_json::json;
use tokenizers::Tokenizer;

use crate::config::{read_json, with_defaults};
use crate::dense::DenseEncoder;
use crate::error::{ModelError, Result};
use crate::heads::{LexiconHead, rows_tensor};
use crate::mlm_head::MlmHead;
use crate::pooling::{rows_to_sparse, to_sparse};
pub use crate::text_terms::TextTerms;
use crate::tokens::{dir_name, load_tokenizer, pad_batch, pad_id, tokenize, truncate_to};
use crate::vocab::Vocabulary;
use crate::weight_sharing::SharedLayers;
use crate::weights::Weights;

/// Default maximum number of tokens per text, special tokens included: LexLIP's `max_text_len`
/// (its captions are short). Longer texts are truncated; see [`TextEncoder::with_max_length`].
pub const DEFAULT_MAX_LENGTH: usize = 40;

/// Texts per forward pass: bounds the `(batch, tokens, vocab)` logits tensor (~160 MB at 32 × 40 ×
/// 30522 f32).
const TEXT_CHUNK: usize = 32;
/// Embeddings per matrix product of [`TextEncoder::encode_embeddings`].
const EMBEDDING_CHUNK: usize = 1024;

/// The Hugging Face defaults of `BertConfig`, for keys a `config.json` omits.
pub fn bert_defaults() -> serde_json::Value {
    json!({
        "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "position_embedding_type": "absolute", "use_cache": true,
    })
}

/// Reads a BERT `config.json`.
pub fn load_bert_config(path: &Path) -> Result<BertConfig> {
    with_defaults(path, &read_json(path)?, bert_defaults())
}

/// BERT masked LM + tokenizer → sparse lexicon vectors.
pub struct TextEncoder {
    tower: Tower,
    tokenizer: Tokenizer,
    vocab: Vocabulary,
    device: Device,
    max_length: usize,
    pad_id: u32,
    vocab_size: usize,
    terms: TextTerms,
    /// The tokenizer's special tokens (`[CLS]`, `[SEP]`, …): never one of a text's own words.
    special_ids: Vec<u32>,
    /// The pieces of `terms.ignore` as this tokenizer splits them.
    ignored_ids: Vec<u32>,
}

/// What turns a text into lexicon weights: BERT's MLM logits of every token, max-pooled
/// (LexLIP, SPLADE), a lexicon head over a dense model's text embedding (the tokenizer then only
/// names the vocabulary, caption words; the backbone tokenizes itself), or a [`TextLexicon`].
type Tower = crate::tower::Tower<BertModel, dyn TextLexicon>;

/// A text tower that pools its own lexicons, as published models do in their own way (VDR pads
/// every text to its `max_len` and pools the padding too); the encoder then only tokenizes and
/// cuts the terms.
pub trait TextLexicon: Send + Sync {
    /// Lexicons `(batch, vocab)` in f32 of token ids (each at most `max_len` long).
    fn pooled(&self, ids: &[Vec<u32>], max_len: usize) -> Result<Tensor>;
    /// The length texts are cut and padded to unless the user asks for another.
    fn max_len(&self) -> usize;
    /// The most positions a text can take.
    fn positions(&self) -> usize;
}

impl std::fmt::Debug for TextEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextEncoder")
            .field("term_space", self.vocab.term_space())
            .field("max_length", &self.max_length)
            .field("terms", &self.terms)
            .field("device", &self.device)
            .finish()
    }
}

impl TextEncoder {
    /// Loads a Hugging Face `BertForMaskedLM` directory (`config.json`, `*.safetensors`,
    /// `tokenizer.json`).
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let raw = read_json(&cfg_path)?;
        let config: BertConfig = with_defaults(&cfg_path, &raw, bert_defaults())?;
        let weights = Weights::from_safetensors_dir(dir)?;
        let shared = SharedLayers::load(
            &cfg_path,
            &raw,
            &weights,
            config.hidden_size,
            DType::F32,
            device,
        )?;
        let mut enc = Self::from_parts(
            &config,
            weights,
            &crate::vocab::tokenizer_json(dir),
            &dir_name(dir),
            device,
        )?;
        enc.tower.set_shared(shared);
        Ok(enc)
    }

    /// Builds the encoder from a config, weights in the `BertForMaskedLM` layout and a
    /// `tokenizer.json`; `name` names the term space.
    pub fn from_parts(
        config: &BertConfig,
        mut weights: Weights,
        tokenizer_json: &Path,
        name: &str,
        device: &Device,
    ) -> Result<Self> {
        // Tied decoder (transformers saves it only once) and its bias (`predictions.bias`, or
        // its copy `predictions.decoder.bias` where only that was saved).
        weights.alias(
            "cls.predictions.decoder.weight",
            "bert.embeddings.word_embeddings.weight",
        );
        weights.alias("cls.predictions.bias", "cls.predictions.decoder.bias");
        let vb = weights.var_builder(DType::F32, device);
        let bert = BertModel::load(vb.pp("bert"), config).map_err(|e| weights.load_error(e))?;
        let head =
            MlmHead::from_bert_config(&vb.pp("cls"), config).map_err(|e| weights.load_error(e))?;
        let vocab = Vocabulary::from_tokenizer_json(name, tokenizer_json)?;
        vocab.check_len(config.vocab_size, tokenizer_json)?;
        let tokenizer = load_tokenizer(tokenizer_json)?;
        let pad_id = pad_id(&tokenizer, config.pad_token_id);
        let mut enc = Self {
            tower: Tower::mlm(bert, head),
            tokenizer,
            vocab,
            device: device.clone(),
            max_length: DEFAULT_MAX_LENGTH.min(config.max_position_embeddings),
            pad_id,
            vocab_size: config.vocab_size,
            terms: TextTerms::all(),
            special_ids: Vec::new(),
            ignored_ids: Vec::new(),
        };
        enc.configure_tokenizer()?;
        Ok(enc)
    }

    /// A text encoder whose lexicons are `head` over `backbone`'s text embeddings, in the term
    /// space of `vocab` (the caller checked that the three fit); `tokenizer_json` (the
    /// vocabulary's) gives the word pieces [`Self::tokenize`] returns.
    pub fn from_heads(
        backbone: Arc<dyn DenseEncoder>,
        head: LexiconHead,
        vocab: Vocabulary,
        tokenizer_json: &Path,
        device: &Device,
    ) -> Result<Self> {
        let tower = Tower::Heads { backbone, head };
        Self::with_tower(tower, vocab, tokenizer_json, device, DEFAULT_MAX_LENGTH)
    }

    /// A text encoder over a tower that pools its own lexicons (VDR's, [`crate::vdr`]), the
    /// vocabulary its terms live in and that vocabulary's `tokenizer_json`; texts are cut to the
    /// tower's `max_len`.
    pub fn from_lexicon(
        tower: Box<dyn TextLexicon>,
        vocab: Vocabulary,
        tokenizer_json: &Path,
        device: &Device,
    ) -> Result<Self> {
        let max_length = tower.max_len();
        let tower = Tower::Lexicon(tower);
        Self::with_tower(tower, vocab, tokenizer_json, device, max_length)
    }

    /// An encoder over `tower` whose lexicons are in `vocab`'s term space, tokenizing with
    /// `tokenizer_json` (the vocabulary's) cut to `max_length`.
    fn with_tower(
        tower: Tower,
        vocab: Vocabulary,
        tokenizer_json: &Path,
        device: &Device,
        max_length: usize,
    ) -> Result<Self> {
        let tokenizer = load_tokenizer(tokenizer_json)?;
        let pad_id = pad_id(&tokenizer, 0);
        let mut enc = Self {
            vocab_size: vocab.len(),
            tower,
            tokenizer,
            vocab,
            device: device.clone(),
            max_length,
            pad_id,
            terms: TextTerms::all(),
            special_ids: Vec::new(),
            ignored_ids: Vec::new(),
        };
        enc.configure_tokenizer()?;
        Ok(enc)
    }

    /// Keeps these terms of every lexicon ([`TextTerms`]).
    pub fn with_terms(mut self, terms: TextTerms) -> Result<Self> {
        let words: Vec<&str> = terms.ignore.iter().map(String::as_str).collect();
        self.ignored_ids = self
            .tokenize(&words)?
            .into_iter()
            .flatten()
            .filter(|i| !self.special_ids.contains(i))
            .collect();
        self.terms = terms;
        Ok(self)
    }

    pub fn terms(&self) -> &TextTerms {
        &self.terms
    }

    /// Sets the maximum number of tokens per text (special tokens included; at most the model's
    /// `max_position_embeddings`).
    pub fn with_max_length(mut self, max_length: usize) -> Result<Self> {
        if max_length < 2 {
            return Err(ModelError::Invalid(format!(
                "max_length must be at least 2 (for [CLS] and [SEP]), got {max_length}"
            )));
        }
        if let Tower::Lexicon(t) = &self.tower
            && max_length > t.positions()
        {
            return Err(ModelError::Invalid(format!(
                "max_length {max_length} is more than the text tower's {} positions",
                t.positions()
            )));
        }
        self.max_length = max_length;
        self.configure_tokenizer()?;
        Ok(self)
    }

    pub fn max_length(&self) -> usize {
        self.max_length
    }

    pub fn term_space(&self) -> &TermSpace {
        self.vocab.term_space()
    }

    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocab
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn configure_tokenizer(&mut self) -> Result<()> {
        self.special_ids = self
            .tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect();
        truncate_to(&mut self.tokenizer, self.max_length)
    }

    /// Token ids of each text (with `[CLS]`/`[SEP]`, truncated to `max_length`).
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        tokenize(&self.tokenizer, texts)
    }

    /// MLM logits `(batch, tokens, vocab)` of a padded batch and its mask `(batch, tokens)`.
    pub fn logits(&self, texts: &[&str]) -> Result<(Tensor, Tensor)> {
        let ids = self.tokenize(texts)?;
        let (input_ids, mask) = pad_batch(&ids, self.pad_id, &self.device)?;
        let logits = self.forward(&input_ids, &mask)?;
        Ok((logits, mask))
    }

    /// MLM logits of padded `ids` with attention `mask`: tower, shared layers, head.
    fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (hidden, head) = self.hidden_states(ids, mask)?;
        Ok(head.forward(&hidden, &crate::nn::Inference)?)
    }

    /// Pooled lexicon weights `(batch, vocab)` of tokenized texts (padded here).
    fn pooled_ids(&self, ids: &[Vec<u32>]) -> Result<Tensor> {
        if let Tower::Lexicon(t) = &self.tower {
            return t.pooled(ids, self.max_length);
        }
        let (input_ids, mask) = pad_batch(ids, self.pad_id, &self.device)?;
        let (hidden, head) = self.hidden_states(&input_ids, &mask)?;
        head.pooled(&hidden, Some(&mask))
    }

    /// The states the MLM head reads (tower, then shared layers), and the head.
    fn hidden_states(&self, ids: &Tensor, mask: &Tensor) -> Result<(Tensor, &MlmHead)> {
        let Tower::Mlm {
            model: bert,
            head,
            shared,
        } = &self.tower
        else {
            return Err(ModelError::Invalid(
                "a lexicon head over a dense model has no per-token logits".into(),
            ));
        };
        let token_types = ids.zeros_like()?;
        let mut hidden = bert.forward(ids, &token_types, Some(mask))?;
        if let Some(shared) = shared {
            hidden = shared.forward(&hidden, Some(mask), &crate::nn::Inference)?;
        }
        Ok((hidden, head))
    }

    /// Pooled lexicon weights `(batch, vocab)` in f32, before [`TextTerms`] cut them.
    pub fn pooled(&self, texts: &[&str]) -> Result<Tensor> {
        let mut parts = Vec::new();
        for chunk in texts.chunks(TEXT_CHUNK) {
            parts.push(match &self.tower {
                Tower::Heads { backbone, head } => {
                    head.forward(&rows_tensor(&backbone.encode_texts(chunk)?, &self.device)?)?
                }
                _ => self.pooled_ids(&self.tokenize(chunk)?)?,
            });
        }
        if parts.is_empty() {
            return Ok(Tensor::zeros(
                (0, self.vocab_size),
                DType::F32,
                &self.device,
            )?);
        }
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// The lexicons of backbone text embeddings, as [`Self::encode`] computes them from the
    /// texts (lexicon heads only; [`crate::ImageEncoder::encode_embeddings`] says why).
    pub fn encode_embeddings(&self, embeddings: &[DenseVector]) -> Result<Vec<SparseVector>> {
        let Tower::Heads { head, .. } = &self.tower else {
            return Err(crate::heads::not_heads("text encoder reads tokens"));
        };
        if !self.terms.for_documents().is_all() {
            return Err(ModelError::Invalid(
                "this model keeps a text's own words in its lexicon: its lexicons are computed \
                 from the texts, not from their embeddings alone"
                    .into(),
            ));
        }
        let mut out = Vec::with_capacity(embeddings.len());
        for chunk in embeddings.chunks(EMBEDDING_CHUNK) {
            let rows = head.sparse_rows(&rows_tensor(chunk, &self.device)?, head.top_k())?;
            out.extend(rows_to_sparse(rows, &self.vocab)?);
        }
        Ok(out)
    }

    /// Sparse lexicon vectors of already tokenized texts (ids with `[CLS]`/`[SEP]`), in input
    /// order.
    pub fn encode_ids(&self, ids: &[Vec<u32>]) -> Result<Vec<SparseVector>> {
        let terms = self.terms.for_documents();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(TEXT_CHUNK) {
            out.extend(self.keep_terms(&self.pooled_ids(chunk)?, chunk, &terms)?);
        }
        Ok(out)
    }

    /// Encodes texts to be stored as documents into sparse lexicon vectors (terms = word-piece
    /// tokens), in input order: [`TextTerms::for_documents`] (expansion control is for queries).
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<SparseVector>> {
        self.encode_with(texts, &self.terms.for_documents())
    }

    /// Encodes texts to search with, under every rule of the encoder's [`TextTerms`].
    pub fn encode_queries(&self, texts: &[&str]) -> Result<Vec<SparseVector>> {
        self.encode_with(texts, &self.terms)
    }

    fn encode_with(&self, texts: &[&str], terms: &TextTerms) -> Result<Vec<SparseVector>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(TEXT_CHUNK) {
            match &self.tower {
                Tower::Heads { backbone, .. } if terms.is_all() => {
                    out.extend(self.encode_embeddings(&backbone.encode_texts(chunk)?)?);
                }
                Tower::Heads { backbone, head } => {
                    let x = rows_tensor(&backbone.encode_texts(chunk)?, &self.device)?;
                    let ids = self.tokenize(chunk)?;
                    let terms = terms.cut_to(head.top_k());
                    out.extend(self.keep_terms(&head.weights(&x)?, &ids, &terms)?);
                }
                _ => {
                    let ids = self.tokenize(chunk)?;
                    out.extend(self.keep_terms(&self.pooled_ids(&ids)?, &ids, terms)?);
                }
            }
        }
        Ok(out)
    }

    /// `pooled` `(batch, vocab)` lexicons as sparse vectors, cut to `terms`; `ids` are the
    /// texts' tokens (which terms are their own).
    fn keep_terms(
        &self,
        pooled: &Tensor,
        ids: &[Vec<u32>],
        terms: &TextTerms,
    ) -> Result<Vec<SparseVector>> {
        if terms.is_all() {
            return to_sparse(pooled, &self.vocab);
        }
        let rows = pooled.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let tokens = self.vocab.tokens();
        rows.iter()
            .zip(ids)
            .map(|(row, ids)| {
                let own: Vec<u32> = ids
                    .iter()
                    .copied()
                    .filter(|i| !self.special_ids.contains(i))
                    .collect();
                let kept = terms.keep(row, &own, tokens, &self.ignored_ids);
                Ok(SparseVector::new(kept)?)
            })
            .collect()
    }
}
