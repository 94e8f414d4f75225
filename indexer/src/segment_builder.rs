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

use std::io::Write;

use lexlip_proto::{Document, QuantizedVector};
use tantivy::directory::{RamDirectory, TerminatingWrite};
use tantivy::index::{SegmentComponent, SegmentMeta};
use tantivy::postings::InvertedIndexSerializer;
use tantivy::schema::{IndexRecordOption, OwnedValue};
use tantivy::{DocSet, Index, SegmentReader, TERMINATED, TantivyDocument};

use crate::error::Result;
use crate::schema::Fields;

mod bisection;
mod reorder;

/// How a segment's documents are ordered before they are written. Doc ids carry no meaning
/// (results are the same in every order), but neighbouring ids share pruning blocks, whose
/// bounds are tight only when their documents share terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DocOrder {
    /// Two levels of k-means over each document's heaviest terms ([`reorder`]).
    #[default]
    Clusters,
    /// Recursive graph bisection over the same terms ([`bisection`]).
    Bisection,
    /// The order the documents were added in (a baseline for measurements).
    Input,
}

impl DocOrder {
    pub const NAMES: [&'static str; 3] = ["clusters", "bisection", "input"];
}

impl std::str::FromStr for DocOrder {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "clusters" => Ok(DocOrder::Clusters),
            "bisection" => Ok(DocOrder::Bisection),
            "input" => Ok(DocOrder::Input),
            _ => Err(format!(
                "unknown document order {s:?}: use one of {}",
                DocOrder::NAMES.join(", ")
            )),
        }
    }
}

/// A document waiting to be written: its stored fields and its impacts.
#[derive(Debug, Clone)]
pub struct PendingDoc {
    pub doc: Document,
    pub impacts: QuantizedVector,
    /// Dense fallback vector (collections with dense search on).
    pub dense: Option<lexlip_proto::DenseVector>,
    /// Image thumbnail (collections that store them).
    pub thumbnail: Option<Vec<u8>>,
}

/// Terms per document used to cluster documents (see `reorder`).
const CLUSTER_TERMS: usize = 12;

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

/// Everything of a pending document but its impacts: the small fields, the dense vector and
/// the thumbnail (each where the schema has its field).
pub(crate) fn stored_doc(fields: &Fields, d: &PendingDoc) -> TantivyDocument {
    let mut t = small_fields_doc(fields, &d.doc);
    crate::dense::add_to_doc(&mut t, fields, d.dense.as_ref());
    if let (Some(field), Some(bytes)) = (fields.thumbnail, &d.thumbnail) {
        t.add_bytes(field, bytes);
    }
    t
}

