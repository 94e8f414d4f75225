//! `lexlip merge OUT IN...`: combines collections built separately (e.g. shards) into one.
//! Inputs must share the term space, the quantization scale and the dense dimension; a later
//! input's document replaces an earlier one with the same id.

use std::path::Path;
use std::sync::mpsc::sync_channel;

use lexlip_index::export::dense_of;
use lexlip_index::{Collection, DocExtras, IndexError};
use lexlip_proto::{Document, QuantizedVector};

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
/// holds no collection yet). Everything is checked before anything is written, and the result
/// appears whole or not at all: into an existing collection, everything lands in one commit;
/// a new one is built in a temporary directory beside `out` and renamed into place at the end,
/// so a killed merge leaves no `out` (rather than a partial one that looks complete).
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
    let existing = lexlip_index::Manifest::path(out).exists();
    let building = if existing {
        None
    } else {
        if out.exists() && std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
            return Err(PipelineError::Input(format!(
                "{} exists and is not a collection; merge into a new path or an existing collection",
                out.display()
            )));
        }
        let parent = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| PipelineError::io(parent, e))?;
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "merged".into());
        Some(
            tempfile::Builder::new()
                .prefix(&format!(".{name}.merging-"))
                .tempdir_in(parent)
                .map_err(|e| PipelineError::io(parent, e))?,
        )
    };
    let mut target = if existing {
        let t = Collection::open(out)?;
        compatible(&t, &opened[0])?;
        t
    } else {
        let dir = building.as_ref().map_or(out, |b| b.path());
        let m = opened[0].manifest();
        let vocab_path = first.join(lexlip_index::collection::VOCAB_FILE);
        let vocab: Option<Vec<String>> = std::fs::read_to_string(&vocab_path)
            .ok()
            .map(|t| t.lines().map(str::to_string).collect());
        Collection::create(
            dir,
            m.term_space.clone(),
            m.settings.clone(),
            vocab.as_deref(),
        )?
    };
    // A batch job: nothing searches the target before it is handed over.
    target.set_warm_dense(false);
    let mut copied = Vec::new();
    for c in &opened {
        copied.push(copy_documents(c, &target)?);
    }
    target.commit()?;
    let documents = target.snapshot()?.num_docs();
    drop(target);
    if let Some(building) = building {
        // Renaming onto an empty directory replaces it; the temporary one is gone afterwards.
        let tmp = building.keep();
        std::fs::rename(&tmp, out).map_err(|e| PipelineError::io(out, e))?;
    }
    Ok(MergeReport { copied, documents })
}

/// Documents handed from the reading thread to the writing one at a time.
const BATCH: usize = 512;

type Batch = Vec<(Document, QuantizedVector, DocExtras)>;

/// Copies every live document of `from` into `to`: a thread reads them back (stored fields,
/// impacts from the postings, dense vector, thumbnail) while this one adds them. Thumbnails are
/// copied where `to` keeps them (an input made before thumbnails existed has none to copy).
fn copy_documents(from: &Collection, to: &Collection) -> Result<u64> {
    let (tx, rx) = sync_channel::<Batch>(1);
    std::thread::scope(|scope| -> Result<u64> {
        let reader = scope.spawn(move || -> Result<()> {
            let mut batch: Batch = Vec::with_capacity(BATCH);
            let mut writer_gone = false;
            let read = from.snapshot()?.for_each_document(|d| {
                let extras = DocExtras {
                    dense: dense_of(&d)?,
                    thumbnail: d.thumbnail,
                };
                batch.push((d.doc, d.impacts.unwrap_or_default(), extras));
                if batch.len() == BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    if tx.send(full).is_err() {
                        // The writer failed and reports why: stop reading.
                        writer_gone = true;
                        return Err(IndexError::ReadOnly);
                    }
                }
                Ok(())
            });
            match read {
                Err(_) if writer_gone => Ok(()),
                Err(e) => Err(e.into()),
                Ok(()) => {
                    let _ = tx.send(batch);
                    Ok(())
                }
            }
        });
        let mut n = 0u64;
        for batch in rx {
            for (doc, impacts, extras) in batch {
                to.add_with(doc, impacts, extras)?;
                n += 1;
            }
        }
        reader
            .join()
            .map_err(|_| PipelineError::Stage("the merge reader panicked".into()))??;
        Ok(n)
    })
}
