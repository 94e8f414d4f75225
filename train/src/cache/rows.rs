//! The corpus as the heads' steps read it once the backbone has embedded it: the run's corpus
//! and its cache key, the embedding cache's sections (every image, caption and vocabulary
//! word), the rows a section is built from, and each pair packed as its image row and caption
//! tokens. The adapter and the augmented views build their caches from the same pieces.

use std::path::{Path, PathBuf};

use lexlip_model::DenseEncoder;
use rayon::prelude::*;

use super::{CacheMeta, EmbeddingCache, Section};
use crate::data::{self, Corpus};
use crate::error::{Result, TrainError};
use crate::observe::Observer;
use crate::options::TrainOptions;
use crate::text::TextTokenizer;

/// Cache sections.
pub(crate) const IMAGES: &str = "images";
pub(crate) const TEXTS: &str = "texts";
pub(crate) const WORDS: &str = "words";

/// Images per backbone pass while caching.
pub(crate) const IMAGE_CHUNK: usize = 64;
const TEXT_CHUNK: usize = 256;

/// A word piece as text the backbone can embed (`##ing` → `ing`).
fn word_text(token: &str) -> &str {
    token.strip_prefix("##").unwrap_or(token)
}

/// The corpus of a run over cached embeddings, with its captions (the skipped items said), and
/// what identifies it for a cache: the input, the tokenizer and the counts.
pub(crate) fn cached_corpus(
    input: &lexlip_corpus::Input,
    tokenizer: &TextTokenizer,
    tokenizer_path: &Path,
    observer: &mut dyn Observer,
) -> Result<(Corpus, serde_json::Value)> {
    let corpus = data::load_with(input, tokenizer, &mut |d, t| observer.checking(d, t), true)?;
    for e in &corpus.examples {
        observer.message(&format!("skipped {e}"));
    }
    let key = serde_json::json!({
        "input": input.signature()?,
        "tokenizer": crate::fingerprint::sha256_file(tokenizer_path)?,
        "pairs": corpus.pairs.len(),
        "images": corpus.images.len(),
    });
    Ok((corpus, key))
}

/// `--cache`, or `OUT/cache`.
pub(crate) fn cache_dir(opts: &TrainOptions) -> PathBuf {
    opts.model
        .cache
        .clone()
        .unwrap_or_else(|| opts.run.out.join("cache"))
}

/// Encodes what the cache lacks: every image, every pair's caption, every vocabulary word.
pub(crate) fn build_cache(
    dir: &Path,
    backbone_path: &Path,
    backbone: &dyn DenseEncoder,
    corpus: &Corpus,
    tokenizer: &TextTokenizer,
    corpus_key: String,
    observer: &mut dyn Observer,
) -> Result<EmbeddingCache> {
    let texts = corpus
        .texts
        .as_ref()
        .ok_or_else(|| TrainError::invalid("the corpus was read without its captions"))?;
    let words: Vec<String> = (0..tokenizer.vocab as u32)
        .map(|t| {
            tokenizer
                .token(t)
                .map(|w| word_text(&w).to_string())
                .unwrap_or_default()
        })
        .collect();
    let meta = CacheMeta::new(
        backbone_path,
        corpus_key,
        backbone.dim(),
        &[
            (IMAGES, corpus.images.len()),
            (TEXTS, texts.len()),
            (WORDS, words.len()),
        ],
    )?;
    observer.message(&format!(
        "embedding cache {}: {} images, {} captions, {} vocabulary words",
        dir.display(),
        corpus.images.len(),
        texts.len(),
        words.len()
    ));
    let encode_texts = |rows: &[String]| text_rows(rows, |t| backbone.encode_texts(t));
    let sections = vec![
        image_section(
            &corpus.images,
            |bytes, name| Ok(backbone.preprocess_image(bytes, name)?),
            |images| Ok(flat(backbone.encode_images(images)?)),
        ),
        text_section(TEXTS, texts, encode_texts),
        text_section(WORDS, &words, encode_texts),
    ];
    EmbeddingCache::build(dir, meta, sections, &mut |d, t| observer.encoding(d, t))
}