/// Writes `docs` as a new segment of `index` and returns its meta, ready for
/// `IndexWriter::add_segment`. Returns `None` for an empty batch. Doc ids follow the order of
/// `doc_order` (see [`DocOrder`]), not the order of `docs`. Where the schema has the `batch` field,
/// every document gets the term `batch` there (see [`Fields::batch`]). With `forward_plan`, the
/// segment gets its forward index file, planned by it ([`crate::forward_file`]).
pub(crate) fn write_segment(
    index: &Index,
    fields: &Fields,
    docs: &[PendingDoc],
    batch: &str,
    doc_order: DocOrder,
    forward_plan: Option<crate::forward_index::ForwardPlan>,
) -> Result<Option<SegmentMeta>> {
    if docs.is_empty() {
        return Ok(None);
    }
    let schema = index.schema();

    // 1. the documents are reordered so that similar ones are neighbours (see `reorder`), then
    //    the small fields go through tantivy itself while the impacts are bucketed by term on
    //    another thread.
    let small_fields = |order: &[u32]| -> Result<Index> {
        let mut small = Index::builder()
            .schema(schema.clone())
            .single_segment_index_writer(RamDirectory::create(), SMALL_FIELDS_BUDGET)?;
        for d in order.iter().map(|&i| &docs[i as usize]) {
            small.add_document(stored_doc(fields, d))?;
        }
        Ok(small.finalize()?)
    };
    let interned = InternedPostings::new(docs);
    let order = interned.doc_order(doc_order);
    let (ram, buckets) = std::thread::scope(|scope| {
        let buckets = scope.spawn(|| interned.into_buckets(&order));
        let ram = small_fields(&order);
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
        } else if Some(field) == fields.batch {
            write_batch_term(&mut serializer, field, batch, docs.len() as u32)?;
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

    let segment = segment.with_max_doc(docs.len() as u32);
    if let Some(plan) = forward_plan {
        buckets.write_forward_file(&segment, plan)?;
    }
    Ok(Some(segment.meta().clone()))
}

/// The postings of the `impacts` field, bucketed by term; documents arrive in doc-id order so
/// each bucket is sorted.
///
/// Built in two passes over flat arrays (no per-term `Vec`, no reallocation): pass 1
/// ([`InternedPostings`]) interns every term in a small open-addressing table (a cheap
/// multiplicative hash over the bytes, the full hash compared before the bytes) and records its
/// id per posting; pass 2 places the postings, renumbered in the clustered order, by a counting
/// sort on the term id. This is most of the ingest time (5M postings per 100k documents).
struct ImpactBuckets {
    table: TermTable,
    /// Term ids in the byte order of their terms.
    terms: Vec<u32>,
    /// Start of each term id's postings in `docs` / `impacts` (`len = num_terms + 1`).
    offsets: Vec<u32>,
    docs: Vec<u32>,
    impacts: Vec<u32>,
    total_tokens: u64,
}

/// A fast, non-cryptographic hash of a term's bytes (terms are short word-pieces).
#[inline]
fn term_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    // Mix the high bits down: the table is indexed by the low bits.
    h ^ (h >> 29)
}

/// Interns terms to dense ids 0, 1, 2, … in order of first appearance. The interned bytes are
/// copied into one small arena, so lookups stay in cache while the documents' own strings (one
/// heap allocation each, spread over the whole batch) are read once.
struct TermTable {
    /// `(hash, id + 1)`; id + 1 = 0 marks an empty slot.
    slots: Vec<(u64, u32)>,
    /// Byte range of each id's term in `arena`.
    spans: Vec<(u32, u32)>,
    arena: Vec<u8>,
    mask: usize,
}

impl TermTable {
    fn new() -> Self {
        let cap = 1 << 12;
        Self {
            slots: vec![(0, 0); cap],
            spans: Vec::new(),
            arena: Vec::new(),
            mask: cap - 1,
        }
    }

    fn len(&self) -> usize {
        self.spans.len()
    }

    fn bytes(&self, id: u32) -> &[u8] {
        let (a, b) = self.spans[id as usize];
        &self.arena[a as usize..b as usize]
    }

    #[inline]
    fn intern(&mut self, term: &[u8]) -> u32 {
        let h = term_hash(term);
        let mut i = (h as usize) & self.mask;
        loop {
            let (sh, id1) = self.slots[i];
            if id1 == 0 {
                let id = self.spans.len() as u32;
                self.slots[i] = (h, id + 1);
                let start = self.arena.len() as u32;
                self.arena.extend_from_slice(term);
                self.spans.push((start, self.arena.len() as u32));
                if self.spans.len() * 2 > self.slots.len() {
                    self.grow();
                }
                return id;
            }
            if sh == h && self.bytes(id1 - 1) == term {
                return id1 - 1;
            }
            i = (i + 1) & self.mask;
        }
    }

    fn grow(&mut self) {
        let cap = self.slots.len() * 2;
        let mut slots = vec![(0u64, 0u32); cap];
        let mask = cap - 1;
        for &(h, id1) in &self.slots {
            if id1 == 0 {
                continue;
            }
            let mut i = (h as usize) & mask;
            while slots[i].1 != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = (h, id1);
        }
        self.slots = slots;
        self.mask = mask;
    }
}

/// Pass 1 over a batch: every posting's term id and impact, in document order.
struct InternedPostings {
    table: TermTable,
    /// Document `d`'s postings are `[starts[d], starts[d + 1])`.
    starts: Vec<u32>,
    term_of: Vec<u32>,
    impact_of: Vec<u32>,
    /// Documents per term id.
    df: Vec<u32>,
    total_tokens: u64,
}

impl InternedPostings {
    fn new(docs: &[PendingDoc]) -> Self {
        let nnz: usize = docs.iter().map(|d| d.impacts.len()).sum();
        let mut table = TermTable::new();
        let mut term_of: Vec<u32> = Vec::with_capacity(nnz);
        let mut impact_of: Vec<u32> = Vec::with_capacity(nnz);
        let mut starts: Vec<u32> = Vec::with_capacity(docs.len() + 1);
        starts.push(0);
        let mut total_tokens = 0u64;
        for d in docs {
            for (term, impact) in d.impacts.iter() {
                term_of.push(table.intern(term.as_bytes()));
                impact_of.push(impact);
                total_tokens += u64::from(impact);
            }
            starts.push(term_of.len() as u32);
        }
        let mut df = vec![0u32; table.len()];
        for &t in &term_of {
            df[t as usize] += 1;
        }
        Self {
            table,
            starts,
            term_of,
            impact_of,
            df,
            total_tokens,
        }
    }

    /// `order[new_id] = old_id`: similar documents next to each other (but for
    /// [`DocOrder::Input`]). Each document is placed by its [`CLUSTER_TERMS`] terms of largest
    /// impact × idf.
    fn doc_order(&self, how: DocOrder) -> Vec<u32> {
        let num_docs = self.starts.len() - 1;
        if how == DocOrder::Input {
            return (0..num_docs as u32).collect();
        }
        let idf = reorder::term_weights(&self.df, num_docs);
        let mut starts = Vec::with_capacity(num_docs + 1);
        starts.push(0u32);
        let mut term_of = Vec::with_capacity(num_docs * CLUSTER_TERMS);
        let mut weight = Vec::with_capacity(num_docs * CLUSTER_TERMS);
        let mut doc: Vec<(f32, u32)> = Vec::new();
        for w in self.starts.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            doc.clear();
            doc.extend(
                self.term_of[a..b]
                    .iter()
                    .zip(&self.impact_of[a..b])
                    .map(|(&t, &i)| (idf[t as usize] * i as f32, t))
                    .filter(|&(w, _)| w > 0.0),
            );
            if doc.len() > CLUSTER_TERMS {
                doc.select_nth_unstable_by(CLUSTER_TERMS, |x, y| {
                    y.0.total_cmp(&x.0).then(x.1.cmp(&y.1))
                });
                doc.truncate(CLUSTER_TERMS);
            }
            for &(w, t) in &doc {
                term_of.push(t);
                weight.push(w);
            }
            starts.push(term_of.len() as u32);
        }
        let data = reorder::DocTerms {
            starts: &starts,
            term_of: &term_of,
            weight: &weight,
            num_terms: self.table.len(),
        };
        match how {
            DocOrder::Bisection => bisection::bisection_order(&data),
            _ => reorder::cluster_order(&data),
        }
    }

    /// Pass 2: counting sort by term id, documents renumbered by `order` (doc ids stay
    /// increasing within a term).
    fn into_buckets(self, order: &[u32]) -> ImpactBuckets {
        let num_terms = self.table.len();
        let nnz = self.term_of.len();
        let mut offsets = vec![0u32; num_terms + 1];
        for (t, &f) in self.df.iter().enumerate() {
            offsets[t + 1] = offsets[t] + f;
        }
        let mut cursor: Vec<u32> = offsets[..num_terms].to_vec();
        let mut out_docs = vec![0u32; nnz];
        let mut out_impacts = vec![0u32; nnz];
        for (new_id, &old) in order.iter().enumerate() {
            let (a, b) = (
                self.starts[old as usize] as usize,
                self.starts[old as usize + 1] as usize,
            );
            for p in a..b {
                let c = &mut cursor[self.term_of[p] as usize];
                out_docs[*c as usize] = new_id as u32;
                out_impacts[*c as usize] = self.impact_of[p];
                *c += 1;
            }
        }
        let table = self.table;
        let mut terms: Vec<u32> = (0..num_terms as u32).collect();
        terms.sort_unstable_by(|&a, &b| table.bytes(a).cmp(table.bytes(b)));
        ImpactBuckets {
            table,
            terms,
            offsets,
            docs: out_docs,
            impacts: out_impacts,
            total_tokens: self.total_tokens,
        }
    }
}

