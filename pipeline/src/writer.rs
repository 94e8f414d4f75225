//! The last stage of every batch job, corpus or precomputed vectors: add prepared documents to
//! the collection in input order, skip and report bad items, commit every `commit_every`
//! documents and save the resume point after each commit.
//!
//! A job starts with [`resume`] (is it already done? where does it continue?) and ends with
//! [`write`], fed by whatever stages prepare its documents.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;

use lexlip_index::{Collection, DocExtras};
use lexlip_proto::{DenseVector, Document, QuantizedVector};

use crate::error::{PipelineError, Result};
use crate::job::{Observer, Options, Summary};
use crate::progress::{Counts, Progress};
use lexlip_corpus::item::BadItem;

/// A document ready to add: its stored fields, its impacts, its dense vector (collections that
/// keep them) and the thumbnail of its image.
pub(crate) struct PreparedDoc {
    pub doc: Document,
    pub impacts: QuantizedVector,
    pub dense: Option<DenseVector>,
    pub thumbnail: Option<Vec<u8>>,
}

impl PreparedDoc {
    pub fn new(doc: Document, impacts: QuantizedVector) -> Self {
        Self {
            doc,
            impacts,
            dense: None,
            thumbnail: None,
        }
    }
}

/// A document ready to add, or why its item is skipped.
pub(crate) type Prepared = std::result::Result<PreparedDoc, BadItem>;

/// Consecutive items of the input on their way to the writer.
pub(crate) struct Chunk<T> {
    /// Items with their input positions (item numbers, or line numbers for vectors).
    pub items: Vec<(u64, T)>,
    /// Input position after the last item read into this chunk.
    pub end: u64,
    /// Bytes of the (inflated) input read up to `end`, where the reader counts them.
    pub bytes: Option<u64>,
    /// Seconds the decode stage spent on this chunk.
    pub decode_seconds: f64,
    /// Seconds the encode stage spent on this chunk.
    pub encode_seconds: f64,
    /// The last chunk of the input (not sent when the reader was stopped).
    pub last: bool,
}

impl<T> Chunk<T> {
    pub fn new(items: Vec<(u64, T)>, end: u64, last: bool) -> Self {
        Self {
            items,
            end,
            bytes: None,
            decode_seconds: 0.0,
            encode_seconds: 0.0,
            last,
        }
    }
}

/// Where a job starts.
pub(crate) enum Resume {
    /// An earlier run indexed the whole input: nothing to do (its counts are the summary).
    Complete(Summary),
    /// Continue after the saved point (None: from the start).
    From(Option<Progress>),
}

/// Reads the resume point of the job with fingerprint `fp` and rewinds the observer to it.
pub(crate) fn resume(
    collection: &Collection,
    options: &Options,
    fp: &str,
    observer: &mut dyn Observer,
) -> Result<Resume> {
    let saved = match options.restart {
        true => None,
        false => Progress::load(collection.dir(), fp)?,
    };
    if saved.is_none() && !options.restart && Progress::saved_in(collection.dir()) {
        observer.notice(&format!(
            "{}: the saved progress belongs to another run (the input files, model, options or \
             shard differ), so this input is indexed from the start; ids already in the \
             collection are replaced",
            crate::progress::path(collection.dir()).display()
        ));
    }
    if let Some(p) = saved.as_ref().filter(|p| p.complete) {
        return Ok(Resume::Complete(Summary {
            read: p.counts.read,
            indexed: p.counts.indexed,
            skipped: p.counts.skipped.clone(),
            already_complete: true,
            resumed_from: p.position,
            ..Summary::default()
        }));
    }
    observer.rewind(saved.as_ref().map_or(0, |p| p.mark))?;
    Ok(Resume::From(saved))
}

/// Adds the chunks of `rx` to `collection` until the input ends or a stop is requested.
/// `unit` names input positions in errors ("item", "line").
pub(crate) fn write(
    collection: &Collection,
    options: &Options,
    fp: &str,
    saved: Option<Progress>,
    unit: &'static str,
    rx: Receiver<Result<Chunk<Prepared>>>,
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
        for (pos, prepared) in chunk.items {
            counts.read += 1;
            summary.processed += 1;
            match prepared {
                Ok(p) => {
                    let extras = DocExtras {
                        dense: p.dense,
                        thumbnail: p.thumbnail,
                    };
                    collection.add_with(p.doc, p.impacts, extras)?;
                    counts.indexed += 1;
                    since_commit += 1;
                }
                Err(bad) if options.strict => {
                    return Err(PipelineError::Strict {
                        at: match &bad.id {
                            Some(id) => format!("{unit} {pos} ({id})"),
                            None => format!("{unit} {pos}"),
                        },
                        reason: bad.reason,
                        message: bad.message,
                    });
                }
                Err(bad) => {
                    counts.skip(bad.reason);
                    observer.skipped(pos, &bad)?;
                }
            }
        }
        position = chunk.end;
        if let Some(bytes) = chunk.bytes {
            observer.input_bytes(bytes);
        }
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
fn commit(
    collection: &Collection,
    fp: &str,
    position: u64,
    complete: bool,
    counts: &Counts,
    observer: &mut dyn Observer,
) -> Result<()> {
    let mark = observer.checkpoint()?;
    collection.commit().map_err(|e| {
        if e.is_storage_full() {
            // tantivy's error names a temporary file at best: say which disk, and what is kept.
            PipelineError::Input(format!(
                "the disk holding {} is full; the batch being written was not committed (the \
                 collection keeps its last commit). Free space and run the same command to \
                 resume: {e}",
                collection.dir().display()
            ))
        } else {
            e.into()
        }
    })?;
    Progress {
        fingerprint: fp.to_string(),
        position,
        complete,
        counts: counts.clone(),
        mark,
    }
    .save(collection.dir())
}
