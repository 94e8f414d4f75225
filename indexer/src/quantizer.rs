//! How a collection turns weights into impacts: the one place where its scale, its top-K and its
//! vocabulary apply, for documents, queries and `encode` alike.
//!
//! Documents are quantized (`floor(scale · w)`), then cut to their K largest impacts (ties by
//! term), then checked against the vocabulary. Queries are quantized with the same scale but
//! never cut or checked: a term outside the vocabulary simply matches nothing.
//!
//! ```
//! use lexlip_index::Quantizer;
//! use lexlip_proto::{SparseVector, VectorInput};
//! let q = Quantizer::new(100.0, Some(1), None).unwrap();
//! let w = SparseVector::new([("dog", 1.234), ("grass", 0.5)]).unwrap();
//! let stored = q.document(VectorInput::Weights(w.clone())).unwrap();
//! assert_eq!(stored.iter().collect::<Vec<_>>(), [("dog", 123)]);
//! assert_eq!(q.query(VectorInput::Weights(w)).unwrap().len(), 2);
//! ```

use std::sync::Arc;

use lexlip_proto::{DEFAULT_SCALE, QuantizedVector, SparseVector, VectorInput};

use crate::error::{IndexError, Result};

/// The terms a collection accepts. A fast hash: every term of every document is looked up.
pub type TermSet = rustc_hash::FxHashSet<String>;

/// A collection's scale, top-K and vocabulary.
#[derive(Debug, Clone)]
pub struct Quantizer {
    scale: f32,
    top_k: Option<usize>,
    vocab: Option<Arc<TermSet>>,
    /// Named in errors about unknown terms.
    term_space: String,
}

impl Default for Quantizer {
    /// LexLIP's scale 100, every term kept, any term accepted.
    fn default() -> Self {
        Self {
            scale: DEFAULT_SCALE,
            top_k: None,
            vocab: None,
            term_space: "any terms".into(),
        }
    }
}

impl Quantizer {
    /// Checks the settings: a finite scale > 0, a top-K of at least 1.
    pub fn new(scale: f32, top_k: Option<usize>, vocab: Option<Arc<TermSet>>) -> Result<Self> {
        if !scale.is_finite() || scale <= 0.0 {
            return Err(IndexError::InvalidSetting(format!(
                "scale must be a finite number > 0, got {scale}"
            )));
        }
        if top_k == Some(0) {
            return Err(IndexError::InvalidSetting(
                "top_k_terms must be at least 1".into(),
            ));
        }
        Ok(Self {
            scale,
            top_k,
            vocab,
            term_space: "any terms".into(),
        })
    }

    /// The same, naming `term_space` in unknown-term errors.
    pub(crate) fn named(mut self, term_space: String) -> Self {
        self.term_space = term_space;
        self
    }

    /// The same, also cut to the `k` largest impacts (the smaller of both cuts applies).
    pub fn with_top_k(mut self, k: usize) -> Result<Self> {
        if k == 0 {
            return Err(IndexError::InvalidSetting(
                "top_k_terms must be at least 1".into(),
            ));
        }
        self.top_k = Some(self.top_k.map_or(k, |have| have.min(k)));
        Ok(self)
    }

    pub fn scale(&self) -> f32 {
        self.scale
    }

    pub fn top_k(&self) -> Option<usize> {
        self.top_k
    }

    /// The impacts a document with this vector is stored with.
    pub fn document(&self, input: VectorInput) -> Result<QuantizedVector> {
        let q = self.quantize(input)?;
        let q = match self.top_k {
            Some(k) => q.top_k(k),
            None => q,
        };
        self.check_vocabulary(&q)?;
        Ok(q)
    }

    /// The impacts a query with this vector is searched with.
    pub fn query(&self, input: VectorInput) -> Result<QuantizedVector> {
        self.quantize(input)
    }

    /// What `encode` shows: the impacts a document would be stored with, and the float weights
    /// of exactly those terms (so both lists name the same terms).
    pub fn encode(&self, weights: &SparseVector) -> Result<(SparseVector, QuantizedVector)> {
        let impacts = self.document(VectorInput::Weights(weights.clone()))?;
        let shown = match self.top_k {
            Some(_) => weights.retain_terms(|t| impacts.get(t).is_some()),
            None => weights.clone(),
        };
        Ok((shown, impacts))
    }

    fn quantize(&self, input: VectorInput) -> Result<QuantizedVector> {
        match input {
            VectorInput::Weights(w) => w
                .into_quantized(self.scale)
                .map_err(|e| IndexError::InvalidSetting(e.to_string())),
            VectorInput::Impacts(q) => Ok(q),
        }
    }

    /// Fails on the first term outside the vocabulary (if there is one).
    pub fn check_vocabulary(&self, q: &QuantizedVector) -> Result<()> {
        if let Some(vocab) = &self.vocab
            && let Some((term, _)) = q.iter().find(|(t, _)| !vocab.contains(*t))
        {
            return Err(IndexError::UnknownTerm {
                term: term.to_string(),
                term_space: self.term_space.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lexlip_proto::QuantizedVector;
    use proptest::prelude::*;

    proptest! {
        /// Documents are cut after quantizing, and `encode` shows exactly the stored terms.
        #[test]
        fn encode_shows_what_is_stored(
            ws in proptest::collection::btree_map("[a-h]{1,2}", 0.0f32..2.6, 0..30),
            k in 1usize..12,
        ) {
            let q = Quantizer::new(100.0, Some(k), None).unwrap();
            let w = SparseVector::new(ws).unwrap();
            let (shown, impacts) = q.encode(&w).unwrap();
            prop_assert_eq!(&impacts, &w.quantize(100.0).top_k(k));
            prop_assert_eq!(
                shown.iter().map(|(t, _)| t).collect::<Vec<_>>(),
                impacts.iter().map(|(t, _)| t).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn vocabulary_applies_to_documents_not_queries() {
        let vocab = Arc::new(["dog".to_string()].into_iter().collect());
        let q = Quantizer::new(100.0, None, Some(vocab)).unwrap();
        let v = QuantizedVector::new([("zebra", 3u64)]).unwrap();
        assert!(matches!(
            q.document(VectorInput::Impacts(v.clone())),
            Err(IndexError::UnknownTerm { .. })
        ));
        assert_eq!(q.query(VectorInput::Impacts(v.clone())).unwrap(), v);
        assert!(Quantizer::new(0.0, None, None).is_err());
        assert!(Quantizer::new(100.0, Some(0), None).is_err());
    }
}
