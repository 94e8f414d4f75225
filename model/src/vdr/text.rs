//! VDR's text tower: BERT (no pooler), a layer norm, and a projection onto the word embeddings of
//! the lexicon's terms (`encoder_q.bert_model.*`, `encoder_q.ln.*`).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};

use crate::error::Result;

/// PyTorch's `nn.LayerNorm` default, which the reference's `ln` keeps.
const EPS: f64 = 1e-5;

/// Token ids → per-position term logits `(batch, max_len, terms)`.
pub struct Text {
    bert: BertModel,
    ln: candle_nn::LayerNorm,
    /// The word embeddings of the lexicon's terms, transposed: `(hidden, terms)`.
    projection: Tensor,
    /// The config's `max_len`: the positions a text is padded to unless the caller says.
    max_len: usize,
    /// BERT's position embeddings: the most a text can be padded to.
    positions: usize,
    pad_id: u32,
    device: Device,
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("vdr::Text")
            .field("max_len", &self.max_len)
            .field("terms", &self.projection.dim(1).unwrap_or(0))
            .finish()
    }
}

impl Text {
    /// `vb` is rooted at `encoder_q.`; `terms` are the vocabulary ids of the lexicon's terms.
    pub fn load(
        vb: &VarBuilder,
        config: &BertConfig,
        terms: &[u32],
        max_len: usize,
        pad_id: u32,
    ) -> Result<Self> {
        let bert = BertModel::load(vb.pp("bert_model"), config)?;
        let h = config.hidden_size;
        let ln = candle_nn::LayerNorm::new(
            vb.pp("ln").get(h, "weight")?,
            vb.pp("ln").get(h, "bias")?,
            EPS,
        );
        let words = vb
            .pp("bert_model.embeddings.word_embeddings")
            .get((config.vocab_size, h), "weight")?;
        let index = Tensor::from_slice(terms, terms.len(), words.device())?;
        let projection = words.index_select(&index, 0)?.t()?.contiguous()?;
        Ok(Self {
            bert,
            ln,
            projection,
            max_len,
            positions: config.max_position_embeddings,
            pad_id,
            device: vb.device().clone(),
        })
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn positions(&self) -> usize {
        self.positions
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The term logits of every position of `ids` right-padded to `max_len` positions:
    /// `(batch, max_len, terms)`. Every position counts in the max, padding included: the
    /// reference pads to `max_len` and pools them all, so a padding position's logits can be a
    /// term's maximum.
    pub fn logits(&self, ids: &[Vec<u32>], max_len: usize) -> Result<Tensor> {
        let n = max_len.min(self.positions);
        let mut flat_ids = Vec::with_capacity(ids.len() * n);
        let mut flat_mask = Vec::with_capacity(ids.len() * n);
        for row in ids {
            let row = &row[..row.len().min(n)];
            flat_ids.extend_from_slice(row);
            flat_ids.extend(std::iter::repeat_n(self.pad_id, n - row.len()));
            flat_mask.extend(std::iter::repeat_n(1u32, row.len()));
            flat_mask.extend(std::iter::repeat_n(0u32, n - row.len()));
        }
        let shape = (ids.len(), n);
        let input = Tensor::from_vec(flat_ids, shape, &self.device)?;
        let mask = Tensor::from_vec(flat_mask, shape, &self.device)?;
        let hidden = self
            .bert
            .forward(&input, &input.zeros_like()?, Some(&mask))?;
        let hidden = candle_core::Module::forward(&self.ln, &hidden)?;
        let (b, t, h) = hidden.dims3()?;
        let logits = hidden.reshape((b * t, h))?.matmul(&self.projection)?;
        Ok(logits.reshape((b, t, ()))?.to_dtype(DType::F32)?)
    }
}
