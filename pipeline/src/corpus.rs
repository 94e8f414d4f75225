//! Corpora (captions and images) through the staged pipeline:
//!
//! ```text
//! reader ──▶ decode/preprocess (rayon) ──▶ encode (batched) + quantize ──▶ write + commit
//! ```
//!
//! The last stage is the one every job shares ([`crate::writer`]).
//!
//! A collection that keeps dense vectors (`dense_dim`) gets each item's embedding from the
//! model's dense encoder in the same encode stage; a dense-only model gives no lexicon, so its
//! documents are stored with empty impacts and found by dense search only.
//!
//! Each stage runs on its own thread (the writer on the caller's), joined by bounded channels of
//! chunks (each a full batch for one of the encoders), so memory stays flat whatever the corpus
//! size and the slowest stage sets the pace. Items keep their input order end to end: after each
//! commit the position reached is saved ([`crate::progress`]) and a re-run resumes from it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use lexlip_index::Collection;
use lexlip_model::{DenseEncoder, Encoders, ImageProcessor, PreprocessedImage};
use lexlip_proto::{DenseVector, DocId, Document, SparseVector, VectorInput};
use rayon::prelude::*;

use crate::error::{PipelineError, Result};
use crate::job::{Observer, Options, Summary};
use crate::progress::fingerprint;
use crate::shard::Shard;
use crate::writer::{Chunk, Prepared, PreparedDoc, Resume};
use lexlip_corpus::item::{BadItem, ImageRef, Item, SourceItem, reason};
use lexlip_corpus::sources::Input;

/// Chunks in flight between two stages.
const CHANNEL_CHUNKS: usize = 4;

/// An item ready to encode.
struct Ready {
    item: Item,
    /// The sparse image encoder's input.
    image: Option<PreprocessedImage>,
    /// The dense encoder's input, where it is preprocessed differently from `image` (or there is
    /// no sparse image encoder).
    dense_image: Option<PreprocessedImage>,
    /// The thumbnail to store with an image document.
    thumbnail: Option<Vec<u8>>,
}

/// The fingerprint of a run: inputs (paths, sizes, modification times), shard and context.
pub fn run_fingerprint(input: &Input, options: &Options) -> Result<String> {
    Ok(fingerprint(&format!(
        "{}|{:?}|{}",
        input.signature()?,
        options.shard,
        options.context
    )))
}

/// Indexes `input` into `collection` with `encoders`.
pub fn index_corpus(
    input: &Input,
    encoders: &Encoders,
    collection: &Collection,
    options: &Options,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let fp = run_fingerprint(input, options)?;
    let saved = match crate::writer::resume(collection, options, &fp, observer)? {
        Resume::Complete(summary) => return Ok(summary),
        Resume::From(saved) => saved,
    };
    let source = input.open()?;
    let batch = options.batch_size.max(1);
    let shard = options.shard;
    let stop = options.stop.clone();
    let thumbnails = options.thumbnails && collection.stores_thumbnails();
    let dense = dense_encoder(encoders, collection)?;
    if encoders.term_space().is_none() && dense.is_none() {
        return Err(PipelineError::Input(format!(
            "the model {} has no lexicon encoder and {} keeps no dense vectors: nothing to index",
            encoders.path().display(),
            collection.dir().display()
        )));
    }

    std::thread::scope(|scope| -> Result<Summary> {
        let (read_tx, read_rx) = sync_channel::<Chunk<SourceItem>>(CHANNEL_CHUNKS);
        let (ready_tx, ready_rx) =
            sync_channel::<Result<Chunk<Result<Ready, BadItem>>>>(CHANNEL_CHUNKS);
        let (encoded_tx, encoded_rx) = sync_channel::<Result<Chunk<Prepared>>>(CHANNEL_CHUNKS);
        let resume = saved.as_ref().map_or(0, |p| p.position);
        scope.spawn(move || read_stage(source, resume, shard, batch, stop, read_tx));
        scope.spawn(move || decode_stage(encoders, dense, thumbnails, read_rx, ready_tx));
        scope.spawn(move || encode_stage(encoders, dense, collection, ready_rx, encoded_tx));
        let summary = crate::writer::write(
            collection, options, &fp, saved, "item", encoded_rx, observer,
        );
        // On an early error the receivers drop here, which unblocks and ends the other stages.
        summary
    })
}