/// The pictures' section of a cache ([`IMAGES`]): read and preprocessed by `preprocess`, then
/// `encode`d, [`IMAGE_CHUNK`] at a time.
pub(crate) fn image_section<'a, P: Send + 'a>(
    images: &'a [lexlip_corpus::ImageRef],
    preprocess: impl Fn(&[u8], &str) -> Result<P> + Sync + 'a,
    encode: impl Fn(&[P]) -> Result<Vec<f32>> + 'a,
) -> Section<'a> {
    Section {
        name: IMAGES,
        rows: images.len(),
        encode: Box::new(move |start, end| {
            image_rows(&images[start..end], IMAGE_CHUNK, &preprocess, &encode)
        }),
    }
}

/// A section `name` of texts, each row `encode`d.
pub(crate) fn text_section<'a>(
    name: &'static str,
    texts: &'a [String],
    encode: impl Fn(&[String]) -> Result<Vec<f32>> + 'a,
) -> Section<'a> {
    Section {
        name,
        rows: texts.len(),
        encode: Box::new(move |start, end| encode(&texts[start..end])),
    }
}

/// A cache section's rows for `images`: each read and preprocessed in parallel by `preprocess`
/// (its bytes and name), `chunk` at a time, then `encode`d together; rows in input order.
pub(crate) fn image_rows<P: Send>(
    images: &[lexlip_corpus::ImageRef],
    chunk: usize,
    preprocess: impl Fn(&[u8], &str) -> Result<P> + Sync,
    encode: impl Fn(&[P]) -> Result<Vec<f32>>,
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for part in images.chunks(chunk) {
        let pre = part
            .par_iter()
            .map(|r| {
                let bytes = data::read_image(r).map_err(|(_, m)| TrainError::Corpus(m))?;
                preprocess(&bytes, &r.name())
            })
            .collect::<Result<Vec<_>>>()?;
        out.extend(encode(&pre)?);
    }
    Ok(out)
}

/// A cache section's rows for `texts`, encoded [`TEXT_CHUNK`] at a time.
pub(crate) fn text_rows(
    texts: &[String],
    encode: impl Fn(&[&str]) -> lexlip_model::Result<Vec<lexlip_proto::DenseVector>>,
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for chunk in texts.chunks(TEXT_CHUNK) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        out.extend(flat(encode(&refs)?));
    }
    Ok(out)
}

/// Embeddings as cache rows, one after another.
pub(crate) fn flat(v: Vec<lexlip_proto::DenseVector>) -> Vec<f32> {
    v.into_iter().flat_map(|d| d.as_slice().to_vec()).collect()
}

/// What a step needs of each pair once the cache holds the embeddings: its image's row and
/// its caption's tokens, packed in three arrays (about 4 bytes per token and 8 per pair; a
/// `Pair` with its own token vector, image reference and id took about 260 bytes per pair,
/// which made the heads' memory grow with the corpus).
pub struct PairRows {
    images: Vec<u32>,
    tokens: Vec<u32>,
    /// Pair `p`'s tokens are `tokens[ends[p - 1]..ends[p]]` (from 0 for the first).
    ends: Vec<u64>,
}

impl PairRows {
    /// Packs the corpus's pairs and empties it (pairs, captions' text, image references and
    /// ids), so their memory goes back before the steps start.
    pub fn take(corpus: &mut Corpus) -> Self {
        let pairs = std::mem::take(&mut corpus.pairs);
        corpus.texts = None;
        corpus.images = Vec::new();
        corpus.image_ids = Vec::new();
        let mut rows = Self {
            images: Vec::with_capacity(pairs.len()),
            tokens: Vec::with_capacity(pairs.iter().map(|p| p.tokens.len()).sum()),
            ends: Vec::with_capacity(pairs.len()),
        };
        for pair in pairs {
            rows.images.push(pair.image);
            rows.tokens.extend_from_slice(&pair.tokens);
            rows.ends.push(rows.tokens.len() as u64);
        }
        release_freed_memory();
        rows
    }

    pub fn len(&self) -> usize {
        self.images.len()
    }

    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// Pair `p`'s image row in the cache.
    pub fn image(&self, p: usize) -> u32 {
        self.images[p]
    }

    /// Pair `p`'s caption tokens.
    pub fn tokens(&self, p: usize) -> &[u32] {
        let start = if p == 0 { 0 } else { self.ends[p - 1] as usize };
        &self.tokens[start..self.ends[p] as usize]
    }
}

/// Hands freed heap pages back to the system. `lexlip train` keeps freed memory in the heap
/// (no trimming, so the steps' large tensors reuse it); the corpus's millions of small
/// allocations, freed, would otherwise stay resident under the steps' tensors, and the heads'
/// memory would grow with the corpus (measured: +18 % from 10k to 1M pairs).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's heaps to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}