impl ImpactBuckets {
    /// The docs and impacts of term `id`, in doc order.
    fn postings_of(&self, id: u32) -> (&[u32], &[u32]) {
        let a = self.offsets[id as usize] as usize;
        let b = self.offsets[id as usize + 1] as usize;
        (&self.docs[a..b], &self.impacts[a..b])
    }

    /// The segment's forward index file ([`crate::forward_file`]) from the same buckets, in
    /// the same term order as the postings.
    fn write_forward_file(
        &self,
        segment: &tantivy::Segment,
        plan: crate::forward_index::ForwardPlan,
    ) -> Result<()> {
        // Every term's postings, in term order, handed to `f`.
        let walk = |f: &mut crate::forward_index::TermVisitor| {
            let mut postings: Vec<(u32, u32)> = Vec::new();
            for &id in &self.terms {
                let (docs, impacts) = self.postings_of(id);
                postings.clear();
                postings.extend(docs.iter().copied().zip(impacts.iter().copied()));
                f(&postings, impacts.iter().copied().max().unwrap_or(0))?;
            }
            Ok(())
        };
        let max_doc = segment.meta().max_doc();
        let stats = crate::forward_index::SegmentStats::gather(max_doc, plan, walk)?;
        let mut file = crate::forward_file::FileWriter::new(segment, &stats, plan)?;
        walk(&mut |postings, max| file.term(postings, max))?;
        file.finish()
    }

