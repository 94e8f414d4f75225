//! VDR's text tower: BERT (no pooler; [`crate::fast::bert`]), a layer norm, and a projection
//! onto the word embeddings of the lexicon's terms (`encoder_q.bert_model.*`, `encoder_q.ln.*`).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use crate::error::Result;
use crate::fast::layers::{LayerNorm, Linear};
use crate::fast::{Bert, BertShape};

/// PyTorch's `nn.LayerNorm` default, which the reference's `ln` keeps.
const EPS: f64 = 1e-5;

/// Token ids → per-position term logits `(batch, max_len, terms)`.
#[derive(Debug)]
pub struct Text {
    bert: Bert,
    ln: LayerNorm,
    /// The word embeddings of the lexicon's terms, `(terms, hidden)`, with a zero bias.
    projection: Linear,
    /// The config's `max_len`: the positions a text is padded to unless the caller says.
    max_len: usize,
    pad_id: u32,
    device: Device,
}

impl Text {
    /// `vb` is rooted at `encoder_q.`; `terms` are the vocabulary ids of the lexicon's terms.
    pub fn load(
        vb: &VarBuilder,
        shape: &BertShape,
        terms: &[u32],
        max_len: usize,
        pad_id: u32,
    ) -> Result<Self> {
        let bert = Bert::load(&vb.pp("bert_model"), shape)?;
        let index = Tensor::from_slice(terms, terms.len(), vb.device())?;
        let words = bert
            .word_embeddings()
            .index_select(&index, 0)?
            .contiguous()?;
        Ok(Self {
            ln: LayerNorm::load(&vb.pp("ln"), shape.hidden_size, EPS)?,
            projection: Linear::without_bias(words)?,
            bert,
            max_len,
            pad_id,
            device: vb.device().clone(),
        })
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The most positions a text can be padded to.
    pub fn positions(&self) -> usize {
        self.bert.max_positions()
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The term logits of every position of `ids` right-padded to `max_len` positions:
    /// `(batch, max_len, terms)`. Every position counts in the max, padding included: the
    /// reference pads to `max_len` and pools them all, so a padding position's logits can be a
    /// term's maximum.
    pub fn logits(&self, ids: &[Vec<u32>], max_len: usize) -> Result<Tensor> {
        let n = max_len.min(self.positions());
        let mut flat = Vec::with_capacity(ids.len() * n);
        let mut lengths = Vec::with_capacity(ids.len());
        for row in ids {
            let row = &row[..row.len().min(n)];
            flat.extend_from_slice(row);
            flat.extend(std::iter::repeat_n(self.pad_id, n - row.len()));
            lengths.push(row.len());
        }
        let input = Tensor::from_vec(flat, (ids.len(), n), &self.device)?;
        let hidden = self.bert.last_hidden_state(&input, Some(&lengths))?;
        let logits = self.projection.forward(&self.ln.forward(&hidden)?)?;
        Ok(logits.to_dtype(DType::F32)?)
    }
}
