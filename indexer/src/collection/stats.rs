//! What a collection holds and what it costs: documents by modality, distinct terms, stored
//! non-zeros, bytes on disk.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use lexlip_proto::Modality;
use lexlip_proto::api::CollectionStats;
use tantivy::Term;
use tantivy::collector::Count;
use tantivy::index::SegmentComponent;
use tantivy::query::TermQuery;
use tantivy::schema::IndexRecordOption;

use super::Collection;
use crate::error::{IndexError, Result};

impl Collection {
    /// Documents of one modality in the last commit.
    pub fn documents_of(&self, modality: Modality) -> Result<u64> {
        let snapshot = self.snapshot()?;
        let q = TermQuery::new(
            Term::from_field_text(self.fields.modality, modality.as_str()),
            IndexRecordOption::Basic,
        );
        Ok(snapshot.searcher.search(&q, &Count)? as u64)
    }

    /// Documents, terms and bytes of the last commit.
    pub fn stats(&self) -> Result<CollectionStats> {
        let snapshot = self.snapshot()?;
        let searcher = &snapshot.searcher;
        let mut by_modality = HashMap::new();
        for m in [Modality::Image, Modality::Text] {
            by_modality.insert(m, self.documents_of(m)?);
        }
        let mut terms: HashSet<Vec<u8>> = HashSet::new();
        let mut nnz = 0u64;
        for reader in searcher.segment_readers() {
            let inverted = reader.inverted_index(self.fields.impacts)?;
            let mut stream = inverted.terms().stream()?;
            while stream.advance() {
                nnz += u64::from(stream.value().doc_freq);
                if !terms.contains(stream.key()) {
                    terms.insert(stream.key().to_vec());
                }
            }
        }
        let bytes = dir_size(&self.dir)?;
        let documents = searcher.num_docs();
        let component_bytes = |c: &SegmentComponent| -> u64 {
            let len = |r: &tantivy::SegmentReader| {
                r.open_read(c.clone())
                    .map_or(0, |f| tantivy::HasLen::len(&f))
            };
            searcher.segment_readers().iter().map(len).sum::<usize>() as u64
        };
        let forward_file_bytes = component_bytes(&crate::forward_file::component());
        let index_bytes = forward_file_bytes
            + [
                SegmentComponent::Postings,
                SegmentComponent::Positions,
                SegmentComponent::Terms,
                SegmentComponent::FastFields,
                SegmentComponent::FieldNorms,
            ]
            .iter()
            .map(component_bytes)
            .sum::<u64>();
        // The impacts field's share of the postings and term dictionaries.
        let mut impacts_bytes = 0u64;
        for reader in searcher.segment_readers() {
            let usage = reader.space_usage()?;
            for per_field in [usage.postings(), usage.termdict()] {
                impacts_bytes += per_field
                    .fields()
                    .filter(|f| f.field_name() == crate::schema::IMPACTS)
                    .map(|f| f.total().get_bytes())
                    .sum::<u64>();
            }
        }
        let vector_index_bytes = impacts_bytes + forward_file_bytes;
        let per_nnz = |b: u64| if nnz == 0 { 0.0 } else { b as f64 / nnz as f64 };
        Ok(CollectionStats {
            documents,
            images: by_modality[&Modality::Image],
            texts: by_modality[&Modality::Text],
            terms: terms.len() as u64,
            nnz,
            bytes,
            bytes_per_item: if documents == 0 {
                0.0
            } else {
                bytes as f64 / documents as f64
            },
            bytes_per_nnz: if nnz == 0 {
                0.0
            } else {
                bytes as f64 / nnz as f64
            },
            segments: searcher.segment_readers().len(),
            pruning_memory_bytes: snapshot.pruning_memory_bytes(),
            forward_file_bytes,
            index_bytes,
            index_bytes_per_nnz: per_nnz(index_bytes),
            vector_index_bytes,
            vector_index_bytes_per_nnz: per_nnz(vector_index_bytes),
            stored_bytes: component_bytes(&SegmentComponent::Store),
        })
    }
}

/// Bytes under `dir`. A background merge may delete a segment's files between the listing and
/// the `stat`; such a file no longer counts (it is not an error).
fn dir_size(dir: &Path) -> Result<u64> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mut total = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return Ok(0),
        Err(e) => return Err(IndexError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| IndexError::io(dir, e))?;
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(IndexError::io(entry.path(), e)),
        };
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
