//! LexLIP-shaped synthetic vectors, for benchmarks and tests.
//!
//! Vocabulary of 30,522 word-pieces (BERT's size) with Zipf-skewed popularity, documents with
//! ~50 non-zeros and queries with 20-40, weights shaped like `log(1 + relu(x))` and quantized
//! with scale 100 (LexLIP sec. 3.4). Deterministic for a seed.

use lexlip_proto::QuantizedVector;

/// BERT's vocabulary size.
pub const VOCAB_SIZE: usize = 30_522;

/// SplitMix64: small, fast, deterministic; good enough for synthetic data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
}

/// Generator of LexLIP-shaped quantized vectors.
#[derive(Debug, Clone)]
pub struct Generator {
    cdf: Vec<f64>,
    terms: Vec<String>,
    /// Term ids permuted so that popularity is not tied to id order.
    rank_to_term: Vec<u32>,
}

impl Default for Generator {
    fn default() -> Self {
        Self::new(VOCAB_SIZE, 1.0, 7)
    }
}

impl Generator {
    /// `vocab` terms, popularity ∝ 1 / (rank + 10)^`zipf`.
    pub fn new(vocab: usize, zipf: f64, seed: u64) -> Self {
        let mut acc = 0.0;
        let cdf = (0..vocab)
            .map(|r| {
                acc += 1.0 / ((r + 10) as f64).powf(zipf);
                acc
            })
            .collect::<Vec<_>>();
        let total = acc;
        let cdf = cdf.into_iter().map(|c| c / total).collect();
        let terms = (0..vocab).map(|i| format!("w{i:05}")).collect();
        let mut rank_to_term: Vec<u32> = (0..vocab as u32).collect();
        let mut rng = Rng::new(seed);
        for i in (1..vocab).rev() {
            let j = rng.range(0, i);
            rank_to_term.swap(i, j);
        }
        Self {
            cdf,
            terms,
            rank_to_term,
        }
    }

    /// The vocabulary, in id order.
    pub fn vocabulary(&self) -> &[String] {
        &self.terms
    }

    fn sample_term(&self, rng: &mut Rng) -> u32 {
        let u = rng.unit();
        let rank = self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1);
        self.rank_to_term[rank]
    }

    /// One impact shaped like `floor(100 · log(1 + relu(x)))` with x ~ Exp(mean 1.5), ≥ 1.
    fn sample_impact(rng: &mut Rng) -> u64 {
        let x = -1.5 * (1.0 - rng.unit()).ln();
        ((100.0 * (1.0 + x).ln()).floor() as u64).clamp(1, 255)
    }

    /// A vector with `nnz` distinct terms.
    pub fn vector(&self, rng: &mut Rng, nnz: usize) -> QuantizedVector {
        let mut ids: Vec<u32> = Vec::with_capacity(nnz);
        let mut tries = 0;
        while ids.len() < nnz && tries < nnz * 20 {
            let t = self.sample_term(rng);
            if !ids.contains(&t) {
                ids.push(t);
            }
            tries += 1;
        }
        let pairs: Vec<(&str, u64)> = ids
            .iter()
            .map(|&t| (self.terms[t as usize].as_str(), Self::sample_impact(rng)))
            .collect();
        QuantizedVector::new(pairs).unwrap_or_default()
    }

    /// A document: 35-65 non-zeros (mean 50).
    pub fn document(&self, rng: &mut Rng) -> QuantizedVector {
        let nnz = rng.range(35, 65);
        self.vector(rng, nnz)
    }

    /// A query: 20-40 non-zeros.
    pub fn query(&self, rng: &mut Rng) -> QuantizedVector {
        let nnz = rng.range(20, 40);
        self.vector(rng, nnz)
    }
}