    /// Term frequency = impact, one `write_doc` per non-zero.
    fn write(
        &self,
        serializer: &mut InvertedIndexSerializer,
        field: tantivy::schema::Field,
    ) -> Result<()> {
        let mut fs = serializer.new_field(field, self.total_tokens, None)?;
        for &id in &self.terms {
            let term = self.table.bytes(id);
            let (docs, impacts) = self.postings_of(id);
            fs.new_term(term, docs.len() as u32, true)?;
            for (&doc, &impact) in docs.iter().zip(impacts) {
                fs.write_doc(doc, impact, &[]);
            }
            fs.close_term()?;
        }
        fs.close()?;
        Ok(())
    }
}

/// Copies one field's postings (doc ids only: the small fields are indexed without frequencies).
/// The `batch` field of a new segment: one term, every document.
fn write_batch_term(
    serializer: &mut InvertedIndexSerializer,
    field: tantivy::schema::Field,
    batch: &str,
    num_docs: u32,
) -> Result<()> {
    let mut fs = serializer.new_field(field, u64::from(num_docs), None)?;
    fs.new_term(batch.as_bytes(), num_docs, false)?;
    for doc in 0..num_docs {
        fs.write_doc(doc, 0, &[]);
    }
    fs.close_term()?;
    fs.close()?;
    Ok(())
}

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

