//! `lexlip merge OUT IN...`: combines collections built separately (e.g. shards) into one.
//! Inputs must share the term space, the quantization scale and the dense dimension; a later
//! input's document replaces an earlier one with the same id.

use std::path::Path;

use lexlip_index::Collection;
use lexlip_index::export::dense_of;

use crate::error::{PipelineError, Result};

/// Documents copied per input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeReport {
    pub copied: Vec<u64>,
    pub documents: u64,
}

fn compatible(a: &Collection, b: &Collection) -> Result<()> {
    let (ma, mb) = (a.manifest(), b.manifest());
    if !ma.term_space.same_vocabulary(&mb.term_space) {
        return Err(PipelineError::Incompatible(format!(
            "{} is built for {} but {} for {}",
            a.dir().display(),
            ma.term_space,
            b.dir().display(),
            mb.term_space
        )));
    }
    if ma.settings.scale != mb.settings.scale || ma.settings.dense_dim != mb.settings.dense_dim {
        return Err(PipelineError::Incompatible(format!(
            "{} has scale {} and dense dimension {:?}, {} has scale {} and dense dimension {:?}",
            a.dir().display(),
            ma.settings.scale,
            ma.settings.dense_dim,
            b.dir().display(),
            mb.settings.scale,
            mb.settings.dense_dim
        )));
    }
    Ok(())
}

/// Merges `inputs` into `out` (created with the first input's term space and settings when it
/// holds no collection yet). Everything is checked before anything is written.
pub fn merge(out: &Path, inputs: &[&Path]) -> Result<MergeReport> {
    let Some(first) = inputs.first() else {
        return Err(PipelineError::Input(
            "name at least one input collection".into(),
        ));
    };
    let opened: Vec<Collection> = inputs
        .iter()
        .map(|p| Collection::open(p))
        .collect::<std::result::Result<_, _>>()?;
    for c in &opened[1..] {
        compatible(&opened[0], c)?;
    }
    let target = if lexlip_index::Manifest::path(out).exists() {
        let t = Collection::open(out)?;
        compatible(&t, &opened[0])?;
        t
    } else {
        let m = opened[0].manifest();
        let vocab_path = first.join(lexlip_index::collection::VOCAB_FILE);
        let vocab: Option<Vec<String>> = std::fs::read_to_string(&vocab_path)
            .ok()
            .map(|t| t.lines().map(str::to_string).collect());
        Collection::create(
            out,
            m.term_space.clone(),
            m.settings.clone(),
            vocab.as_deref(),
        )?
    };
    let mut copied = Vec::new();
    for c in &opened {
        let mut n = 0u64;
        c.snapshot()?.for_each_document(|d| {
            let dense = dense_of(&d)?;
            let impacts = d.impacts.clone().unwrap_or_default();
            target.add_with_dense(d.doc, impacts, dense)?;
            n += 1;
            Ok(())
        })?;
        copied.push(n);
    }
    target.commit()?;
    let documents = target.snapshot()?.num_docs();
    Ok(MergeReport { copied, documents })
}