/// The dense encoder of a collection that keeps dense vectors (an error if the model has none,
/// or one of another dimension), or `None` for a sparse-only collection.
fn dense_encoder<'a>(
    encoders: &'a Encoders,
    collection: &Collection,
) -> Result<Option<&'a dyn DenseEncoder>> {
    let Some(dim) = collection.manifest().settings.dense_dim else {
        return Ok(None);
    };
    match encoders.dense() {
        Some(d) if d.dim() == dim => Ok(Some(d)),
        Some(d) => Err(PipelineError::Input(format!(
            "{} keeps dense vectors of {dim} dimensions; the model's dense encoder gives {}",
            collection.dir().display(),
            d.dim()
        ))),
        None => Err(PipelineError::Input(format!(
            "{} keeps dense vectors, and the model {} has no dense encoder: give a model with \
             one, or a dense model beside it",
            collection.dir().display(),
            encoders.path().display()
        ))),
    }
}

fn read_stage(
    source: Box<dyn Iterator<Item = SourceItem> + Send>,
    resume: u64,
    shard: Option<Shard>,
    batch: usize,
    stop: Option<Arc<AtomicBool>>,
    tx: SyncSender<Chunk<SourceItem>>,
) {
    // Ids seen so far (duplicates are bad items): 16 bytes per item.
    let mut seen: HashSet<u128> = HashSet::new();
    let mut chunk = Vec::with_capacity(batch);
    let mut fill = BatchFill::default();
    let mut position = 0u64;
    let stopped = || stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
    for item in source {
        // Also while passing over what an earlier run committed (a million items take minutes
        // to read past): the position saved never goes back before `resume`.
        if stopped() {
            let _ = tx.send(Chunk::new(chunk, position.max(resume), false));
            return;
        }
        let here = position;
        position += 1;
        if shard.is_some_and(|s| !s.holds(&item)) {
            continue;
        }
        let item = item.and_then(|i| check_id(i, &mut seen));
        if here < resume {
            continue; // committed by an earlier run; its id is remembered above
        }
        fill.add(&item);
        chunk.push((here, item));
        if fill.full(batch, chunk.len()) {
            fill = BatchFill::default();
            let items = std::mem::replace(&mut chunk, Vec::with_capacity(batch));
            if tx.send(Chunk::new(items, position, false)).is_err() {
                return;
            }
        }
    }
    let _ = tx.send(Chunk::new(chunk, position.max(resume), true));
}

/// What a chunk holds for each encoder. A chunk ends when either encoder's batch is full, so
/// a corpus of pictures with their captions encodes full batches of both (cut at `batch` items,
/// each batch would hold half: at 16 instead of 32, emoji-tiny's towers run 27 % slower).
#[derive(Default)]
struct BatchFill {
    images: usize,
    texts: usize,
}

impl BatchFill {
    fn add(&mut self, item: &SourceItem) {
        match item {
            Ok(i) if i.image.is_some() => self.images += 1,
            Ok(_) => self.texts += 1,
            Err(_) => {}
        }
    }

    /// Whether a chunk of `len` items with this fill is done: a full batch of pictures or of
    /// texts, or twice a batch of items (bad ones included), which bounds its memory.
    fn full(&self, batch: usize, len: usize) -> bool {
        self.images >= batch || self.texts >= batch || len >= 2 * batch
    }
}

/// Refuses an item whose id is invalid or was seen earlier in the input.
pub fn check_id(item: Item, seen: &mut HashSet<u128>) -> SourceItem {
    if let Err(e) = DocId::new(item.id.clone()) {
        return Err(BadItem::new(Some(item.id), reason::BAD_ID, e.to_string()));
    }
    if !seen.insert(crate::progress::id_digest(&item.id)) {
        return Err(BadItem::new(
            Some(item.id.clone()),
            reason::DUPLICATE_ID,
            format!("id {:?} appears earlier in this input", item.id),
        ));
    }
    Ok(item)
}

