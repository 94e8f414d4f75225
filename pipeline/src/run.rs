//! The staged pipeline:
//!
//! ```text
//! reader ──▶ decode/preprocess (rayon) ──▶ encode (batched) + quantize ──▶ write + commit
//! ```
//!
//! Each stage runs on its own thread (the writer on the caller's), joined by bounded channels of
//! chunks (one encoder batch each), so memory stays flat whatever the corpus size and the
//! slowest stage sets the pace. Items keep their input order end to end: after each commit the position
//! reached is saved ([`crate::progress`]) and a re-run resumes from it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use lexlip_index::{Collection, VectorInput};
use lexlip_model::{Encoders, PreprocessedImage};
use lexlip_proto::{DocId, Document, QuantizedVector, SparseVector};
use rayon::prelude::*;

use crate::error::{PipelineError, Result};
use crate::item::{BadItem, ImageRef, Item, SourceItem, reason};
use crate::progress::{Counts, Progress, fingerprint};
use crate::shard::Shard;
use crate::sources::Input;

/// Chunks in flight between two stages.
const CHANNEL_CHUNKS: usize = 4;

#[derive(Debug, Clone)]
pub struct Options {
    /// Items per encoder batch (and per chunk between stages).
    pub batch_size: usize,
    /// Commit (and save the resume position) after at least this many documents.
    pub commit_every: usize,
    pub shard: Option<Shard>,
    /// Stop at the first bad item instead of skipping it.
    pub strict: bool,
    /// Anything else that must match for a re-run to resume (e.g. the model path).
    pub context: String,
    /// Ignore the saved progress of an earlier run and start from the beginning.
    pub restart: bool,
    /// Set (e.g. on Ctrl-C) to stop after the chunk being written: it is committed, the chunks
    /// still queued are dropped, and a re-run resumes with them.
    pub stop: Option<Arc<AtomicBool>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            batch_size: 32,
            commit_every: 10_000,
            shard: None,
            strict: false,
            context: String::new(),
            restart: false,
            stop: None,
        }
    }
}

/// What the job did. The counts cover the whole job (within the shard): a resumed run adds to
/// those saved with the commit it resumed from, so its summary equals a clean run's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Items read.
    pub read: u64,
    pub indexed: u64,
    /// Skipped items by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Items this invocation processed (`read` less the resumed prefix).
    pub processed: u64,
    /// Input position this run started from (0 for a fresh run).
    pub resumed_from: u64,
    /// The input had already been indexed completely by an earlier run (nothing was done).
    pub already_complete: bool,
    /// Stopped by [`Options::stop`] before the end of the input (what was read is committed).
    pub interrupted: bool,
    /// Busy time of each stage (they overlap: the slowest one sets the pace).
    pub stage_seconds: StageSeconds,
}

/// Seconds each stage spent working.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StageSeconds {
    /// Reading files and decoding/resizing images (wall time of the parallel decode).
    pub decode: f64,
    /// Running the encoders and quantizing their output.
    pub encode: f64,
    /// Adding to the collection and committing.
    pub write: f64,
}

/// Receives skipped items and progress (errors file, progress bar).
pub trait Observer {
    fn skipped(&mut self, position: u64, bad: &BadItem) -> Result<()>;
    fn progress(&mut self, read: u64, indexed: u64);
    /// Called right before each commit: make what was reported durable and return a mark saved
    /// with the commit (e.g. the errors file's length, see [`crate::ErrorsFile`]).
    fn checkpoint(&mut self) -> Result<u64> {
        Ok(0)
    }
    /// Called once before anything is reported, with the mark saved by the commit the run
    /// resumes from (0 for a fresh run): forget what was reported after it.
    fn rewind(&mut self, _mark: u64) -> Result<()> {
        Ok(())
    }
}

struct Chunk<T> {
    items: Vec<(u64, T)>,
    /// Input position after the last item read into this chunk.
    end: u64,
    /// Seconds the decode stage spent on this chunk.
    decode_seconds: f64,
    /// Seconds the encode stage spent on this chunk.
    encode_seconds: f64,
    /// The last chunk of the input (not sent when the reader was stopped).
    last: bool,
}

