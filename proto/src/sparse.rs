//! Sparse lexicon vectors: float term weights, and their quantized integer impacts.
//!
//! A LexLIP encoder gives every word-piece of its vocabulary a weight `w = log(1 + max relu(logit))`
//! (LexLIP eq. 3/6). Most weights are zero; the rest are kept as a [`SparseVector`]. For the index
//! they are turned into integer *impacts* `floor(scale · w)` (LexLIP sec. 3.4, scale 100), a
//! [`QuantizedVector`], and the relevance of a document to a query is the integer dot product of
//! their impacts (LexLIP eq. 24).
//!
//! ```
//! use lexlip_proto::SparseVector;
//! let v = SparseVector::new([("dog", 1.234), ("grass", 0.5), ("the", 0.004)]).unwrap();
//! let q = v.quantize(100.0);
//! assert_eq!(q.get("dog"), Some(123));
//! assert_eq!(q.get("the"), None); // floor(0.4) = 0: dropped
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The quantization scale LexLIP uses: `impact = floor(100 · w)`.
pub const DEFAULT_SCALE: f32 = 100.0;

/// The largest impact a quantized vector may hold.
///
/// LexLIP's weights stay below ~2.55, so with scale 100 its impacts lie in 1..=255. lexlip accepts
/// any impact in 1..=65535 (so a larger scale or a model with larger weights still works), clamps
/// larger *quantized floats* to this value, and rejects larger *integer impacts* given as input.
pub const MAX_IMPACT: u32 = 65_535;

/// Why a vector was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VectorError {
    #[error("term {term:?} has a weight that is not a finite number ({weight})")]
    NotFinite { term: String, weight: f32 },
    #[error("term {term:?} has a negative weight ({weight}); lexicon weights are non-negative")]
    Negative { term: String, weight: f32 },
    #[error("term {term:?} appears more than once")]
    DuplicateTerm { term: String },
    #[error("a term is the empty string")]
    EmptyTerm,
    #[error("term {term:?} has impact {impact}; impacts must lie in 1..={max}", max = MAX_IMPACT)]
    ImpactOutOfRange { term: String, impact: u64 },
    #[error("quantization scale must be a finite number > 0, got {0}")]
    BadScale(f32),
    #[error("weight of {term:?} is not a number: {value}")]
    NotANumber { term: String, value: String },
}

/// A weight type a [`Sparse`] vector can hold: what input it is built from, how that input is
/// validated, and how weights compare (for [`Sparse::top_k`]).
pub trait Weight: Copy + PartialEq + fmt::Debug + Serialize + sealed::Sealed {
    /// What a caller supplies (`f32` weights, or `u64` impacts so that out-of-range values can
    /// be reported rather than wrapped).
    type Input: for<'de> Deserialize<'de>;
    /// The weight, `None` when it carries nothing and is dropped, or why it is invalid.
    fn validate(term: &str, input: Self::Input) -> Result<Option<Self>, VectorError>;
    /// Larger first; ties are broken by term by the caller.
    fn descending(a: Self, b: Self) -> std::cmp::Ordering;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u32 {}
}

/// Float weights: finite and ≥ 0. Zeros are kept (they carry no score and are dropped by
/// [`SparseVector::quantize`]).
impl Weight for f32 {
    type Input = f32;
    fn validate(term: &str, weight: f32) -> Result<Option<f32>, VectorError> {
        if !weight.is_finite() {
            return Err(VectorError::NotFinite {
                term: term.to_string(),
                weight,
            });
        }
        if weight < 0.0 {
            return Err(VectorError::Negative {
                term: term.to_string(),
                weight,
            });
        }
        Ok(Some(weight))
    }
    fn descending(a: f32, b: f32) -> std::cmp::Ordering {
        b.total_cmp(&a)
    }
}

/// Integer impacts in 1..=[`MAX_IMPACT`]; zeros are dropped (they cannot contribute to a score).
impl Weight for u32 {
    type Input = u64;
    fn validate(term: &str, impact: u64) -> Result<Option<u32>, VectorError> {
        if impact > u64::from(MAX_IMPACT) {
            return Err(VectorError::ImpactOutOfRange {
                term: term.to_string(),
                impact,
            });
        }
        Ok((impact > 0).then_some(impact as u32))
    }
    fn descending(a: u32, b: u32) -> std::cmp::Ordering {
        b.cmp(&a)
    }
}

/// Term → weight, validated: no empty or duplicate terms, every weight valid for `W`.
///
/// Entries are kept sorted by term so equality, hashing and iteration are deterministic. The two
/// instances are [`SparseVector`] (float weights) and [`QuantizedVector`] (integer impacts).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sparse<W> {
    entries: Vec<(String, W)>,
}

