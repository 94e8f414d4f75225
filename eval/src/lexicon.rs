//! How readable a model's lexicons are, beside how well they retrieve (issue 35): a lexicon is
//! only worth its name when it is short, its weight sits in its strongest terms, those terms
//! say what the item shows, and no term is strong in every item.
//!
//! Measured on the stored (quantized, uncut) vectors of the evaluation corpus:
//! - non-zeros per image and per text, median and mean;
//! - the share of a lexicon's weight in its 16 and 64 strongest terms (mean over items);
//! - the share of images with a word of one of their captions among their 10 strongest terms
//!   (a caption's words: its word pieces, without special tokens, punctuation and
//!   [`STOPWORDS`]);
//! - the share of texts whose strongest terms are their own words (the query keeps the user's
//!   words): one of its caption words is in its lexicon and no other term outweighs any of
//!   them;
//! - the terms among the 10 strongest of more than [`COMMON_SHARE`] of the images (or texts):
//!   a term there explains nothing about any one item.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::encoded::{Encoded, Vector};

/// Strongest terms that count for grounding and for the common-term detector.
pub const TOP: usize = 10;
/// A term among the [`TOP`] strongest of more than this share of the items is reported.
pub const COMMON_SHARE: f64 = 0.05;

pub use lexlip_model::vocab::STOPWORDS;

/// Figures of the lexicons of one modality.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideFigures {
    pub items: usize,
    pub nnz_median: f64,
    pub nnz_mean: f64,
    /// Mean share of a lexicon's total impact held by its 16 / 64 strongest terms.
    pub top16_weight_share: f64,
    pub top64_weight_share: f64,
    /// Terms among the 10 strongest of more than 5 % of the items, with that share, most
    /// common first.
    pub common_top10_terms: Vec<(String, f64)>,
}

/// The lexicon figures of an evaluation (sparse mode).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LexiconReport {
    pub image: SideFigures,
    pub text: SideFigures,
    /// Share of the images with captions (and a caption word) that have a word of one of
    /// their captions among their 10 strongest terms.
    pub caption_word_in_top10: f64,
    /// The images that share counts (those with at least one caption word).
    pub grounding_images: usize,
    /// Share of the texts with a caption word whose strongest terms are their own words
    /// ([`own_words_first`]).
    pub text_own_words_first: f64,
}

/// Whether a text's own words lead its lexicon: at least one of `words` is among its terms,
/// and no other term outweighs any of them (ties lead).
pub fn own_words_first(v: &crate::impacts::Impacts, words: &HashSet<String>) -> bool {
    let by_weight = v.by_weight();
    let own = by_weight.iter().filter(|(t, _)| words.contains(*t));
    let Some(weakest) = own.map(|(_, w)| *w).min() else {
        return false;
    };
    by_weight
        .iter()
        .filter(|(t, _)| !words.contains(*t))
        .all(|(_, w)| *w <= weakest)
}

/// The caption words of a text: its word pieces as the tokenizer splits it, lower-cased
/// vocabulary entries, without special tokens, pieces with no letter or digit and
/// [`STOPWORDS`].
pub fn caption_words(pieces: impl IntoIterator<Item = String>) -> HashSet<String> {
    pieces
        .into_iter()
        .filter(|p| {
            !(p.starts_with('[') && p.ends_with(']'))
                && p.chars().any(char::is_alphanumeric)
                && !STOPWORDS.contains(&p.as_str())
        })
        .collect()
}

fn median(sorted: &[usize]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2] as f64,
        n => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
    }
}

/// The sparse vectors of `entries` as they search (a text's query lexicon where the model
/// encodes queries otherwise than documents); None when any is dense.
fn sparse(entries: &[crate::encoded::Entry]) -> Option<Vec<&crate::impacts::Impacts>> {
    entries
        .iter()
        .map(|e| match e.as_query() {
            Vector::Sparse(q) => Some(q),
            Vector::Dense(_) => None,
        })
        .collect()
}

/// The strongest `n` terms of a vector (ties broken as the index breaks them).
fn strongest(v: &crate::impacts::Impacts, n: usize) -> Vec<&str> {
    v.by_weight().into_iter().take(n).map(|(t, _)| t).collect()
}

