//! Corpora (captions and images) through the staged pipeline:
//!
//! ```text
//! reader ──▶ decode/preprocess (rayon) ──▶ encode (batched) + quantize ──▶ write + commit
//! ```
//!
//! The last stage is the one every job shares ([`crate::writer`]).
//!
//! Each stage runs on its own thread (the writer on the caller's), joined by bounded channels of
//! chunks (one encoder batch each), so memory stays flat whatever the corpus size and the
//! slowest stage sets the pace. Items keep their input order end to end: after each commit the position
//! reached is saved ([`crate::progress`]) and a re-run resumes from it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use lexlip_index::Collection;
use lexlip_model::{Encoders, PreprocessedImage};
use lexlip_proto::{DocId, Document, SparseVector, VectorInput};
use rayon::prelude::*;

use crate::error::{PipelineError, Result};
use crate::item::{BadItem, ImageRef, Item, SourceItem, reason};
use crate::job::{Observer, Options, Summary};
use crate::progress::fingerprint;
use crate::shard::Shard;
use crate::sources::Input;
use crate::writer::{Chunk, Prepared, PreparedDoc, Resume};

/// Chunks in flight between two stages.
const CHANNEL_CHUNKS: usize = 4;

/// An item ready to encode.
struct Ready {
    item: Item,
    image: Option<PreprocessedImage>,
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

    std::thread::scope(|scope| -> Result<Summary> {
        let (read_tx, read_rx) = sync_channel::<Chunk<SourceItem>>(CHANNEL_CHUNKS);
        let (ready_tx, ready_rx) =
            sync_channel::<Result<Chunk<Result<Ready, BadItem>>>>(CHANNEL_CHUNKS);
        let (encoded_tx, encoded_rx) = sync_channel::<Result<Chunk<Prepared>>>(CHANNEL_CHUNKS);
        let resume = saved.as_ref().map_or(0, |p| p.position);
        scope.spawn(move || read_stage(source, resume, shard, batch, stop, read_tx));
        scope.spawn(move || decode_stage(encoders, thumbnails, read_rx, ready_tx));
        scope.spawn(move || encode_stage(encoders, collection, ready_rx, encoded_tx));
        let summary = crate::writer::write(
            collection, options, &fp, saved, "item", encoded_rx, observer,
        );
        // On an early error the receivers drop here, which unblocks and ends the other stages.
        summary
    })
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
    let mut position = 0u64;
    let stopped = || stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
    for item in source {
        if position >= resume && stopped() {
            let _ = tx.send(Chunk::new(chunk, position, false));
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
        chunk.push((here, item));
        if chunk.len() >= batch {
            let items = std::mem::replace(&mut chunk, Vec::with_capacity(batch));
            if tx.send(Chunk::new(items, position, false)).is_err() {
                return;
            }
        }
    }
    let _ = tx.send(Chunk::new(chunk, position.max(resume), true));
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
    thumbnails: bool,
    rx: Receiver<Chunk<SourceItem>>,
    tx: SyncSender<Result<Chunk<Result<Ready, BadItem>>>>,
) {
    for chunk in rx {
        let needs_image = chunk
            .items
            .iter()
            .any(|(_, i)| i.as_ref().is_ok_and(|i| i.image.is_some()));
        let image_encoder = match (needs_image, encoders.image()) {
            (false, _) => None,
            (true, Ok(e)) => Some(e),
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
                    let (image, thumbnail) = match (&item.image, image_encoder) {
                        (Some(r), Some(enc)) => {
                            let (image, thumbnail) = decode(enc, &item.id, r, thumbnails)?;
                            (Some(image), thumbnail)
                        }
                        _ => (None, None),
                    };
                    Ok(Ready {
                        item,
                        image,
                        thumbnail,
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

/// The encoder's input and, with `thumbnail`, the thumbnail, from one read and one decode. An
/// image that decodes always has a thumbnail; should encoding one fail all the same, the item is
/// indexed without it rather than skipped.
fn decode(
    enc: &lexlip_model::ImageEncoder,
    id: &str,
    image: &ImageRef,
    thumbnail: bool,
) -> std::result::Result<(PreprocessedImage, Option<Vec<u8>>), BadItem> {
    decode_with(id, image, |bytes, name| {
        let rgb = lexlip_model::image::decode_rgb(bytes, name)?;
        let thumbnail = match thumbnail.then(|| lexlip_model::thumbnail::encode(&rgb, name)) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                tracing::warn!(id, error = %e, "indexed without a thumbnail");
                None
            }
            None => None,
        };
        Ok((enc.processor().preprocess_rgb(&rgb, name)?, thumbnail))
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
        let items = match encode_chunk(encoders, collection, chunk.items) {
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

fn encode_chunk(
    encoders: &Encoders,
    collection: &Collection,
    mut items: Vec<(u64, Result<Ready, BadItem>)>,
) -> Result<Vec<(u64, Prepared)>> {
    let mut image_slots = Vec::new();
    let mut image_batch: Vec<PreprocessedImage> = Vec::new();
    for (i, (_, r)) in items.iter_mut().enumerate() {
        if let Some(img) = r.as_mut().ok().and_then(|ready| ready.image.take()) {
            image_slots.push(i);
            image_batch.push(img);
        }
    }
    let texts: Vec<(usize, &str)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, (_, r))| match r {
            Ok(ready) if ready.item.image.is_none() => ready.item.text.as_deref().map(|t| (i, t)),
            _ => None,
        })
        .collect();
    let mut vectors: Vec<Option<std::result::Result<SparseVector, String>>> =
        (0..items.len()).map(|_| None).collect();
    if !image_batch.is_empty() {
        let enc = encoders.image()?;
        for (i, v) in image_slots
            .iter()
            .zip(encode_batch(&image_batch, |b| enc.encode(b)))
        {
            vectors[*i] = Some(v);
        }
    }
    if !texts.is_empty() {
        let enc = encoders.text()?;
        let batch: Vec<&str> = texts.iter().map(|(_, t)| *t).collect();
        for ((i, _), v) in texts.iter().zip(encode_batch(&batch, |b| enc.encode(b))) {
            vectors[*i] = Some(v);
        }
    }
    Ok(items
        .into_iter()
        .zip(vectors)
        .map(|((pos, ready), vector)| {
            let encoded = ready.and_then(|r| {
                let id = r.item.id.clone();
                let v = match vector {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => return Err(BadItem::new(Some(id), reason::ENCODE, e)),
                    None => {
                        return Err(BadItem::new(Some(id), reason::ENCODE, "nothing to encode"));
                    }
                };
                let impacts = collection
                    .quantizer()
                    .document(VectorInput::Weights(v))
                    .map_err(|e| BadItem::new(Some(id.clone()), reason::VECTOR, e.to_string()))?;
                Ok(PreparedDoc {
                    doc: document(r.item)?,
                    impacts,
                    thumbnail: r.thumbnail,
                })
            });
            (pos, encoded)
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
