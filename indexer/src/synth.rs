//! LexLIP-shaped synthetic vectors, for benchmarks and tests.
//!
//! Vocabulary of 30,522 word-pieces (BERT's size) with Zipf-skewed popularity, documents with
//! ~50 non-zeros and queries with 20-40, weights shaped like `log(1 + relu(x))` and quantized
//! with scale 100 (LexLIP sec. 3.4). Deterministic for a seed. Two corpora:
//!
//! - [`Corpus::Independent`]: every term of every vector drawn independently from the global
//!   Zipf distribution ([`Generator::document`], [`Generator::query`]). No structure at all:
//!   the worst case for pruning (no two documents are more alike than chance).
//! - [`Corpus::Topical`]: documents and queries drawn from latent topics
//!   ([`Generator::topical_document`], [`Generator::topical_query`]), closer to real LexLIP
//!   vectors, where an image of a dog on grass and a caption about it share their strongest
//!   terms. [`TOPICS`] topics with Zipf-skewed popularity; each owns [`TOPIC_TERMS`] terms
//!   drawn from the global Zipf distribution outside its 100 most popular terms (so topics
//!   overlap on common terms), Zipf-skewed within the topic. A vector takes
//!   [`TOPIC_SHARE`] of its terms from its topic and the rest from the global distribution.
//!   Weights are `log(1 + x)`, x ~ Exp(mean 1.5), shrunk for the most popular terms by
//!   `min(1, sqrt((rank + 10) / 310))`, as LexLIP's FLOPS regulariser does to frequent terms.

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

/// Latent topics of the topical corpus.
pub const TOPICS: usize = 1_000;
/// Terms owned by each topic.
pub const TOPIC_TERMS: usize = 150;
/// Exponent of the popularity (`1 / (rank + 10)^s`) with which topics pick their terms among
/// the non-head terms: flatter than the global Zipf law, so topics own distinct content words
/// and share only some.
pub const TOPIC_TERM_ZIPF: f64 = 0.5;
/// Share of a topical vector's terms drawn from its topic.
pub const TOPIC_SHARE: f64 = 0.7;

/// Which synthetic corpus to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Corpus {
    /// Terms drawn independently (no structure; the worst case for pruning).
    Independent,
    /// Documents and queries drawn from latent topics.
    #[default]
    Topical,
}

impl std::str::FromStr for Corpus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "independent" => Ok(Self::Independent),
            "topical" => Ok(Self::Topical),
            other => Err(format!("unknown corpus {other:?} (independent or topical)")),
        }
    }
}

impl std::fmt::Display for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Independent => "independent",
            Self::Topical => "topical",
        })
    }
}

/// Generator of LexLIP-shaped quantized vectors.
#[derive(Debug, Clone)]
pub struct Generator {
    cdf: Vec<f64>,
    terms: Vec<String>,
    /// Term ids permuted so that popularity is not tied to id order.
    rank_to_term: Vec<u32>,
    /// Popularity rank of each term id.
    term_rank: Vec<u32>,
    /// Cumulative topic popularity.
    topic_cdf: Vec<f64>,
    /// Each topic's terms (ids), most frequent within the topic first.
    topic_terms: Vec<Vec<u32>>,
    /// Cumulative popularity of a topic's i-th term.
    member_cdf: Vec<f64>,
}

fn normalized_cdf(weights: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut acc = 0.0;
    let cdf: Vec<f64> = weights
        .map(|w| {
            acc += w;
            acc
        })
        .collect();
    cdf.into_iter().map(|c| c / acc).collect()
}