/// Term → non-negative float weight, what an encoder produces.
pub type SparseVector = Sparse<f32>;

/// Term → integer impact in 1..=[`MAX_IMPACT`], what an index stores.
pub type QuantizedVector = Sparse<u32>;

impl Eq for Sparse<u32> {}

impl std::hash::Hash for Sparse<u32> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.entries.hash(state);
    }
}

impl<W: Weight> Sparse<W> {
    /// Validates and builds a vector from `(term, weight)` pairs in any order.
    pub fn new<I, S>(pairs: I) -> Result<Self, VectorError>
    where
        I: IntoIterator<Item = (S, W::Input)>,
        S: Into<String>,
    {
        let mut entries = Vec::new();
        for (t, input) in pairs {
            let term = t.into();
            if term.is_empty() {
                return Err(VectorError::EmptyTerm);
            }
            if let Some(w) = W::validate(&term, input)? {
                entries.push((term, w));
            }
        }
        // Encoders list their terms in order already: checking that costs no sort.
        if !entries.is_sorted_by(|a, b| a.0 < b.0) {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(VectorError::DuplicateTerm {
                    term: w[0].0.clone(),
                });
            }
        }
        Ok(Self { entries })
    }

    /// Number of stored terms.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(term, weight)` pairs in term order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, W)> + '_ {
        self.entries.iter().map(|(t, w)| (t.as_str(), *w))
    }

    pub fn get(&self, term: &str) -> Option<W> {
        self.entries
            .binary_search_by(|(t, _)| t.as_str().cmp(term))
            .ok()
            .map(|i| self.entries[i].1)
    }

    /// Entries sorted by weight, highest first (ties by term): the order people want to read.
    pub fn by_weight(&self) -> Vec<(&str, W)> {
        let mut v: Vec<(&str, W)> = self.iter().collect();
        v.sort_by(|a, b| W::descending(a.1, b.1).then_with(|| a.0.cmp(b.0)));
        v
    }

    /// Keeps the `k` largest weights (LexLIP Table 2 sparsification). Ties are broken by term so
    /// the result does not depend on input order.
    pub fn top_k(&self, k: usize) -> Self {
        if self.entries.len() <= k {
            return self.clone();
        }
        let mut kept: Vec<(String, W)> = self
            .by_weight()
            .into_iter()
            .take(k)
            .map(|(t, w)| (t.to_string(), w))
            .collect();
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        Self { entries: kept }
    }

    /// The entries whose term `keep` accepts.
    pub fn retain_terms(&self, mut keep: impl FnMut(&str) -> bool) -> Self {
        Self {
            entries: self
                .entries
                .iter()
                .filter(|(t, _)| keep(t))
                .cloned()
                .collect(),
        }
    }
}

impl SparseVector {
    /// `impact = floor(scale · w)`, zeros dropped, values above [`MAX_IMPACT`] clamped to it.
    ///
    /// An invalid `scale` (not finite or ≤ 0) yields an empty vector — use
    /// [`SparseVector::try_quantize`] to get an error instead.
    pub fn quantize(&self, scale: f32) -> QuantizedVector {
        self.try_quantize(scale).unwrap_or_default()
    }

    /// Like [`SparseVector::quantize`] but rejects a bad scale.
    pub fn try_quantize(&self, scale: f32) -> Result<QuantizedVector, VectorError> {
        quantize_entries(self.entries.iter().map(|(t, w)| (t.as_str(), *w)), scale)
    }

    /// [`SparseVector::try_quantize`] that reuses this vector's terms instead of copying them.
    pub fn into_quantized(self, scale: f32) -> Result<QuantizedVector, VectorError> {
        quantize_entries(self.entries, scale)
    }
}

/// The impacts of `(term, weight)` entries in term order, those that quantize to 0 left out; a
/// term is made a `String` only when kept (borrowed terms are copied, owned ones moved).
fn quantize_entries<T: Into<String>>(
    entries: impl IntoIterator<Item = (T, f32)>,
    scale: f32,
) -> Result<QuantizedVector, VectorError> {
    if !scale.is_finite() || scale <= 0.0 {
        return Err(VectorError::BadScale(scale));
    }
    let entries = entries
        .into_iter()
        .filter_map(|(t, w)| {
            let impact = quantize_weight(w, scale);
            (impact > 0).then(|| (t.into(), impact))
        })
        .collect();
    Ok(QuantizedVector { entries })
}

/// `score` as a share of `own`, the score of a document equal to the query, in `[0, 1]` (0 when
/// `own` is 0): a hit's match strength.
pub fn share_of(score: f64, own: u64) -> f64 {
    if own == 0 {
        0.0
    } else {
        (score / own as f64).clamp(0.0, 1.0)
    }
}