/// Reads and decodes each chunk's images in parallel: the encoder's input and, with
/// `thumbnails`, the thumbnail from the same decode.
fn decode_stage(
    encoders: &Encoders,
    dense: Option<&dyn DenseEncoder>,
    thumbnails: bool,
    rx: Receiver<Chunk<SourceItem>>,
    tx: SyncSender<Result<Chunk<Result<Ready, BadItem>>>>,
) {
    for chunk in rx {
        let needs_image = chunk
            .items
            .iter()
            .any(|(_, i)| i.as_ref().is_ok_and(|i| i.image.is_some()));
        let processors = match (needs_image, image_processors(encoders, dense)) {
            (false, _) => Processors::default(),
            (true, Ok(p)) => p,
            (true, Err(e)) => {
                let _ = tx.send(Err(PipelineError::Model(e)));
                return;
            }
        };
        let started = std::time::Instant::now();
        let items: Vec<(u64, Result<Ready, BadItem>)> = chunk
            .items
            .into_par_iter()
            .map(|(pos, item)| {
                let ready = item.and_then(|item| {
                    let decoded = match &item.image {
                        Some(r) => decode(&processors, &item.id, r, thumbnails)?,
                        None => Decoded::default(),
                    };
                    Ok(Ready {
                        item,
                        image: decoded.sparse,
                        dense_image: decoded.dense,
                        thumbnail: decoded.thumbnail,
                    })
                });
                (pos, ready)
            })
            .collect();
        if tx
            .send(Ok(Chunk {
                decode_seconds: started.elapsed().as_secs_f64(),
                ..Chunk::new(items, chunk.end, chunk.last)
            }))
            .is_err()
        {
            return;
        }
    }
}

/// How a job's images are preprocessed: for the sparse image encoder, and for the dense one
/// where it needs other pixels.
#[derive(Default)]
struct Processors<'a> {
    sparse: Option<&'a ImageProcessor>,
    dense: Option<&'a ImageProcessor>,
}

/// The processors of a job with images: an error when no encoder reads them.
fn image_processors<'a>(
    encoders: &'a Encoders,
    dense: Option<&'a dyn DenseEncoder>,
) -> lexlip_model::Result<Processors<'a>> {
    let sparse = match (encoders.image(), dense) {
        (Ok(e), _) => Some(e.processor()),
        // A dense-only model: its dense encoder reads the images alone.
        (Err(_), Some(_)) if encoders.term_space().is_none() => None,
        (Err(e), _) => return Err(e),
    };
    let dense = dense
        .map(|d| d.image_processor())
        .filter(|d| sparse != Some(*d));
    Ok(Processors { sparse, dense })
}

/// What one read and one decode of an item's image give.
#[derive(Default)]
struct Decoded {
    sparse: Option<PreprocessedImage>,
    dense: Option<PreprocessedImage>,
    thumbnail: Option<Vec<u8>>,
}

/// The encoders' inputs and, with `thumbnail`, the thumbnail, from one read and one decode. An
/// image that decodes always has a thumbnail; should encoding one fail all the same, the item is
/// indexed without it rather than skipped.
fn decode(
    processors: &Processors,
    id: &str,
    image: &ImageRef,
    thumbnail: bool,
) -> std::result::Result<Decoded, BadItem> {
    decode_with(id, image, |bytes, name| {
        let rgb = lexlip_model::image::decode_rgb(bytes, name)?;
        let thumbnail = match thumbnail.then(|| lexlip_model::thumbnail::of(bytes, &rgb, name)) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                tracing::warn!(id, error = %e, "indexed without a thumbnail");
                None
            }
            None => None,
        };
        let sparse = processors.sparse.map(|p| p.preprocess_rgb(&rgb, name));
        let dense = processors.dense.map(|p| p.preprocess_rgb(&rgb, name));
        Ok(Decoded {
            sparse: sparse.transpose()?,
            dense: dense.transpose()?,
            thumbnail,
        })
    })
}

/// Reads an item's image and preprocesses it with `preprocess` (bytes, name for errors): a file
/// that cannot be read is a missing file, an image that does not decode a corrupt one.
pub fn decode_with<T>(
    id: &str,
    image: &ImageRef,
    preprocess: impl Fn(&[u8], &str) -> lexlip_model::Result<T>,
) -> std::result::Result<T, BadItem> {
    let bytes = image.read().map_err(|e| {
        BadItem::new(
            Some(id.to_string()),
            reason::MISSING_FILE,
            format!("{}: {e}", image.name()),
        )
    })?;
    preprocess(&bytes, &image.name())
        .map_err(|e| BadItem::new(Some(id.to_string()), reason::CORRUPT_IMAGE, e.to_string()))
}