fn sample_cdf(cdf: &[f64], rng: &mut Rng) -> usize {
    let u = rng.unit();
    cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
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
        let cdf: Vec<f64> = cdf.into_iter().map(|c| c / total).collect();
        let terms = (0..vocab).map(|i| format!("w{i:05}")).collect();
        let mut rank_to_term: Vec<u32> = (0..vocab as u32).collect();
        let mut rng = Rng::new(seed);
        for i in (1..vocab).rev() {
            let j = rng.range(0, i);
            rank_to_term.swap(i, j);
        }
        let mut term_rank = vec![0u32; vocab];
        for (rank, &t) in rank_to_term.iter().enumerate() {
            term_rank[t as usize] = rank as u32;
        }
        // Topics (drawn after the permutation, so the independent corpus is unchanged).
        let topic_cdf = normalized_cdf((0..TOPICS).map(|z| 1.0 / ((z + 10) as f64).powf(0.8)));
        let member_cdf = normalized_cdf((0..TOPIC_TERMS).map(|i| 1.0 / (i + 5) as f64));
        let head = 100.min(vocab / 2);
        let tail_cdf =
            normalized_cdf((head..vocab).map(|r| 1.0 / ((r + 10) as f64).powf(TOPIC_TERM_ZIPF)));
        let per_topic = TOPIC_TERMS.min((vocab - head) / 2);
        let topic_terms = (0..TOPICS)
            .map(|_| {
                let mut members: Vec<u32> = Vec::with_capacity(per_topic);
                while members.len() < per_topic {
                    let t = rank_to_term[head + sample_cdf(&tail_cdf, &mut rng)];
                    if !members.contains(&t) {
                        members.push(t);
                    }
                }
                // Popularity inside the topic is not tied to global popularity.
                for i in (1..members.len()).rev() {
                    let j = rng.range(0, i);
                    members.swap(i, j);
                }
                members
            })
            .collect();
        let member_cdf = member_cdf[..per_topic].to_vec();
        Self {
            cdf,
            terms,
            rank_to_term,
            term_rank,
            topic_cdf,
            topic_terms,
            member_cdf,
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

    /// A topic, by popularity.
    pub fn topic(&self, rng: &mut Rng) -> usize {
        sample_cdf(&self.topic_cdf, rng)
    }

    /// A topical vector with `nnz` distinct terms: [`TOPIC_SHARE`] of them from `topic`.
    pub fn topical_vector(&self, rng: &mut Rng, topic: usize, nnz: usize) -> QuantizedVector {
        let members = &self.topic_terms[topic % self.topic_terms.len()];
        let mut ids: Vec<u32> = Vec::with_capacity(nnz);
        let mut tries = 0;
        while ids.len() < nnz && tries < nnz * 20 {
            let t = if rng.unit() < TOPIC_SHARE {
                members[sample_cdf(&self.member_cdf, rng)]
            } else {
                self.sample_term(rng)
            };
            if !ids.contains(&t) {
                ids.push(t);
            }
            tries += 1;
        }
        let pairs: Vec<(&str, u64)> = ids
            .iter()
            .map(|&t| {
                let rank = self.term_rank[t as usize] as f64;
                let shrink = ((rank + 10.0) / 310.0).sqrt().min(1.0);
                let x = -1.5 * (1.0 - rng.unit()).ln();
                let impact = ((100.0 * (1.0 + x).ln() * shrink).floor() as u64).clamp(1, 255);
                (self.terms[t as usize].as_str(), impact)
            })
            .collect();
        QuantizedVector::new(pairs).unwrap_or_default()
    }

    /// A topical document: a topic by popularity, 35-65 non-zeros.
    pub fn topical_document(&self, rng: &mut Rng) -> QuantizedVector {
        let topic = self.topic(rng);
        let nnz = rng.range(35, 65);
        self.topical_vector(rng, topic, nnz)
    }

    /// A topical query: a topic by popularity, 20-40 non-zeros.
    pub fn topical_query(&self, rng: &mut Rng) -> QuantizedVector {
        let topic = self.topic(rng);
        let nnz = rng.range(20, 40);
        self.topical_vector(rng, topic, nnz)
    }

    /// A document of `corpus`.
    pub fn document_of(&self, corpus: Corpus, rng: &mut Rng) -> QuantizedVector {
        match corpus {
            Corpus::Independent => self.document(rng),
            Corpus::Topical => self.topical_document(rng),
        }
    }

    /// A query of `corpus`.
    pub fn query_of(&self, corpus: Corpus, rng: &mut Rng) -> QuantizedVector {
        match corpus {
            Corpus::Independent => self.query(rng),
            Corpus::Topical => self.topical_query(rng),
        }
    }
}