/// `norm` when it can be a model's typical query norm (what scales down the match strengths of
/// lighter queries): a finite number above 0.
pub fn check_query_norm(norm: f32) -> Result<f32, String> {
    if norm.is_finite() && norm > 0.0 {
        Ok(norm)
    } else {
        Err(format!("a query norm must be a number above 0, got {norm}"))
    }
}

/// `floor(scale · w)` clamped to `0..=MAX_IMPACT`, multiplied in f32 exactly as the PyTorch
/// reference does (`torch.floor(100 * w)` on float32), so both give the same impacts.
pub fn quantize_weight(weight: f32, scale: f32) -> u32 {
    let x = (weight * scale).floor();
    if x.is_nan() || x <= 0.0 {
        0
    } else if x >= MAX_IMPACT as f32 {
        MAX_IMPACT
    } else {
        x as u32
    }
}

impl QuantizedVector {
    /// The exact LexLIP relevance (eq. 24): Σ over shared terms of `self · other`, in integers.
    pub fn dot(&self, other: &QuantizedVector) -> u64 {
        let (mut i, mut j, mut sum) = (0, 0, 0u64);
        let (a, b) = (&self.entries, &other.entries);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    sum += u64::from(a[i].1) * u64::from(b[j].1);
                    i += 1;
                    j += 1;
                }
            }
        }
        sum
    }

    /// The score of this query against a document equal to it: `Σ impact²` (what
    /// [`QuantizedVector::dot`] of the vector with itself gives).
    pub fn self_score(&self) -> u64 {
        self.entries.iter().map(|(_, i)| u64::from(*i).pow(2)).sum()
    }

    /// A score of this query as a share of its [`QuantizedVector::self_score`], in `[0, 1]`
    /// (0 for an empty query).
    pub fn match_strength(&self, score: f64) -> f64 {
        share_of(score, self.self_score())
    }

    /// Back to float weights, `impact / scale` (what the index can tell about a stored document).
    pub fn to_sparse(&self, scale: f32) -> SparseVector {
        SparseVector {
            entries: self
                .entries
                .iter()
                .map(|(t, i)| (t.clone(), *i as f32 / scale))
                .collect(),
        }
    }
}

impl<W: Weight> Serialize for Sparse<W> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.entries.iter().map(|(t, w)| (t, w)))
    }
}

impl<'de, W: Weight> Deserialize<'de> for Sparse<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A JSON object cannot express duplicates after parsing into a map, so parse into a
        // list of pairs first and let `new` reject duplicates explicitly.
        let pairs = deserialize_pairs::<D, W::Input>(d)?;
        Sparse::new(pairs).map_err(serde::de::Error::custom)
    }
}

fn deserialize_pairs<'de, D, V>(d: D) -> Result<Vec<(String, V)>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct PairsVisitor<V>(std::marker::PhantomData<V>);
    impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for PairsVisitor<V> {
        type Value = Vec<(String, V)>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object mapping terms to weights")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some((k, v)) = map.next_entry::<String, V>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_map(PairsVisitor(std::marker::PhantomData))
}

/// A vector as it arrives: float weights (quantized later with a collection's scale) or
/// integer impacts (stored as they are).
#[derive(Debug, Clone, PartialEq)]
pub enum VectorInput {
    Weights(SparseVector),
    Impacts(QuantizedVector),
}