/// An item ready to encode.
struct Ready {
    item: Item,
    image: Option<PreprocessedImage>,
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
pub fn run(
    input: &Input,
    encoders: &Encoders,
    collection: &Collection,
    options: &Options,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let fp = run_fingerprint(input, options)?;
    let saved = match options.restart {
        true => None,
        false => Progress::load(collection.dir(), &fp)?,
    };
    if let Some(p) = saved.as_ref().filter(|p| p.complete) {
        return Ok(Summary {
            read: p.counts.read,
            indexed: p.counts.indexed,
            skipped: p.counts.skipped.clone(),
            already_complete: true,
            resumed_from: p.position,
            ..Summary::default()
        });
    }
    let source = input.open()?;
    observer.rewind(saved.as_ref().map_or(0, |p| p.mark))?;
    let batch = options.batch_size.max(1);
    let shard = options.shard;
    let stop = options.stop.clone();

    std::thread::scope(|scope| -> Result<Summary> {
        let (read_tx, read_rx) = sync_channel::<Chunk<SourceItem>>(CHANNEL_CHUNKS);
        let (ready_tx, ready_rx) =
            sync_channel::<Result<Chunk<Result<Ready, BadItem>>>>(CHANNEL_CHUNKS);
        let (encoded_tx, encoded_rx) =
            sync_channel::<Result<Chunk<Result<Encoded, BadItem>>>>(CHANNEL_CHUNKS);
        let resume = saved.as_ref().map_or(0, |p| p.position);
        scope.spawn(move || read_stage(source, resume, shard, batch, stop, read_tx));
        scope.spawn(move || decode_stage(encoders, read_rx, ready_tx));
        scope.spawn(move || encode_stage(encoders, collection, ready_rx, encoded_tx));
        let summary = write_stage(collection, options, &fp, saved, encoded_rx, observer);
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
            let _ = tx.send(Chunk {
                items: chunk,
                end: position,
                decode_seconds: 0.0,
                encode_seconds: 0.0,
                last: false,
            });
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
            if tx
                .send(Chunk {
                    items,
                    end: position,
                    decode_seconds: 0.0,
                    encode_seconds: 0.0,
                    last: false,
                })
                .is_err()
            {
                return;
            }
        }
    }
    let _ = tx.send(Chunk {
        items: chunk,
        end: position.max(resume),
        decode_seconds: 0.0,
        encode_seconds: 0.0,
        last: true,
    });
}

fn check_id(item: Item, seen: &mut HashSet<u128>) -> SourceItem {
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

fn decode_stage(
    encoders: &Encoders,
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
                    let image = match (&item.image, image_encoder) {
                        (Some(r), Some(enc)) => Some(decode(enc, &item.id, r)?),
                        _ => None,
                    };
                    Ok(Ready { item, image })
                });
                (pos, ready)
            })
            .collect();
        if tx
            .send(Ok(Chunk {
                items,
                end: chunk.end,
                decode_seconds: started.elapsed().as_secs_f64(),
                encode_seconds: 0.0,
                last: chunk.last,
            }))
            .is_err()
        {
            return;
        }
    }
}

fn decode(
    enc: &lexlip_model::ImageEncoder,
    id: &str,
    image: &ImageRef,
) -> std::result::Result<PreprocessedImage, BadItem> {
    let bytes = match image {
        ImageRef::File(path) => std::fs::read(path).map_err(|e| {
            BadItem::new(
                Some(id.to_string()),
                reason::MISSING_FILE,
                format!("{}: {e}", path.display()),
            )
        })?,
        ImageRef::Bytes { bytes, .. } => bytes.to_vec(),
    };
    enc.preprocess_named(&bytes, &image.name())
        .map_err(|e| BadItem::new(Some(id.to_string()), reason::CORRUPT_IMAGE, e.to_string()))
}