/// Encodes a batch; if the batch fails, each item alone so one bad item fails only itself.
pub fn encode_batch<T, V>(
    inputs: &[T],
    f: impl Fn(&[T]) -> lexlip_model::Result<Vec<V>>,
) -> Vec<std::result::Result<V, String>> {
    match f(inputs) {
        Ok(v) if v.len() == inputs.len() => v.into_iter().map(Ok).collect(),
        _ => inputs
            .chunks(1)
            .map(|one| match f(one) {
                Ok(mut v) if v.len() == 1 => Ok(v.remove(0)),
                Ok(_) => Err("the encoder returned no vector".to_string()),
                Err(e) => Err(e.to_string()),
            })
            .collect(),
    }
}

/// Encodes each chunk's images and texts (one batch each), then quantizes (scale, top-K) for
/// the collection. Runs on its own thread so that the writer works on the previous chunk.
fn encode_stage(
    encoders: &Encoders,
    dense: Option<&dyn DenseEncoder>,
    collection: &Collection,
    rx: Receiver<Result<Chunk<Result<Ready, BadItem>>>>,
    tx: SyncSender<Result<Chunk<Prepared>>>,
) {
    for chunk in rx {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let started = std::time::Instant::now();
        let items = match encode_chunk(encoders, dense, collection, chunk.items) {
            Ok(items) => items,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let out = Chunk {
            decode_seconds: chunk.decode_seconds,
            encode_seconds: started.elapsed().as_secs_f64(),
            ..Chunk::new(items, chunk.end, chunk.last)
        };
        if tx.send(Ok(out)).is_err() {
            return;
        }
    }
}

/// One item's vectors as the encoders returned them (an error message for an item that failed).
#[derive(Default)]
struct Encoded {
    sparse: Option<std::result::Result<SparseVector, String>>,
    dense: Option<std::result::Result<DenseVector, String>>,
}

fn encode_chunk(
    encoders: &Encoders,
    dense: Option<&dyn DenseEncoder>,
    collection: &Collection,
    mut items: Vec<(u64, Result<Ready, BadItem>)>,
) -> Result<Vec<(u64, Prepared)>> {
    // A dense-only model has no lexicons: its documents are stored with empty impacts.
    let sparse = encoders.term_space().is_some();
    let mut image_slots = Vec::new();
    let mut image_batch: Vec<PreprocessedImage> = Vec::new();
    let mut dense_batch: Vec<PreprocessedImage> = Vec::new();
    for (i, (_, r)) in items.iter_mut().enumerate() {
        let Ok(ready) = r else { continue };
        if ready.image.is_none() && ready.dense_image.is_none() {
            continue;
        }
        image_slots.push(i);
        image_batch.extend(ready.image.take());
        dense_batch.extend(ready.dense_image.take());
    }
    let texts: Vec<(usize, &str)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, (_, r))| match r {
            Ok(ready) if ready.item.image.is_none() => ready.item.text.as_deref().map(|t| (i, t)),
            _ => None,
        })
        .collect();
    let mut encoded: Vec<Encoded> = (0..items.len()).map(|_| Encoded::default()).collect();
    if !image_slots.is_empty() {
        if sparse {
            let enc = encoders.image()?;
            let results = encode_batch(&image_batch, |b| {
                let (lexicons, embeddings) = enc.encode_with_dense(b)?;
                let embeddings = embeddings.map_or_else(
                    || vec![None; b.len()],
                    |e| e.into_iter().map(Some).collect(),
                );
                Ok(lexicons.into_iter().zip(embeddings).collect())
            });
            for (&i, r) in image_slots.iter().zip(results) {
                match r {
                    Ok((lexicon, embedding)) => {
                        encoded[i].sparse = Some(Ok(lexicon));
                        // Lexicon heads embed the image in the same pass.
                        encoded[i].dense = embedding.filter(|_| dense.is_some()).map(Ok);
                    }
                    Err(e) => encoded[i].sparse = Some(Err(e)),
                }
            }
        }
        if let Some(dense) = dense {
            let inputs = match dense_batch.is_empty() {
                true => &image_batch,
                false => &dense_batch,
            };
            // The images still to embed, by their place in the batch.
            let todo: Vec<usize> = (0..image_slots.len())
                .filter(|&j| {
                    let e = &encoded[image_slots[j]];
                    e.dense.is_none() && !matches!(e.sparse, Some(Err(_)))
                })
                .collect();
            let results = if todo.len() == inputs.len() {
                encode_batch(inputs, |b| dense.encode_images(b))
            } else {
                let some: Vec<PreprocessedImage> =
                    todo.iter().map(|&j| inputs[j].clone()).collect();
                encode_batch(&some, |b| dense.encode_images(b))
            };
            for (&j, r) in todo.iter().zip(results) {
                encoded[image_slots[j]].dense = Some(r);
            }
        }
    }
    if !texts.is_empty() {
        let batch: Vec<&str> = texts.iter().map(|(_, t)| *t).collect();
        if sparse {
            let enc = encoders.text()?;
            for ((i, _), v) in texts.iter().zip(encode_batch(&batch, |b| enc.encode(b))) {
                encoded[*i].sparse = Some(v);
            }
        }
        if let Some(dense) = dense {
            for ((i, _), v) in texts
                .iter()
                .zip(encode_batch(&batch, |b| dense.encode_texts(b)))
            {
                encoded[*i].dense = Some(v);
            }
        }
    }
    Ok(items
        .into_iter()
        .zip(encoded)
        .map(|((pos, ready), e)| {
            let prepared = ready.and_then(|r| {
                let id = r.item.id.clone();
                let failed =
                    |message: String| BadItem::new(Some(id.clone()), reason::ENCODE, message);
                let nothing = || failed("nothing to encode".to_string());
                let lexicon = match e.sparse {
                    Some(v) => v.map_err(failed)?,
                    None if sparse => return Err(nothing()),
                    None => SparseVector::default(),
                };
                let embedding = match e.dense {
                    Some(v) => Some(v.map_err(failed)?),
                    None if dense.is_some() => return Err(nothing()),
                    None => None,
                };
                let impacts = collection
                    .quantizer()
                    .document(VectorInput::Weights(lexicon))
                    .map_err(|e| BadItem::new(Some(id.clone()), reason::VECTOR, e.to_string()))?;
                Ok(PreparedDoc {
                    doc: document(r.item)?,
                    impacts,
                    dense: embedding,
                    thumbnail: r.thumbnail,
                })
            });
            (pos, prepared)
        })
        .collect())
}