/// The canary of the tantivy pin: segments written here must read back exactly like segments
/// tantivy's own `IndexWriter` writes from the same documents. An upgrade that changes the
/// hidden API's behaviour (postings, stored fields, fast fields, term dictionary) fails here.
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use lexlip_proto::{DocId, Document, Modality, QuantizedVector};
    use tantivy::collector::DocSetCollector;
    use tantivy::query::TermQuery;
    use tantivy::schema::{IndexRecordOption, Value};
    use tantivy::{DocSet, Index, IndexWriter, TERMINATED, TantivyDocument, Term};

    use super::{DocOrder, PendingDoc, stored_doc, write_segment};
    use crate::schema::{self, Fields};

    /// What a test reads back of one document: its stored fields (as JSON), its impacts
    /// (term → frequency), and which term queries on the small fields find it.
    type Readback = BTreeMap<String, (String, Vec<(String, u32)>, Vec<String>)>;

    fn docs() -> Vec<PendingDoc> {
        (0..300u32)
            .map(|i| {
                let mut doc = Document::new(
                    DocId::new(format!("doc-{i}")).unwrap(),
                    if i % 3 == 0 {
                        Modality::Image
                    } else {
                        Modality::Text
                    },
                );
                doc.text = (i % 2 == 0).then(|| format!("caption {i}"));
                doc.uri = (i % 5 == 0).then(|| format!("img/{i}.png"));
                if i % 4 == 0 {
                    doc.metadata.insert("group".into(), (i % 7).into());
                    doc.metadata
                        .insert("tag".into(), format!("t{}", i % 3).into());
                }
                let impacts = QuantizedVector::new((0..(1 + i % 40)).map(|t| {
                    (
                        format!("w{}", (i * 7 + t * 13) % 97),
                        u64::from(1 + (i + t) % 250),
                    )
                }))
                .unwrap();
                PendingDoc {
                    doc,
                    impacts,
                    dense: None,
                    thumbnail: (i % 6 == 0).then(|| vec![0xff, 0xd8, i as u8, 0xff, 0xd9]),
                }
            })
            .collect()
    }

    fn read_back(index: &Index, fields: &Fields) -> Readback {
        let reader = index.reader().unwrap();
        let searcher = reader.searcher();
        let mut out = Readback::new();
        let probes = [
            Term::from_field_text(fields.modality, "image"),
            Term::from_field_text(fields.modality, "text"),
            {
                let mut t = Term::from_field_json_path(fields.metadata, "tag", false);
                t.append_type_and_str("t1");
                t
            },
            {
                let mut t = Term::from_field_json_path(fields.metadata, "group", false);
                t.append_type_and_fast_value(3i64);
                t
            },
            Term::from_field_text(fields.batch.unwrap(), "b1"),
        ];
        let matches: Vec<std::collections::HashSet<tantivy::DocAddress>> = probes
            .iter()
            .map(|t| {
                searcher
                    .search(
                        &TermQuery::new(t.clone(), IndexRecordOption::Basic),
                        &DocSetCollector,
                    )
                    .unwrap()
            })
            .collect();
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            let inverted = segment.inverted_index(fields.impacts).unwrap();
            let mut per_doc: BTreeMap<u32, Vec<(String, u32)>> = BTreeMap::new();
            let mut stream = inverted.terms().stream().unwrap();
            while stream.advance() {
                let term = String::from_utf8(stream.key().to_vec()).unwrap();
                let mut postings = inverted
                    .read_postings_from_terminfo(stream.value(), IndexRecordOption::WithFreqs)
                    .unwrap();
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    let tf = tantivy::postings::Postings::term_freq(&postings);
                    per_doc.entry(doc).or_default().push((term.clone(), tf));
                    doc = postings.advance();
                }
            }
            for doc in 0..segment.max_doc() {
                let address = tantivy::DocAddress::new(ord as u32, doc);
                let stored: TantivyDocument = searcher.doc(address).unwrap();
                let id = stored
                    .get_first(fields.id)
                    .and_then(|v| v.as_str())
                    .unwrap()
                    .to_string();
                let found: Vec<String> = matches
                    .iter()
                    .zip(&probes)
                    .filter(|(m, _)| m.contains(&address))
                    .map(|(_, t)| format!("{t:?}"))
                    .collect();
                let mut impacts = per_doc.remove(&doc).unwrap_or_default();
                impacts.sort();
                let json = tantivy::Document::to_json(&stored, searcher.schema());
                out.insert(id, (json, impacts, found));
            }
        }
        out
    }

    #[test]
    fn tantivy_is_the_version_this_code_was_checked_against() {
        assert!(
            tantivy::version_string().starts_with("tantivy v0.27.0,"),
            "found {}: segment_builder writes through tantivy's #[doc(hidden)] segment API; \
             re-check this module (and these tests) before moving the pin",
            tantivy::version_string()
        );
        assert_eq!(
            tantivy::INDEX_FORMAT_VERSION,
            7,
            "tantivy's index format changed"
        );
    }

    #[test]
    fn written_segments_read_back_like_tantivys_own() {
        let (schema, fields) = schema::build();
        let docs = docs();

        // tantivy's way: impacts as repeated raw tokens (term frequency = impact).
        let plain = Index::create_in_ram(schema.clone());
        let mut writer: IndexWriter = plain.writer_with_num_threads(1, 20_000_000).unwrap();
        for d in &docs {
            let mut t = stored_doc(&fields, d);
            t.add_text(fields.batch.unwrap(), "b1");
            for (term, impact) in d.impacts.iter() {
                for _ in 0..impact {
                    t.add_text(fields.impacts, term);
                }
            }
            writer.add_document(t).unwrap();
        }
        writer.commit().unwrap();

        // Ours: one segment written directly, handed over with `add_segment`.
        let direct = Index::create_in_ram(schema);
        let mut writer: IndexWriter = direct.writer_with_num_threads(1, 20_000_000).unwrap();
        let meta = write_segment(&direct, &fields, &docs, "b1", DocOrder::default(), None)
            .unwrap()
            .unwrap();
        writer.add_segment(meta).unwrap();
        writer.commit().unwrap();

        let (ours, theirs) = (read_back(&direct, &fields), read_back(&plain, &fields));
        assert_eq!(ours.len(), docs.len());
        assert_eq!(ours, theirs);
        // Every document carries what it was given.
        for d in &docs {
            let (_, impacts, _) = &ours[d.doc.id.as_str()];
            let given: Vec<(String, u32)> =
                d.impacts.iter().map(|(t, i)| (t.to_string(), i)).collect();
            assert_eq!(impacts, &given);
        }
    }
}
