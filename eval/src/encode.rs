//! Encoding the test corpus once: the corpus readers and item checks of `lexlip index`, images
//! decoded in parallel, then one encoder batch of images and one of texts per chunk. The
//! vectors stay in memory; every setting builds its collection from them.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use lexlip_index::Quantizer;
use lexlip_model::{Encoders, PreprocessedImage};
use lexlip_proto::{DenseVector, Modality, SparseVector, TermSpace, VectorInput};
use rayon::prelude::*;

use crate::encoded::{Encoded, Entry, Vector};
use crate::impacts::{Impacts, Interner};
use crate::options::{EvalObserver, EvalOptions, Mode};
use lexlip_corpus::Input;
use lexlip_corpus::item::{BadItem, Item, SourceItem, reason};
use lexlip_pipeline::corpus::{check_id, decode_with, document, encode_batch};
use lexlip_pipeline::{PipelineError, Result};

/// Captions whose image was skipped: no answer exists for them, so they are left out.
pub const IMAGE_SKIPPED: &str = "image_skipped";

/// The encoders one mode uses, checked before the corpus is read.
enum Encoder<'a> {
    Sparse {
        text: &'a lexlip_model::TextEncoder,
        image: &'a lexlip_model::ImageEncoder,
        quantizer: Quantizer,
        /// Term names shared by every lexicon encoded ([`crate::impacts::Impacts`]).
        names: Mutex<Interner>,
    },
    Dense(&'a dyn lexlip_model::DenseEncoder),
}

impl<'a> Encoder<'a> {
    fn new(encoders: &'a Encoders, options: &EvalOptions) -> Result<Self> {
        Ok(match options.mode {
            Mode::Sparse => Encoder::Sparse {
                text: encoders.text()?,
                image: encoders.image()?,
                // The collections' scale, uncut: each setting cuts documents itself.
                quantizer: Quantizer::new(options.scale, None, None)?,
                names: Mutex::default(),
            },
            Mode::Dense => Encoder::Dense(encoders.dense().ok_or_else(|| {
                PipelineError::Input(format!(
                    "the model at {} has no dense encoder (--mode dense needs one, e.g. a CLIP \
                     directory or a dense dual-encoder directory)",
                    encoders.path().display()
                ))
            })?),
        })
    }

    fn preprocess(&self, bytes: &[u8], name: &str) -> lexlip_model::Result<PreprocessedImage> {
        match self {
            Encoder::Sparse { image, .. } => image.preprocess_named(bytes, name),
            Encoder::Dense(d) => d.preprocess_image(bytes, name),
        }
    }

    fn images(&self, batch: &[PreprocessedImage]) -> Vec<std::result::Result<Vector, String>> {
        self.vectors(
            batch,
            |_, image, b| image.encode(b),
            |d, b| d.encode_images(b),
        )
    }

    fn texts(&self, batch: &[&str]) -> Vec<std::result::Result<Vector, String>> {
        self.vectors(batch, |text, _, b| text.encode(b), |d, b| d.encode_texts(b))
    }

    /// A batch's vectors ([`encode_batch`]): the lexicons one of the sparse encoders gives
    /// (`sparse`), quantized, or the dense encoder's embeddings (`dense`).
    fn vectors<T>(
        &self,
        batch: &[T],
        sparse: impl Fn(
            &lexlip_model::TextEncoder,
            &lexlip_model::ImageEncoder,
            &[T],
        ) -> lexlip_model::Result<Vec<SparseVector>>,
        dense: impl Fn(&dyn lexlip_model::DenseEncoder, &[T]) -> lexlip_model::Result<Vec<DenseVector>>,
    ) -> Vec<std::result::Result<Vector, String>> {
        match self {
            Encoder::Sparse {
                text,
                image,
                quantizer,
                names,
            } => quantize(
                encode_batch(batch, |b| sparse(text, image, b)),
                quantizer,
                names,
            ),
            Encoder::Dense(d) => encode_batch(batch, |b| dense(*d, b))
                .into_iter()
                .map(|r| r.map(Vector::Dense))
                .collect(),
        }
    }