/// The stored fields of an item (its id was checked by the reader).
pub fn document(item: Item) -> std::result::Result<Document, BadItem> {
    let id = DocId::new(item.id.clone())
        .map_err(|e| BadItem::new(Some(item.id.clone()), reason::BAD_ID, e.to_string()))?;
    let mut doc = Document::new(id, item.modality);
    doc.text = item.text;
    doc.uri = item.uri;
    doc.metadata = item.metadata;
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::BatchFill;
    use lexlip_corpus::{BadItem, ImageRef, Item, SourceItem};

    /// Where a chunk of `items` ends with batches of `batch`: the number of items it holds.
    fn chunk_len(items: &[SourceItem], batch: usize) -> usize {
        let mut fill = BatchFill::default();
        for (i, item) in items.iter().enumerate() {
            fill.add(item);
            if fill.full(batch, i + 1) {
                return i + 1;
            }
        }
        items.len()
    }

    fn picture(i: usize) -> SourceItem {
        Ok(Item::image(
            format!("p{i}"),
            ImageRef::File(format!("{i}.png").into()),
        ))
    }

    fn caption(i: usize) -> SourceItem {
        Ok(Item::text(
            format!("p{i}#text"),
            format!("p{i}"),
            format!("caption {i}"),
        ))
    }

    /// Pictures with their captions fill both batches: a chunk holds a full batch of each (cut
    /// at a batch of items, each encoder would get half); one kind alone fills at a batch; bad
    /// items end a chunk at twice a batch.
    #[test]
    fn a_chunk_ends_when_a_batch_of_one_kind_is_full() {
        let mixed: Vec<SourceItem> = (0..100).flat_map(|i| [picture(i), caption(i)]).collect();
        assert_eq!(chunk_len(&mixed, 8), 15);
        let pictures: Vec<SourceItem> = (0..100).map(picture).collect();
        assert_eq!(chunk_len(&pictures, 8), 8);
        let bad: Vec<SourceItem> = (0..100)
            .map(|i| Err(BadItem::new(Some(format!("b{i}")), "test", "bad")))
            .collect();
        assert_eq!(chunk_len(&bad, 8), 16);
    }
}