fn side(vectors: &[&crate::impacts::Impacts]) -> SideFigures {
    let mut nnz: Vec<usize> = vectors.iter().map(|v| v.len()).collect();
    nnz.sort_unstable();
    let n = vectors.len().max(1) as f64;
    let share = |k: usize| {
        vectors
            .iter()
            .map(|v| {
                let w = v.by_weight();
                let total: u64 = w.iter().map(|(_, x)| u64::from(*x)).sum();
                let top: u64 = w.iter().take(k).map(|(_, x)| u64::from(*x)).sum();
                if total == 0 {
                    0.0
                } else {
                    top as f64 / total as f64
                }
            })
            .sum::<f64>()
            / n
    };
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for v in vectors {
        for t in strongest(v, TOP) {
            *counts.entry(t).or_default() += 1;
        }
    }
    let mut common: Vec<(String, f64)> = counts
        .into_iter()
        .map(|(t, c)| (t.to_string(), c as f64 / n))
        .filter(|(_, s)| *s > COMMON_SHARE)
        .collect();
    common.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    SideFigures {
        items: vectors.len(),
        nnz_median: median(&nnz),
        nnz_mean: nnz.iter().sum::<usize>() as f64 / n,
        top16_weight_share: share(16),
        top64_weight_share: share(64),
        common_top10_terms: common,
    }
}

impl LexiconReport {
    /// The figures of `encoded` (sparse vectors), with `words[t]` the caption words of text `t`
    /// ([`caption_words`]). None when the vectors are dense.
    pub fn measure(encoded: &Encoded, words: &[HashSet<String>]) -> Option<Self> {
        let images = sparse(&encoded.images)?;
        let texts = sparse(&encoded.texts)?;
        let (mut grounded, mut counted) = (0usize, 0usize);
        for (i, captions) in encoded.captions_of_images().iter().enumerate() {
            let own: HashSet<&str> = captions
                .iter()
                .filter_map(|&t| words.get(t))
                .flatten()
                .map(String::as_str)
                .collect();
            if own.is_empty() {
                continue;
            }
            counted += 1;
            if strongest(images[i], TOP).iter().any(|t| own.contains(t)) {
                grounded += 1;
            }
        }
        let with_words: Vec<(usize, &HashSet<String>)> = words
            .iter()
            .enumerate()
            .filter(|(t, w)| !w.is_empty() && *t < texts.len())
            .collect();
        let first = with_words
            .iter()
            .filter(|(t, w)| own_words_first(texts[*t], w))
            .count();
        Some(Self {
            text_own_words_first: first as f64 / with_words.len().max(1) as f64,
            image: side(&images),
            text: side(&texts),
            caption_word_in_top10: if counted == 0 {
                0.0
            } else {
                grounded as f64 / counted as f64
            },
            grounding_images: counted,
        })
    }

    /// The JSON object under `"lexicon"`.
    pub fn to_json(&self) -> serde_json::Value {
        let side = |s: &SideFigures| {
            let common: BTreeMap<&str, f64> = s
                .common_top10_terms
                .iter()
                .map(|(t, x)| (t.as_str(), *x))
                .collect();
            serde_json::json!({
                "items": s.items,
                "nnz_median": s.nnz_median,
                "nnz_mean": s.nnz_mean,
                "top16_weight_share": s.top16_weight_share,
                "top64_weight_share": s.top64_weight_share,
                "common_top10_terms": common,
            })
        };
        serde_json::json!({
            "image": side(&self.image),
            "text": side(&self.text),
            "caption_word_in_top10": self.caption_word_in_top10,
            "grounding_images": self.grounding_images,
            "text_own_words_first": self.text_own_words_first,
        })
    }

    /// Lines for the human table.
    pub fn human(&self) -> String {
        let side = |name: &str, s: &SideFigures| {
            // The ten most common; `--json` lists them all.
            let mut common = s
                .common_top10_terms
                .iter()
                .take(10)
                .map(|(t, x)| format!("{t} {:.0} %", 100.0 * x))
                .collect::<Vec<_>>()
                .join(", ");
            match s.common_top10_terms.len() {
                0 => common = "none".into(),
                n if n > 10 => common.push_str(&format!(" and {} more", n - 10)),
                _ => {}
            }
            format!(
                "{name:<6} non-zeros median {:.0}, mean {:.1}; weight in the top 16 / 64 terms \
                 {:.0} / {:.0} %; in the top 10 of > 5 % of {name}s: {common}\n",
                s.nnz_median,
                s.nnz_mean,
                100.0 * s.top16_weight_share,
                100.0 * s.top64_weight_share,
            )
        };
        format!(
            "lexicons:\n{}{}images with a caption word among their 10 strongest terms: {:.1} % \
             (of {})\ntexts whose own words are their strongest terms: {:.1} %\n",
            side("image", &self.image),
            side("text", &self.text),
            100.0 * self.caption_word_in_top10,
            self.grounding_images,
            100.0 * self.text_own_words_first,
        )
    }
}