    /// The texts as queries, where the model encodes queries otherwise than the documents it
    /// stores (`TextTerms::for_documents`); `None` where they are the same.
    fn text_queries(&self, batch: &[&str]) -> Option<Vec<std::result::Result<Vector, String>>> {
        match self {
            Encoder::Sparse {
                text,
                quantizer,
                names,
                ..
            } if *text.terms() != text.terms().for_documents() => Some(quantize(
                encode_batch(batch, |b| text.encode_queries(b)),
                quantizer,
                names,
            )),
            _ => None,
        }
    }

    fn term_space(&self) -> (TermSpace, Option<Vec<String>>) {
        match self {
            Encoder::Sparse { text, .. } => (
                text.term_space().clone(),
                Some(text.vocabulary().tokens().to_vec()),
            ),
            Encoder::Dense(_) => (TermSpace::free("dense"), None),
        }
    }
}

/// Quantizes each lexicon of a batch, its term names shared through `names`.
fn quantize(
    weights: Vec<std::result::Result<SparseVector, String>>,
    quantizer: &Quantizer,
    names: &Mutex<Interner>,
) -> Vec<std::result::Result<Vector, String>> {
    let mut names = names
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    weights
        .into_iter()
        .map(|w| {
            let q = quantizer
                .query(VectorInput::Weights(w?))
                .map_err(|e| e.to_string())?;
            Ok(Vector::Sparse(Impacts::new(&q, &mut names)))
        })
        .collect()
}

