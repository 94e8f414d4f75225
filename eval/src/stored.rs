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

use crate::encode::{link_captions, skip};
use crate::encoded::{Encoded, Entry, Vector};
use crate::impacts::{Impacts, Interner};
use crate::options::{EvalObserver, EvalOptions, Mode};

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
                    doc: crate::encoded::lean(stored.doc),
                    vector,
                    query: None,
                    pixels: None,
                    picture: None,
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

/// Captions whose stored dense vectors are encoded again to check that a collection's dense
/// vectors come from the backbone of the model ([`read_from_dense`]).
const BACKBONE_PROBES: usize = 16;

/// Lexicons computed per batch of stored dense vectors in [`read_from_dense`].
const HEAD_BATCH: usize = 1024;

/// Reads the collection in `dir` for a sparse evaluation with lexicons that `encoders` compute
/// from the dense vectors it stores, instead of the lexicons it indexed. `encoders` must be
/// lexicon heads over the dense model that indexed it (`lexlip index --dense`): other heads over
/// one backbone then meet a million pictures in the minutes their heads take, not in the hour
/// of encoding the pictures again. The first captions' stored vectors are encoded again from
/// their texts, and a collection whose vectors are not the backbone's is refused.
pub fn read_from_dense(
    dir: &Path,
    encoders: &Encoders,
    options: &EvalOptions,
    observer: &mut dyn EvalObserver,
) -> Result<Encoded> {
    let (text, image) = (encoders.text()?, encoders.image()?);
    let backbone = encoders.dense().ok_or_else(|| {
        PipelineError::Input(format!(
            "the model at {} has no dense backbone: lexicons are computed from a collection's \
             dense vectors only by lexicon heads over the model that indexed it",
            encoders.path().display()
        ))
    })?;
    let dense_options = EvalOptions {
        mode: Mode::Dense,
        ..options.clone()
    };
    let mut out = read(dir, encoders, &dense_options, observer)?;
    let started = std::time::Instant::now();
    check_backbone(dir, backbone, &out)?;
    let quantizer = lexlip_index::Quantizer::new(options.scale, None, None)?;
    let mut names = Interner::default();
    let mut heads = |entries: &mut [Entry], modality: Modality| -> Result<()> {
        for batch in entries.chunks_mut(HEAD_BATCH) {
            // A dense read holds dense vectors only; anything else would pair lexicons with
            // the wrong entries below.
            let dense = batch
                .iter()
                .map(|e| match &e.vector {
                    Vector::Dense(d) => Ok(d.clone()),
                    Vector::Sparse(_) => Err(PipelineError::Input(format!(
                        "{}: a lexicon where a dense vector was read",
                        e.doc.id
                    ))),
                })
                .collect::<Result<Vec<DenseVector>>>()?;
            let lexicons = match modality {
                Modality::Image => image.encode_embeddings(&dense)?,
                // A model that lifts a stored caption's own words reads its words.
                _ if !text.terms().for_documents().is_all() => {
                    let texts = batch
                        .iter()
                        .map(|e| {
                            e.doc.text.as_deref().ok_or_else(|| {
                                PipelineError::Input(format!(
                                    "{}: a caption without its text",
                                    e.doc.id
                                ))
                            })
                        })
                        .collect::<Result<Vec<&str>>>()?;
                    text.encode(&texts)?
                }
                _ => text.encode_embeddings(&dense)?,
            };
            for (entry, lexicon) in batch.iter_mut().zip(lexicons) {
                let q = quantizer.query(lexlip_proto::VectorInput::Weights(lexicon))?;
                entry.vector = Vector::Sparse(Impacts::new(&q, &mut names));
            }
        }
        Ok(())
    };
    heads(&mut out.images, Modality::Image)?;
    heads(&mut out.texts, Modality::Text)?;
    out.mode = Mode::Sparse;
    out.term_space = text.term_space().clone();
    out.tokens = Some(text.vocabulary().tokens().to_vec());
    out.encode_seconds += started.elapsed().as_secs_f64();
    Ok(out)
}

/// Refuses a collection whose dense vectors `backbone` does not give: its first captions'
/// stored vectors must equal their texts encoded again (cosine ≥ 0.999).
fn check_backbone(
    dir: &Path,
    backbone: &dyn lexlip_model::DenseEncoder,
    read: &Encoded,
) -> Result<()> {
    let probes: Vec<(&str, &DenseVector)> = read
        .texts
        .iter()
        .filter_map(|e| match (&e.doc.text, &e.vector) {
            (Some(t), Vector::Dense(d)) => Some((t.as_str(), d)),
            _ => None,
        })
        .take(BACKBONE_PROBES)
        .collect();
    let refuse = |why: String| {
        PipelineError::Input(format!(
            "the dense vectors of {} are not those of this model's backbone ({why}): compute \
             lexicons from them only with heads over the dense model that indexed it",
            dir.display()
        ))
    };
    if let Some(d) = read.images.first().or(read.texts.first())
        && let Vector::Dense(v) = &d.vector
        && v.dim() != backbone.dim()
    {
        return Err(refuse(format!(
            "{} dimensions, the backbone's {}",
            v.dim(),
            backbone.dim()
        )));
    }
    if probes.is_empty() {
        return Ok(());
    }
    let texts: Vec<&str> = probes.iter().map(|(t, _)| *t).collect();
    let again = backbone.encode_texts(&texts)?;
    for ((text, stored), fresh) in probes.iter().zip(&again) {
        let cos =
            f64::from(stored.dot(fresh)) / (stored.norm() * fresh.norm()).max(f64::MIN_POSITIVE);
        if cos < 0.999 {
            return Err(refuse(format!(
                "the caption {text:?} is stored at cosine {cos:.3} from its encoding"
            )));
        }
    }
    Ok(())
}