impl VectorInput {
    /// A JSON `{token: weight}` object (Anserini `JsonVectorCollection`, the HTTP API): all
    /// integers → impacts; any float → every weight is a float weight, so that every term is
    /// quantized alike.
    pub fn from_json(
        vector: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, VectorError> {
        let mut ints = Vec::with_capacity(vector.len());
        let mut floats = Vec::new();
        for (term, value) in vector {
            let Some(n) = value.as_number() else {
                return Err(VectorError::NotANumber {
                    term,
                    value: value.to_string(),
                });
            };
            if let Some(u) = n.as_u64() {
                ints.push((term, u));
            } else if let Some(f) = n.as_f64() {
                floats.push((term, f as f32));
            }
        }
        if floats.is_empty() {
            Ok(VectorInput::Impacts(QuantizedVector::new(ints)?))
        } else {
            floats.extend(ints.into_iter().map(|(t, u)| (t, u as f32)));
            Ok(VectorInput::Weights(SparseVector::new(floats)?))
        }
    }
}

impl From<QuantizedVector> for BTreeMap<String, u32> {
    fn from(v: QuantizedVector) -> Self {
        v.entries.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_bad_weights() {
        assert!(matches!(
            SparseVector::new([("a", f32::NAN)]),
            Err(VectorError::NotFinite { .. })
        ));
        assert!(matches!(
            SparseVector::new([("a", f32::INFINITY)]),
            Err(VectorError::NotFinite { .. })
        ));
        assert!(matches!(
            SparseVector::new([("a", -0.5)]),
            Err(VectorError::Negative { .. })
        ));
        assert!(matches!(
            SparseVector::new([("a", 0.5), ("a", 0.7)]),
            Err(VectorError::DuplicateTerm { .. })
        ));
        assert_eq!(SparseVector::new([("", 0.5)]), Err(VectorError::EmptyTerm));
    }

    #[test]
    fn quantize_floors_drops_zeros_and_clamps() {
        let v = SparseVector::new([("a", 0.009), ("b", 0.01), ("c", 2.559), ("d", 1e9)]).unwrap();
        let q = v.quantize(100.0);
        assert_eq!(q.get("a"), None);
        assert_eq!(q.get("b"), Some(1));
        assert_eq!(q.get("c"), Some(255));
        assert_eq!(q.get("d"), Some(MAX_IMPACT));
        assert!(v.try_quantize(0.0).is_err());
        assert!(v.try_quantize(f32::NAN).is_err());
    }

    #[test]
    fn quantized_rejects_out_of_range() {
        assert!(QuantizedVector::new([("a", 65_536u64)]).is_err());
        assert_eq!(QuantizedVector::new([("a", 0u64)]).unwrap().len(), 0);
    }

    #[test]
    fn json_roundtrip_and_duplicate_keys() {
        let v: SparseVector = serde_json::from_str(r#"{"dog": 1.5, "cat": 0.25}"#).unwrap();
        assert_eq!(v.get("dog"), Some(1.5));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"cat":0.25,"dog":1.5}"#
        );
        assert!(serde_json::from_str::<SparseVector>(r#"{"dog": 1, "dog": 2}"#).is_err());
        assert!(serde_json::from_str::<SparseVector>(r#"{"dog": -1}"#).is_err());
        let q: QuantizedVector = serde_json::from_str(r#"{"dog": 120, "cat": 3}"#).unwrap();
        assert_eq!(q.get("dog"), Some(120));
    }

    proptest! {
        /// Terms given in order (the encoders' fast path) or in any other order make the same
        /// vector, a repeated term is refused either way, and quantizing by value equals
        /// quantizing by reference.
        #[test]
        fn order_of_terms_does_not_matter(
            ws in proptest::collection::btree_map("[a-e]{1,3}", 0.001f32..3.0, 0..30),
            seed in 0u64..1000,
            repeat in proptest::option::of(0usize..30),
        ) {
            let sorted: Vec<(String, f32)> = ws.into_iter().collect();
            let mut shuffled = sorted.clone();
            shuffled.sort_by_key(|(t, _)| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::hash::Hash::hash(&(t, seed), &mut h);
                std::hash::Hasher::finish(&h)
            });
            let a = SparseVector::new(sorted.clone()).unwrap();
            prop_assert_eq!(&a, &SparseVector::new(shuffled.clone()).unwrap());
            prop_assert_eq!(a.clone().into_quantized(100.0).unwrap(), a.quantize(100.0));
            if let Some(r) = repeat.filter(|&r| r < sorted.len()) {
                let mut twice = sorted.clone();
                twice.insert(r, sorted[r].clone());
                prop_assert!(SparseVector::new(twice).is_err());
                shuffled.push(sorted[r].clone());
                prop_assert!(SparseVector::new(shuffled).is_err());
            }
        }

        #[test]
        fn top_k_keeps_the_largest(ws in proptest::collection::btree_map("[a-e]{1,3}", 0.0f32..3.0, 0..30), k in 0usize..40) {
            let v = SparseVector::new(ws.clone()).unwrap();
            let t = v.top_k(k);
            prop_assert_eq!(t.len(), k.min(v.len()));
            let min_kept = t.iter().map(|(_, w)| w).fold(f32::INFINITY, f32::min);
            for (term, w) in v.iter() {
                if t.get(term).is_none() {
                    prop_assert!(w <= min_kept);
                }
            }
        }

        #[test]
        fn dot_matches_naive(a in proptest::collection::btree_map("[a-f]{1,2}", 1u64..300, 0..20),
                             b in proptest::collection::btree_map("[a-f]{1,2}", 1u64..300, 0..20)) {
            let qa = QuantizedVector::new(a.clone()).unwrap();
            let qb = QuantizedVector::new(b.clone()).unwrap();
            let naive: u64 = a.iter().filter_map(|(t, x)| b.get(t).map(|y| x * y)).sum();
            prop_assert_eq!(qa.dot(&qb), naive);
            prop_assert_eq!(qb.dot(&qa), naive);
        }
    }
}
