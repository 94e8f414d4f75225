//! Retrieval evaluation of a model on a test corpus, as LexLIP's Tables 1 and 2 report it:
//! text → image and image → text recall at 1, 5 and 10, with what the index costs (bytes and
//! non-zeros per item) and how fast it answers (queries per second), for full vectors and for
//! documents cut to their K largest terms.
//!
//! ```text
//! corpus ──▶ encode every image and caption once ([`encode`]) ──▶ vectors in memory
//!        ──▶ per setting: a real collection in a temporary directory, searched like the
//!            server searches it ([`sweep`]) ──▶ rankings ──▶ R@K ([`recall`])
//! ```
//!
//! Every caption is a text → image query whose answer is its image; every image with captions
//! is an image → text query, answered when any of its captions is retrieved.
//!
//! With `single_modal` (COOKIE's image retrieval and text matching), images that share a
//! caption (the same text up to case and spaces, e.g. one emoji in two art styles) show one
//! concept: every image with another image of its concept is an image → image query answered by
//! those images, and every caption is a text → text query answered by the other, differently
//! worded captions of its concept. The query itself, and captions worded exactly like it, are
//! left out of its ranking.

pub mod compose;
pub mod encode;
pub mod encoded;
pub mod impacts;
pub mod lexicon;
pub mod options;
pub mod plot;
pub mod queries;
pub mod recall;
pub mod report;
pub mod rerank;
pub mod stored;
pub mod sweep;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lexlip_model::Encoders;
use lexlip_proto::api::Precision;

use lexlip_corpus::Input;
use lexlip_pipeline::{PipelineError, Result};

pub use encode::encode;
pub use encoded::{DISTRACTOR_PREFIX, Distractors, Encoded, Entry, Vector};
pub use impacts::{Impacts, Interner};
pub use options::{EvalObserver, EvalOptions, Mode, Relevance, RerankOptions, Setting};
pub use queries::Queries;
pub use report::{EvalReport, SettingReport};
pub use sweep::evaluate;

/// A temporary directory for the collections (removed when dropped), in `dir` (made if it does
/// not exist yet, as `mkdir -p`) or the system's temporary directory.
fn work_dir(dir: Option<&Path>) -> Result<tempfile::TempDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("lexlip-eval");
    match dir {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| builder.tempdir_in(dir))
            .map_err(|e| PipelineError::io(dir, e)),
        None => builder
            .tempdir()
            .map_err(|e| PipelineError::io(std::env::temp_dir(), e)),
    }
}

/// What an evaluation reads: a corpus, encoded once, or a collection's stored vectors
/// ([`stored::read`]: nothing is encoded again).
#[derive(Debug, Clone)]
pub enum Source {
    Corpus(Input),
    /// A collection made by `lexlip index`, with the model that indexed it.
    Collection(PathBuf),
}

impl Source {
    /// How a report names it: the corpus's path (or its shards' paths), or the collection's.
    pub fn name(&self) -> String {
        match self {
            Source::Corpus(input) => report::corpus_name(input),
            Source::Collection(dir) => dir.display().to_string(),
        }
    }
}

