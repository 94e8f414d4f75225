//! Evaluating what a collection already holds: its documents' vectors read back from the index
//! instead of the corpus encoded again. `lexlip index` has encoded every picture once; on a CPU
//! a million of them take an hour, and encoding them again for the evaluation doubles that.
//!
//! The vectors are the ones the collection searches: lexicons as indexed (quantized with the
//! collection's scale, cut to its top-K), or, in dense mode, the dense vectors of a collection
//! indexed with them. Captions are linked to their pictures by `metadata.image_id`, as the
//! corpus readers set it, so a collection of a TSV or of WebDataset shards evaluates like the
//! corpus itself.

use std::path::Path;

use lexlip_corpus::item::BadItem;
use lexlip_index::Collection;
use lexlip_model::Encoders;
use lexlip_pipeline::{PipelineError, Result};
use lexlip_proto::{DenseVector, Modality, TermSpace};

use super::encode::{link_captions, skip};
use super::{Encoded, Entry, EvalObserver, EvalOptions, Impacts, Interner, Mode, Vector};

/// A stored document of no vector for the mode (a dense evaluation of a document indexed
/// without its dense vector).
pub const NO_VECTOR: &str = "no_vector";

/// Reads every live document of the collection in `dir` into an [`Encoded`] for `options.mode`.
/// `encoders` is the model that indexed it: its term space must be the collection's (sparse
/// mode), and `options.scale` the collection's scale.
pub fn read(
    dir: &Path,
    encoders: &Encoders,
    options: &EvalOptions,
    observer: &mut dyn EvalObserver,
) -> Result<Encoded> {
    let started = std::time::Instant::now();
    let collection = Collection::open(dir)?;
    let settings = &collection.manifest().settings;
    let (term_space, tokens) = match options.mode {
        Mode::Sparse => {
            let text = encoders.text()?;
            collection.check_term_space(text.term_space())?;
            if settings.scale != options.scale {
                return Err(PipelineError::Input(format!(
                    "the collection at {} was quantized with scale {}, not {}: give --scale {}",
                    dir.display(),
                    settings.scale,
                    options.scale,
                    settings.scale
                )));
            }
            (
                text.term_space().clone(),
                Some(text.vocabulary().tokens().to_vec()),
            )
        }
        Mode::Dense => {
            if settings.dense_dim.is_none() {
                return Err(PipelineError::Input(format!(
                    "the collection at {} has no dense vectors: index it with --dense to \
                     evaluate --mode dense",
                    dir.display()
                )));
            }
            (TermSpace::free("dense"), None)
        }
    };
    let snapshot = collection.snapshot()?;
    let total = snapshot.num_docs();
    let mut out = Encoded::new(options.mode, term_space, tokens);
    let mut names = Interner::default();
    snapshot.for_each_document(|stored| {
        out.read += 1;
        let vector = match options.mode {
            Mode::Sparse => stored
                .impacts
                .map(|q| Vector::Sparse(Impacts::new(&q, &mut names))),
            Mode::Dense => stored
                .dense
                .map(DenseVector::new)
                .transpose()
                .map_err(|e| {
                    lexlip_index::IndexError::CorruptDocument(format!(
                        "{}: its dense vector: {e}",
                        stored.doc.id
                    ))
                })?
                .map(Vector::Dense),
        };
        match vector {
            Some(vector) => {
                let entry = Entry {
                    doc: super::lean(stored.doc),
                    vector,
                    pixels: None,
                };
                if entry.doc.modality == Modality::Image {
                    out.images.push(entry);
                } else {
                    out.texts.push(entry);
                }
            }
            None => {
                let bad = BadItem::new(
                    Some(stored.doc.id.to_string()),
                    NO_VECTOR,
                    format!("no {} vector stored", options.mode.as_str()),
                );
                skip(&mut out, observer, bad);
            }
        }
        if out.read.is_multiple_of(10_000) {
            observer.reading(out.read, total);
        }
        Ok(())
    })?;
    observer.reading(out.read, total);
    link_captions(&mut out, observer);
    out.encode_seconds = started.elapsed().as_secs_f64();
    Ok(out)
}
