//! Writes one batch of documents as one tantivy segment, impacts as term frequencies.
//!
//! Feeding an impact `N` through a tokenizer means `N` repetitions of the token (~70 ns each,
//! a few thousand documents per second at LexLIP impacts). Instead:
//!
//! 1. the small fields (id, modality, uri, text, metadata) go through tantivy's own
//!    single-segment writer into a RAM index, so store, fast fields and field norms are exactly
//!    what tantivy writes;
//! 2. the real segment's postings are written with tantivy's public
//!    [`InvertedIndexSerializer`]: the small fields' postings copied from the RAM segment, and the
//!    `impacts` field written directly, one `write_doc(doc, impact)` per non-zero;
//! 3. the store, fast-field and field-norm files are copied byte for byte;
//! 4. the segment is handed to the writer with `IndexWriter::add_segment`. It and
//!    `IndexBuilder::single_segment_index_writer` are `#[doc(hidden)]` in tantivy 0.27. tantivy is therefore pinned exactly (`=0.27.0`) and the
//!    tests `segment_builder::tests` fail loudly if its behaviour changes.

use std::collections::HashMap;
use std::io::Write;

use lexlip_proto::{Document, QuantizedVector};
use tantivy::directory::{RamDirectory, TerminatingWrite};
use tantivy::index::{SegmentComponent, SegmentMeta};
use tantivy::postings::InvertedIndexSerializer;
use tantivy::schema::{IndexRecordOption, OwnedValue};
use tantivy::{DocSet, Index, SegmentReader, TERMINATED, TantivyDocument};

use crate::error::Result;
use crate::schema::Fields;

/// A document waiting to be written: its stored fields and its impacts.
#[derive(Debug, Clone)]
pub struct PendingDoc {
    pub doc: Document,
    pub impacts: QuantizedVector,
    /// Dense fallback vector (collections with dense search on).
    pub dense: Option<lexlip_proto::DenseVector>,
}

/// RAM for tantivy's single-segment writer of the small fields (it never flushes early).
const SMALL_FIELDS_BUDGET: usize = 64 << 20;

/// The stored/indexed small fields of one document as a tantivy document.
pub(crate) fn small_fields_doc(fields: &Fields, doc: &Document) -> TantivyDocument {
    let mut t = TantivyDocument::new();
    t.add_text(fields.id, doc.id.as_str());
    t.add_text(fields.modality, doc.modality.as_str());
    if let Some(uri) = &doc.uri {
        t.add_text(fields.uri, uri);
    }
    if let Some(text) = &doc.text {
        t.add_text(fields.text, text);
    }
    if !doc.metadata.is_empty() {
        let object: Vec<(String, OwnedValue)> = doc
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), OwnedValue::from(v.clone())))
            .collect();
        t.add_field_value(fields.metadata, &OwnedValue::Object(object));
    }
    t
}

