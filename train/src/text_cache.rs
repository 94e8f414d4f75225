//! The lexicon of every caption under a frozen text tower (`--freeze-text`), computed once
//! before the first step: the tower never changes and runs without dropout, so the text side of
//! a step becomes a lookup and a step costs the image side only.
//!
//! Rows are kept sparse (a SPLADE caption has tens of non-zero terms out of 30,522) and are
//! computed in fixed chunks of the corpus order, so a resumed run rebuilds exactly the same
//! cache.

use candle_core::{Device, Tensor};

use crate::data::{self, Corpus};
use crate::error::Result;
use crate::model::LexLipModel;

/// Captions encoded per forward pass while building.
const CHUNK: usize = 128;

/// One sparse lexicon `(term, weight)` per pair of the corpus, in the corpus order.
#[derive(Debug, Clone)]
pub struct TextCache {
    rows: Vec<Vec<(u32, f32)>>,
    vocab: usize,
}

impl TextCache {
    /// Encodes every caption of `corpus` with `model`'s text tower (no dropout, no gradient);
    /// `progress(done, total)` at the start and after each chunk.
    pub fn build(
        model: &LexLipModel,
        corpus: &Corpus,
        pad: u32,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self> {
        let total = corpus.pairs.len();
        let mut rows = Vec::with_capacity(total);
        let mut vocab = 0;
        progress(0, total as u64);
        for chunk in corpus.pairs.chunks(CHUNK) {
            let captions: Vec<&[u32]> = chunk.iter().map(|p| p.tokens.as_slice()).collect();
            let (ids, mask, tokens) = data::padded(&captions, pad);
            let shape = (chunk.len(), tokens);
            let ids = Tensor::from_vec(ids, shape, &model.device)?;
            let mask = Tensor::from_vec(mask, shape, &model.device)?;
            let lexicon = model.frozen_lexicon(&ids, &mask)?;
            vocab = lexicon.dim(1)?;
            for row in lexicon
                .to_dtype(candle_core::DType::F32)?
                .to_vec2::<f32>()?
            {
                rows.push(
                    row.into_iter()
                        .enumerate()
                        .filter(|&(_, w)| w > 0.0)
                        .map(|(t, w)| (t as u32, w))
                        .collect(),
                );
            }
            progress(rows.len() as u64, total as u64);
        }
        Ok(Self { rows, vocab })
    }

    /// The dense `(pairs, vocab)` lexicons of the given pairs.
    pub fn batch(&self, pairs: &[usize], device: &Device) -> Result<Tensor> {
        let mut dense = vec![0f32; pairs.len() * self.vocab];
        for (i, &p) in pairs.iter().enumerate() {
            let Some(row) = self.rows.get(p) else {
                return Err(crate::error::TrainError::invalid(format!(
                    "pair {p} is not in the text cache of {} pairs",
                    self.rows.len()
                )));
            };
            let out = &mut dense[i * self.vocab..(i + 1) * self.vocab];
            for &(t, w) in row {
                out[t as usize] = w;
            }
        }
        Ok(Tensor::from_vec(dense, (pairs.len(), self.vocab), device)?)
    }

    /// Mean non-zero terms per caption.
    pub fn mean_nonzero(&self) -> f64 {
        let n: usize = self.rows.iter().map(Vec::len).sum();
        n as f64 / self.rows.len().max(1) as f64
    }
}