/// Encodes a batch; if the batch fails, each item alone so one bad item fails only itself.
fn encode_batch<T>(
    inputs: &[T],
    f: impl Fn(&[T]) -> lexlip_model::Result<Vec<SparseVector>>,
) -> Vec<std::result::Result<SparseVector, String>> {
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

/// An item encoded and quantized, ready to write.
struct Encoded {
    item: Item,
    impacts: QuantizedVector,
}

/// Encodes each chunk's images and texts (one batch each), then quantizes (scale, top-K) for
/// the collection. Runs on its own thread so that the writer works on the previous chunk.
fn encode_stage(
    encoders: &Encoders,
    collection: &Collection,
    rx: Receiver<Result<Chunk<Result<Ready, BadItem>>>>,
    tx: SyncSender<Result<Chunk<Result<Encoded, BadItem>>>>,
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
            items,
            end: chunk.end,
            decode_seconds: chunk.decode_seconds,
            encode_seconds: started.elapsed().as_secs_f64(),
            last: chunk.last,
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
) -> Result<Vec<(u64, Result<Encoded, BadItem>)>> {
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
                    .prepare_vector(VectorInput::Weights(v))
                    .map_err(|e| BadItem::new(Some(id), reason::VECTOR, e.to_string()))?;
                Ok(Encoded {
                    item: r.item,
                    impacts,
                })
            });
            (pos, encoded)
        })
        .collect())
}

fn write_stage(
    collection: &Collection,
    options: &Options,
    fp: &str,
    saved: Option<Progress>,
    rx: Receiver<Result<Chunk<Result<Encoded, BadItem>>>>,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let resume = saved.as_ref().map_or(0, |p| p.position);
    let mut counts = saved.map(|p| p.counts).unwrap_or_default();
    let mut summary = Summary {
        resumed_from: resume,
        ..Summary::default()
    };
    let mut since_commit = 0usize;
    let mut position = resume;
    let mut reached_end = false;
    if resume > 0 {
        observer.progress(counts.read, counts.indexed);
    }
    let stopped = || {
        options
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    };
    for chunk in rx {
        // A stop request leaves the chunks still queued (a re-run resumes with them).
        if stopped() {
            break;
        }
        let chunk = chunk?;
        reached_end = chunk.last;
        summary.stage_seconds.decode += chunk.decode_seconds;
        summary.stage_seconds.encode += chunk.encode_seconds;
        let write_start = std::time::Instant::now();
        for (pos, encoded) in chunk.items {
            counts.read += 1;
            summary.processed += 1;
            match encoded {
                Ok(Encoded { item, impacts }) => {
                    collection.add(document(item)?, impacts)?;
                    counts.indexed += 1;
                    since_commit += 1;
                }
                Err(bad) => {
                    if options.strict {
                        return Err(PipelineError::Strict {
                            position: pos,
                            id: bad.id.clone().unwrap_or_default(),
                            reason: bad.reason,
                            message: bad.message,
                        });
                    }
                    counts.skip(bad.reason);
                    observer.skipped(pos, &bad)?;
                }
            }
        }
        position = chunk.end;
        observer.progress(counts.read, counts.indexed);
        if since_commit >= options.commit_every {
            commit(collection, fp, position, false, &counts, observer)?;
            since_commit = 0;
        }
        summary.stage_seconds.write += write_start.elapsed().as_secs_f64();
    }
    let write_start = std::time::Instant::now();
    commit(collection, fp, position, reached_end, &counts, observer)?;
    summary.stage_seconds.write += write_start.elapsed().as_secs_f64();
    summary.interrupted = !reached_end;
    summary.read = counts.read;
    summary.indexed = counts.indexed;
    summary.skipped = counts.skipped;
    Ok(summary)
}

/// Commits the collection, then saves the resume point (input position, counts, the observer's
/// mark). A crash between the two resumes from the previous point: the documents in between
/// are added again and replace themselves.
pub fn commit(
    collection: &Collection,
    fp: &str,
    position: u64,
    complete: bool,
    counts: &Counts,
    observer: &mut dyn Observer,
) -> Result<()> {
    let mark = observer.checkpoint()?;
    crate::progress::commit_and_save(collection, fp, position, complete, counts, mark)
}

fn document(item: Item) -> Result<Document> {
    let id = DocId::new(item.id).map_err(|e| PipelineError::Stage(e.to_string()))?;
    let mut doc = Document::new(id, item.modality);
    doc.text = item.text;
    doc.uri = item.uri;
    doc.metadata = item.metadata;
    Ok(doc)
}
