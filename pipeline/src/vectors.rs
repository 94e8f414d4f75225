//! Precomputed vectors (Anserini `JsonVectorCollection` JSONL, see
//! [`lexlip_corpus::sources::vectors`]) into a collection: a reader thread reads the next chunk of lines
//! and parses and quantizes it in parallel (rayon) while the shared writer ([`crate::writer`])
//! adds the current one. Positions are line numbers: a bad line is reported with its number,
//! and a resumed run continues after the last committed line.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};

use lexlip_index::Collection;
use lexlip_proto::Modality;
use rayon::prelude::*;

use crate::error::{PipelineError, Result};
use crate::job::{Observer, Options, Summary};
use crate::progress::fingerprint;
use crate::writer::{Chunk, Prepared, PreparedDoc, Resume};
use lexlip_corpus::item::BadItem;
use lexlip_corpus::sources::Input;
use lexlip_corpus::sources::vectors::{LineError, open_lines, parse_line};

/// Lines per chunk.
const CHUNK: usize = 20_000;
/// Bytes per chunk: a chunk of long lines (documents with megabytes of `contents`) ends sooner,
/// so the lines read ahead and their parsed copies stay bounded in bytes, not only in lines.
const CHUNK_BYTES: u64 = 32 << 20;

/// A vectors file, opened (so that a missing file is an error before anything is created).
pub struct VectorsFile {
    path: PathBuf,
    lines: Box<dyn BufRead + Send>,
    signature: String,
}

impl VectorsFile {
    pub fn open(path: &Path) -> Result<Self> {
        let lines = open_lines(path)?;
        let signature = Input::Manifest(path.to_path_buf()).signature()?;
        Ok(Self {
            path: path.to_path_buf(),
            lines,
            signature,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size of a plain (not gzip) file, for a progress bar over its bytes.
    pub fn plain_size(&self) -> Option<u64> {
        use std::io::Read;
        let mut magic = [0u8; 2];
        let mut f = std::fs::File::open(&self.path).ok()?;
        let n = f.read(&mut magic).ok()?;
        let gzip = n == 2 && magic == [0x1f, 0x8b];
        (!gzip)
            .then(|| f.metadata().ok().map(|m| m.len()))
            .flatten()
    }
}

/// Indexes every line of `file` into `collection`; lines that name no modality get
/// `modality`. `options.context` names anything else the resume point depends on (e.g. the
/// vocabulary given). Lines of other shards are left out; malformed lines belong to shard 0.
pub fn index_vectors(
    file: VectorsFile,
    modality: Modality,
    collection: &Collection,
    options: &Options,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let fp = fingerprint(&format!(
        "vectors|{}|{:?}|{modality}|{}",
        file.signature, options.shard, options.context
    ));
    let saved = match crate::writer::resume(collection, options, &fp, observer)? {
        Resume::Complete(summary) => return Ok(summary),
        Resume::From(saved) => saved,
    };
    let resume = saved.as_ref().map_or(0, |p| p.position);
    let shard = options.shard;
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<Result<Chunk<Prepared>>>(1);
        scope.spawn(move || read_stage(file, resume, modality, shard, collection, tx));
        crate::writer::write(collection, options, &fp, saved, "line", rx, observer)
    })
}

/// Reads (after the `resume` lines committed earlier), parses and quantizes chunk after chunk.
fn read_stage(
    mut file: VectorsFile,
    resume: u64,
    modality: Modality,
    shard: Option<crate::shard::Shard>,
    collection: &Collection,
    tx: SyncSender<Result<Chunk<Prepared>>>,
) {
    let (mut line_no, mut bytes) = (0u64, 0u64);
    let mut buf = String::new();
    let failed = |e: std::io::Error, path: &Path| Err(PipelineError::io(path, e));
    while line_no < resume {
        buf.clear();
        match file.lines.read_line(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                line_no += 1;
                bytes += n as u64;
            }
            Err(e) => {
                let _ = tx.send(failed(e, &file.path));
                return;
            }
        }
    }
    loop {
        let lines = match read_chunk(&mut file.lines, &mut line_no, &mut bytes) {
            Ok(lines) => lines,
            Err(e) => {
                let _ = tx.send(failed(e, &file.path));
                return;
            }
        };
        let last = lines.is_empty();
        let items = parse_chunk(&lines, collection, modality, shard);
        let chunk = Chunk {
            bytes: Some(bytes),
            ..Chunk::new(items, line_no, last)
        };
        if tx.send(Ok(chunk)).is_err() || last {
            return;
        }
    }
}

/// Up to [`CHUNK`] non-blank lines with their numbers, and about [`CHUNK_BYTES`].
fn read_chunk(
    lines: &mut Box<dyn BufRead + Send>,
    line_no: &mut u64,
    bytes: &mut u64,
) -> std::io::Result<Vec<(u64, String)>> {
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut buf = String::new();
    let start = *bytes;
    while chunk.len() < CHUNK && *bytes - start < CHUNK_BYTES {
        let n = lines.read_line(&mut buf)?;
        if n == 0 {
            break;
        }
        *line_no += 1;
        *bytes += n as u64;
        if buf.trim().is_empty() {
            buf.clear();
        } else {
            chunk.push((*line_no, std::mem::take(&mut buf)));
        }
    }
    Ok(chunk)
}

/// Parses and quantizes lines in parallel; lines of other shards are left out.
fn parse_chunk(
    lines: &[(u64, String)],
    collection: &Collection,
    modality: Modality,
    shard: Option<crate::shard::Shard>,
) -> Vec<(u64, Prepared)> {
    let bad = |e: LineError| BadItem::new(None, e.kind, e.reason);
    lines
        .par_iter()
        .filter_map(|(n, text)| {
            let record = match parse_line(text, *n, modality) {
                Ok(r) => r,
                Err(e) => {
                    return shard
                        .is_none_or(|s| s.owns(None))
                        .then(|| (*n, Err(bad(e))));
                }
            };
            if shard.is_some_and(|s| !s.owns(Some(record.doc.id.as_str()))) {
                return None;
            }
            let prepared = collection
                .quantizer()
                .document(record.vector)
                .map(|v| PreparedDoc::new(record.doc, v))
                .map_err(|e| BadItem::new(None, "vector", e.to_string()));
            Some((*n, prepared))
        })
        .collect()
}

/// The term space (and its tokens, in id order) named by a vocabulary file: a `tokenizer.json`
/// or a `vocab.txt` (one token per line).
pub fn load_vocab(path: &Path) -> Result<(lexlip_proto::TermSpace, Vec<String>)> {
    let text = std::fs::read_to_string(path).map_err(|e| PipelineError::io(path, e))?;
    let name = path
        .parent()
        .and_then(|p| p.file_name())
        .or(path.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vocabulary".into());
    let tokens = if path.extension().is_some_and(|e| e == "json") {
        lexlip_proto::term_space::tokens_from_tokenizer_json(&text).map_err(|e| {
            PipelineError::Input(format!(
                "{} is not a usable tokenizer.json: {e}",
                path.display()
            ))
        })?
    } else {
        text.lines().map(str::to_string).collect()
    };
    if tokens.is_empty() {
        return Err(PipelineError::Input(format!(
            "vocabulary {} is empty",
            path.display()
        )));
    }
    let space = lexlip_proto::TermSpace::from_tokens(name, tokens.iter().map(String::as_str));
    Ok((space, tokens))
}