/// Reads and encodes every item of `input` (bad items are skipped and counted), then leaves out
/// the captions of skipped images.
pub fn encode(
    input: &Input,
    encoders: &Encoders,
    options: &EvalOptions,
    observer: &mut dyn EvalObserver,
) -> Result<Encoded> {
    let started = std::time::Instant::now();
    let encoder = Encoder::new(encoders, options)?;
    // A total for the progress bar where counting is cheap (not for tar shards).
    let total = match input {
        Input::WebDataset(_) => None,
        other => Some(other.open()?.count() as u64),
    };
    let (term_space, tokens) = encoder.term_space();
    let mut out = Encoded::new(options.mode, term_space, tokens);
    let mut seen = HashSet::new();
    let mut source = input.open()?;
    let batch = options.batch_size.max(1);
    loop {
        let chunk: Vec<SourceItem> = source.by_ref().take(batch).collect();
        if chunk.is_empty() {
            break;
        }
        out.read += chunk.len() as u64;
        let items: Vec<Item> = chunk
            .into_iter()
            .filter_map(|item| match item.and_then(|i| check_id(i, &mut seen)) {
                Ok(item) => Some(item),
                Err(bad) => {
                    skip(&mut out, observer, bad);
                    None
                }
            })
            .collect();
        for result in encode_chunk(&encoder, items, options.rerank.is_some()) {
            match result {
                Ok(entry) if entry.doc.modality == Modality::Image => out.images.push(entry),
                Ok(entry) => out.texts.push(entry),
                Err(bad) => skip(&mut out, observer, bad),
            }
        }
        observer.encoding(out.read, total);
    }
    link_captions(&mut out, observer);
    out.encode_seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

/// Links each caption to its image (`metadata.image_id`); a caption of an image that was skipped
/// has no answer and is left out (counted as [`IMAGE_SKIPPED`]).
pub(crate) fn link_captions(out: &mut Encoded, observer: &mut dyn EvalObserver) {
    let positions: HashMap<&str, usize> = out
        .images
        .iter()
        .enumerate()
        .map(|(i, e)| (e.doc.id.as_str(), i))
        .collect();
    let mut texts = Vec::with_capacity(out.texts.len());
    let mut text_image = Vec::with_capacity(out.texts.len());
    let mut orphans = Vec::new();
    for entry in std::mem::take(&mut out.texts) {
        match image_of(&entry) {
            None => {
                texts.push(entry);
                text_image.push(None);
            }
            Some(image) => match positions.get(image) {
                Some(&i) => {
                    texts.push(entry);
                    text_image.push(Some(i));
                }
                None => orphans.push(BadItem::new(
                    Some(entry.doc.id.to_string()),
                    IMAGE_SKIPPED,
                    format!("its image {image:?} was skipped"),
                )),
            },
        }
    }
    out.texts = texts;
    out.text_image = text_image;
    for bad in orphans {
        skip(out, observer, bad);
    }
}

pub(crate) fn skip(out: &mut Encoded, observer: &mut dyn EvalObserver, bad: BadItem) {
    *out.skipped.entry(bad.reason.to_string()).or_default() += 1;
    observer.skipped(&bad);
}

/// The image a text document belongs to (`metadata.image_id`, set by the corpus readers).
fn image_of(entry: &Entry) -> Option<&str> {
    entry
        .doc
        .metadata
        .get(crate::encoded::IMAGE_ID)
        .and_then(|v| v.as_str())
}

/// Decodes the chunk's images in parallel, then encodes its images and its texts, one batch
/// each. Results keep the chunk's order.
fn encode_chunk(
    encoder: &Encoder,
    items: Vec<Item>,
    keep_pixels: bool,
) -> Vec<std::result::Result<Entry, BadItem>> {
    let decoded: Vec<std::result::Result<Option<(PreprocessedImage, u64)>, BadItem>> = items
        .par_iter()
        .map(|item| match &item.image {
            Some(image) => decode_with(&item.id, image, |b, name| {
                Ok((encoder.preprocess(b, name)?, picture_hash(b)))
            })
            .map(Some),
            None => Ok(None),
        })
        .collect();
    let mut images = Vec::new();
    let mut image_slots = Vec::new();
    let mut texts = Vec::new();
    let mut text_slots = Vec::new();
    let mut vectors: Vec<Option<std::result::Result<Vector, BadItem>>> = Vec::new();
    let mut hashes: Vec<Option<u64>> = vec![None; items.len()];
    for (slot, (item, image)) in items.iter().zip(decoded).enumerate() {
        match image {
            Ok(Some((img, hash))) => {
                image_slots.push(slot);
                images.push(img);
                hashes[slot] = Some(hash);
                vectors.push(None);
            }
            Ok(None) => match item.text.as_deref() {
                Some(text) => {
                    text_slots.push(slot);
                    texts.push(text);
                    vectors.push(None);
                }
                None => vectors.push(Some(Err(BadItem::new(
                    Some(item.id.clone()),
                    reason::ENCODE,
                    "nothing to encode",
                )))),
            },
            Err(bad) => vectors.push(Some(Err(bad))),
        }
    }
    let encoded = |slots: &[usize], results: Vec<std::result::Result<Vector, String>>| {
        slots.iter().copied().zip(results).collect::<Vec<_>>()
    };
    let mut done = encoded(&image_slots, encoder.images(&images));
    // A re-ranker reads the images again: keep them (moved, after encoding) only for it.
    let mut pixels: Vec<Option<PreprocessedImage>> = vec![None; items.len()];
    if keep_pixels {
        for (slot, image) in image_slots.iter().zip(images) {
            pixels[*slot] = Some(image);
        }
    }
    done.extend(encoded(&text_slots, encoder.texts(&texts)));
    let mut queries: Vec<Option<std::result::Result<Vector, String>>> = vec![None; items.len()];
    if let Some(results) = encoder.text_queries(&texts) {
        for (slot, result) in text_slots.iter().zip(results) {
            queries[*slot] = Some(result);
        }
    }
    for (slot, result) in done {
        let id = || Some(items[slot].id.clone());
        vectors[slot] = Some(result.map_err(|e| BadItem::new(id(), reason::ENCODE, e)));
    }
    items
        .into_iter()
        .zip(vectors)
        .zip(pixels)
        .zip(queries)
        .zip(hashes)
        .map(|((((item, vector), pixels), query), picture)| {
            let id = item.id.clone();
            let vector = vector.unwrap_or_else(|| {
                Err(BadItem::new(
                    Some(id.clone()),
                    reason::ENCODE,
                    "the encoder returned no vector",
                ))
            })?;
            let query = query
                .transpose()
                .map_err(|e| BadItem::new(Some(id.clone()), reason::ENCODE, e))?;
            Ok(Entry {
                doc: crate::encoded::lean(document(item)?),
                vector,
                query,
                pixels,
                picture,
            })
        })
        .collect()
}

/// A picture file's hash, for [`crate::options::Relevance::Picture`] (pictures of identical
/// bytes answer for each other).
fn picture_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}
