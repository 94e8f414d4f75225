//! Lexicons as an evaluation holds them: every document's impacts stay in memory while each
//! setting builds its collection from them. A [`QuantizedVector`] owns a string per term, about
//! 64 bytes per term with the allocator's share; a million composed pictures and their captions
//! hold ~90 million terms, of a few thousand distinct names. [`Impacts`] shares the names.

use std::collections::HashSet;
use std::sync::Arc;

use lexlip_proto::QuantizedVector;

/// The term names of the lexicons read through it, each kept once.
#[derive(Debug, Default)]
pub struct Interner(HashSet<Arc<str>>);

impl Interner {
    fn name(&mut self, term: &str) -> Arc<str> {
        if let Some(name) = self.0.get(term) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(term);
        self.0.insert(name.clone());
        name
    }
}

/// A quantized lexicon whose term names are shared through an [`Interner`]: 24 bytes per term.
/// Terms stay in the order of the vector it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Impacts(Box<[(Arc<str>, u32)]>);

impl Impacts {
    /// `vector`'s impacts, their names taken from (or added to) `names`.
    pub fn new(vector: &QuantizedVector, names: &mut Interner) -> Self {
        Self(vector.iter().map(|(t, w)| (names.name(t), w)).collect())
    }

    /// Non-zero terms.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The vector again, as a collection's quantizer takes it.
    pub fn vector(&self) -> QuantizedVector {
        QuantizedVector::new(self.0.iter().map(|(t, w)| (&**t, u64::from(*w))))
            .expect("impacts copied from a valid vector stay valid")
    }

    /// Entries by impact, highest first, ties by term: [`QuantizedVector::by_weight`]'s order.
    pub fn by_weight(&self) -> Vec<(&str, u32)> {
        let mut v: Vec<(&str, u32)> = self.0.iter().map(|(t, w)| (&**t, *w)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v
    }
}

/// Impacts whose names are shared with nothing else (small hand-made vectors).
impl From<&QuantizedVector> for Impacts {
    fn from(vector: &QuantizedVector) -> Self {
        Self::new(vector, &mut Interner::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The round trip gives the vector back, and the reading order is the vector's own.
        #[test]
        fn impacts_are_the_vector(pairs in proptest::collection::btree_map("[a-e]{1,3}", 1u64..300, 0..40)) {
            let v = QuantizedVector::new(pairs).unwrap();
            let mut names = Interner::default();
            let i = Impacts::new(&v, &mut names);
            prop_assert_eq!(i.vector(), v.clone());
            prop_assert_eq!(i.len(), v.len());
            prop_assert_eq!(i.by_weight(), v.by_weight());
        }
    }

    #[test]
    fn names_are_shared() {
        let a = QuantizedVector::new([("dog", 3u64), ("red", 1)]).unwrap();
        let b = QuantizedVector::new([("dog", 7u64)]).unwrap();
        let mut names = Interner::default();
        let (ia, ib) = (Impacts::new(&a, &mut names), Impacts::new(&b, &mut names));
        assert!(Arc::ptr_eq(&ia.0[0].0, &ib.0[0].0));
        assert_eq!(names.0.len(), 2);
    }
}