/// Reads `source` once with `encoders` (encoding a corpus, or reading a collection's vectors),
/// then evaluates every setting of `options`.
pub fn run(
    source: &Source,
    encoders: &Encoders,
    options: &EvalOptions,
    observer: &mut dyn EvalObserver,
) -> Result<EvalReport> {
    let started = std::time::Instant::now();
    let settings = options.settings()?;
    if (matches!(source, Source::Collection(_)) || options.distractors.is_some())
        && options.rerank.is_some()
    {
        return Err(PipelineError::Input(
            "a re-ranker reads the pictures, which a collection does not keep: evaluate the \
             corpus itself (--tsv, --manifest or --webdataset), without distractors, to re-rank"
                .into(),
        ));
    }
    if options.distractors.is_some() && options.single_modal {
        return Err(PipelineError::Input(
            "single-modal recall asks every picture and caption of the collection: leave \
             --single-modal out with distractors"
                .into(),
        ));
    }
    if options.distractors_from_dense
        && (options.distractors.is_none() || options.mode != Mode::Sparse)
    {
        return Err(PipelineError::Input(
            "lexicons are computed from stored dense vectors for the distractors of a sparse \
             evaluation only: give --distractors, and leave out --mode dense"
                .into(),
        ));
    }
    // Before the encoding, which can take an hour: a work directory that cannot be made fails
    // now, not after it.
    let work = work_dir(options.work_dir.as_deref())?;
    let mut encoded = match source {
        Source::Corpus(input) => encode(input, encoders, options, observer)?,
        Source::Collection(dir) => stored::read(dir, encoders, options, observer)?,
    };
    encoded.check()?;
    // The test corpus's lexicons alone.
    let lexicons = match options.mode {
        Mode::Sparse => measure_lexicons(&encoded, encoders)?,
        Mode::Dense => None,
    };
    if let Some(dir) = &options.distractors {
        let others = if options.distractors_from_dense {
            stored::read_from_dense(dir, encoders, options, observer)?
        } else {
            stored::read(dir, encoders, options, observer)?
        };
        encoded.add_distractors(others, dir.display().to_string())?;
    }
    // The same queries for every setting; the report counts every query the rule asks, before
    // --max-queries (each wording once under the caption rule).
    let queries = Queries::new(&encoded, options.relevance, options.max_queries);
    let asked = match options.max_queries {
        None => (queries.t2i.len(), queries.i2t.len()),
        Some(_) => {
            let every = Queries::new(&encoded, options.relevance, None);
            (every.t2i.len(), every.i2t.len())
        }
    };
    let mut results: Vec<SettingReport> = Vec::with_capacity(settings.len());
    // One collection on disk at a time, kept while the settings that follow search the same
    // documents (a collection's exact search, its factors and its term cuts).
    let mut built: Option<(sweep::Built, PathBuf)> = None;
    // Each collection's exact first results, by top-K (None: the full vectors).
    let mut exact: HashMap<Option<usize>, recall::Rankings> = HashMap::new();
    for (n, setting) in settings.into_iter().enumerate() {
        let current = match built.take() {
            Some((b, dir)) if b.serves(&setting, encoded.mode) => (b, dir),
            old => {
                if let Some(old) = old {
                    remove(old)?;
                }
                let dir = work.path().join(format!("setting-{n}"));
                observer.searching(&setting.label(encoded.mode), 0, 0);
                (sweep::build(&encoded, &setting, options.scale, &dir)?, dir)
            }
        };
        let mut result = sweep::evaluate_on(
            &encoded,
            &current.0,
            setting,
            &queries,
            options.single_modal,
            options.rerank.as_ref(),
            observer,
        )?;
        built = Some(current);
        // An approximate search (a factor, a cut, the graph) is measured against the exact
        // search of the same documents, which `settings` puts before it; a top-K collection's
        // exact search against the full vectors' (the run's first setting).
        let rankings = std::mem::take(&mut result.rankings);
        let reference = match setting.precision {
            Precision::Approx(_) => exact.get(&setting.top_k),
            Precision::Exact => exact.get(&None),
        };
        if let Some(reference) = reference {
            result.t2i_overlap = recall::overlap(&rankings.t2i, &reference.t2i);
            result.i2t_overlap = recall::overlap(&rankings.i2t, &reference.i2t);
        }
        if setting.precision == Precision::Exact {
            exact.insert(setting.top_k, rankings);
        }
        results.push(result);
    }
    if let Some(last) = built {
        remove(last)?;
    }
    let mut report = EvalReport::new(
        encoders.path().display().to_string(),
        source.name(),
        &encoded,
        options.relevance,
        asked,
        results,
        started.elapsed().as_secs_f64(),
    );
    report.lexicon = lexicons;
    report.idf = (options.idf > 0.0).then_some(options.idf);
    Ok(report)
}

/// Closes a setting's collection and removes its directory.
fn remove((built, dir): (sweep::Built, PathBuf)) -> Result<()> {
    drop(built);
    std::fs::remove_dir_all(&dir).map_err(|e| PipelineError::io(&dir, e))
}

/// The lexicon figures ([`lexicon::LexiconReport`]) of the encoded corpus, with each caption's
/// words as the text encoder's tokenizer splits it.
fn measure_lexicons(
    encoded: &Encoded,
    encoders: &Encoders,
) -> Result<Option<lexicon::LexiconReport>> {
    let text = encoders.text()?;
    let tokens = text.vocabulary().tokens();
    let mut words = Vec::with_capacity(encoded.texts.len());
    for chunk in encoded.texts.chunks(256) {
        let texts: Vec<&str> = chunk
            .iter()
            .map(|e| e.doc.text.as_deref().unwrap_or_default())
            .collect();
        for ids in text.tokenize(&texts)? {
            words.push(lexicon::caption_words(
                ids.iter().filter_map(|&i| tokens.get(i as usize).cloned()),
            ));
        }
    }
    Ok(lexicon::LexiconReport::measure(encoded, &words))
}

#[cfg(test)]
mod tests;