/// Writes `docs` (in this order: doc id `i` is `docs[i]`) as a new segment of `index` and returns
/// its meta, ready for `IndexWriter::add_segment`. Returns `None` for an empty batch.
pub(crate) fn write_segment(
    index: &Index,
    fields: &Fields,
    docs: &[PendingDoc],
) -> Result<Option<SegmentMeta>> {
    if docs.is_empty() {
        return Ok(None);
    }
    let schema = index.schema();

    // 1. small fields through tantivy itself, while the impacts are bucketed by term on
    //    another thread (the two are independent; this is most of the ingest time).
    let small_fields = || -> Result<Index> {
        let mut small = Index::builder()
            .schema(schema.clone())
            .single_segment_index_writer(RamDirectory::create(), SMALL_FIELDS_BUDGET)?;
        for d in docs {
            let mut t = small_fields_doc(fields, &d.doc);
            crate::dense::add_to_doc(&mut t, fields, d.dense.as_ref());
            small.add_document(t)?;
        }
        Ok(small.finalize()?)
    };
    let (ram, buckets) = std::thread::scope(|scope| {
        let buckets = scope.spawn(|| ImpactBuckets::new(docs));
        let ram = small_fields();
        (ram, buckets.join())
    });
    let ram = ram?;
    let buckets = buckets
        .map_err(|_| tantivy::TantivyError::InternalError("impact bucketing panicked".into()))?;
    let ram_segment = ram
        .searchable_segments()?
        .into_iter()
        .next()
        .ok_or_else(|| tantivy::TantivyError::InternalError("RAM segment missing".into()))?;
    let ram_reader = SegmentReader::open(&ram_segment)?;

    // 2. postings of the real segment.
    let segment = index.new_segment();
    let mut serializer = InvertedIndexSerializer::open(&segment)?;
    for (field, entry) in schema.fields() {
        if !entry.is_indexed() {
            continue;
        }
        if field == fields.impacts {
            buckets.write(&mut serializer, field)?;
        } else {
            copy_postings(&mut serializer, &ram_reader, field)?;
        }
    }
    serializer.close()?;

    // 3. everything else byte for byte (tantivy's directory strips and re-adds the footers).
    for component in [
        SegmentComponent::FastFields,
        SegmentComponent::FieldNorms,
        SegmentComponent::Store,
    ] {
        let bytes = ram_segment
            .open_read(component.clone())
            .map_err(tantivy::TantivyError::from)?
            .read_bytes()?;
        let mut out = segment
            .open_write(component)
            .map_err(tantivy::TantivyError::from)?;
        out.write_all(bytes.as_slice())?;
        out.terminate()?;
    }

    Ok(Some(segment.with_max_doc(docs.len() as u32).meta().clone()))
}

/// The postings of the `impacts` field, bucketed by term; documents arrive in doc-id order so
/// each bucket is sorted.
struct ImpactBuckets<'a> {
    /// Terms in byte order, with their bucket.
    terms: Vec<(&'a str, usize)>,
    postings: Vec<Vec<(u32, u32)>>,
    total_tokens: u64,
}

impl<'a> ImpactBuckets<'a> {
    fn new(docs: &'a [PendingDoc]) -> Self {
        let mut term_ids: HashMap<&str, usize> = HashMap::new();
        let mut postings: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut total_tokens = 0u64;
        for (doc_id, d) in docs.iter().enumerate() {
            for (term, impact) in d.impacts.iter() {
                let next = postings.len();
                let id = *term_ids.entry(term).or_insert(next);
                if id == next {
                    postings.push(Vec::new());
                }
                postings[id].push((doc_id as u32, impact));
                total_tokens += u64::from(impact);
            }
        }
        let mut terms: Vec<(&str, usize)> = term_ids.into_iter().collect();
        terms.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Self {
            terms,
            postings,
            total_tokens,
        }
    }

    /// Term frequency = impact, one `write_doc` per non-zero.
    fn write(
        &self,
        serializer: &mut InvertedIndexSerializer,
        field: tantivy::schema::Field,
    ) -> Result<()> {
        let mut fs = serializer.new_field(field, self.total_tokens, None)?;
        for &(term, id) in &self.terms {
            let list = &self.postings[id];
            fs.new_term(term.as_bytes(), list.len() as u32, true)?;
            for &(doc, impact) in list {
                fs.write_doc(doc, impact, &[]);
            }
            fs.close_term()?;
        }
        fs.close()?;
        Ok(())
    }
}

/// Copies one field's postings (doc ids only: the small fields are indexed without frequencies).
fn copy_postings(
    serializer: &mut InvertedIndexSerializer,
    reader: &SegmentReader,
    field: tantivy::schema::Field,
) -> Result<()> {
    let inverted = reader.inverted_index(field)?;
    let mut fs = serializer.new_field(field, inverted.total_num_tokens(), None)?;
    let mut stream = inverted.terms().stream()?;
    while stream.advance() {
        let info = stream.value().clone();
        fs.new_term(stream.key(), info.doc_freq, false)?;
        let mut postings = inverted.read_postings_from_terminfo(&info, IndexRecordOption::Basic)?;
        let mut doc = postings.doc();
        while doc != TERMINATED {
            fs.write_doc(doc, 0, &[]);
            doc = postings.advance();
        }
        fs.close_term()?;
    }
    fs.close()?;
    Ok(())
}
