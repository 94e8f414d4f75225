//! The forward index persisted with its segment: a `.fwd` file written when the segment is
//! written or merged, then mapped and searched in place (its arrays are views into the file, see
//! [`crate::slab`]) instead of being rebuilt on the heap from the postings.
//!
//! It is a tantivy [`SegmentPlugin`], so tantivy owns the file's life: the plugin writes it for
//! every merged segment (after the postings, which it reads back), garbage collection keeps it
//! while its segment lives and deletes it with the segment, and an interrupted merge leaves
//! nothing that a commit refers to. Segments that lexlip writes itself
//! ([`crate::segment_builder`]) get theirs from [`write`] before they are added. Deleted
//! documents stay in the file, as they stay in the postings; search filters them as on every
//! path, so the file is never stale.
//!
//! Only collections created with the plugin have the files (tantivy fixes a collection's
//! plugins at creation); older collections, collections created without them, segments written
//! for another block size and files that fail to read fall back to building the forward index
//! from the postings, which stay the store of record.
//!
//! ```text
//! header   "LXFWD" 0 0 version u8 (4; 1 to 3 are read too) | shift u32 | num_blocks u32
//!          | from version 4: segment layout u32 (0 terms, 1 documents) | term bits u32
//!          | entry bytes u32 (both 0 in the terms layout)
//! per term, in term-dictionary order, starting at a multiple of 4 bytes:
//!          n u32 | max u32 | step u32 (0: no bound codes) | layout u8 (0 dense, 1 sparse,
//!          2 bounds only) | impact bytes u8 (1 or 2; 0 for bounds only) | bound codes u8 (0
//!          none, 1 a byte per block, 2 four bits per block: sparse terms from version 3)
//!          | narrow docs u8 (0 or 1; 0 in version 1)
//!   dense  maxima [u8; blocks] | starts [u32; blocks + 1] | offsets [u8; n] | impacts [n]
//!   sparse docs [u32; n], or [u16; n] counted from their skip group's first doc if narrow
//!          | impacts [n] | maxima [u8; blocks], or [u8; ceil(blocks / 2)] two 4-bit codes
//!          per byte (low half first), if any
//!          | group_shift u32 | groups len u32 | groups [u32]
//!   bounds maxima [u8; blocks] or [u8; ceil(blocks / 2)], if any (documents layout)
//! documents layout, after the terms:
//!          non-zeros u32 | starts [u32; max_doc + 1] | entries [u8; non-zeros · entry bytes]
//!          | 64 zero bytes                                 (see crate::doc_vectors)
//! ```
//! Integers are little-endian; arrays of u32 and u16 start at a multiple of their size (zeros
//! before them), so they can be read in place. Every length, position and order search relies
//! on is checked when the file is opened, so a damaged file is refused, never searched.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tantivy::directory::{OwnedBytes, TerminatingWrite};
use tantivy::index::SegmentComponent;
use tantivy::schema::document::ErasedDocument;
use tantivy::schema::{Field, Schema};
use tantivy::space_usage::ComponentSpaceUsage;
use tantivy::{DocId, Segment, SegmentReader};
use tantivy::{PluginMergeContext, PluginWriter, PluginWriterContext, SegmentPlugin};

use crate::doc_vectors::{self, DocVectors, EntryLayout};
use crate::error::{IndexError, Result};
use crate::forward::{BoundCodes, Docs, Impacts, NARROW_SPAN, TermPostings};
use crate::forward_index::{
    self, ForwardBuilder, ForwardIndex, ForwardPlan, ForwardTerm, Layout, SegmentStats,
};
use crate::slab::{Plain, Slab};

/// File extension of the forward index of a segment.
pub const EXTENSION: &str = "fwd";
/// The file's first bytes, less the version byte that ends them.
const MAGIC: &[u8; 7] = b"LXFWD\0\0";
/// The version written. Versions 1 (before narrow doc ids), 2 (before 4-bit bounds for sparse
/// terms) and 3 (before the documents layout) are read as well.
const VERSION: u8 = 4;

pub(crate) fn component() -> SegmentComponent {
    SegmentComponent::Custom(EXTENSION.to_string())
}

/// The plugin a collection registers on its tantivy index. The plan (block size and layout,
/// packed into one integer) is shared with the collection, which may change it
/// ([`crate::collection::Collection::set_block_size`]): files are written for the plan in force at the time.
#[derive(Debug, Clone)]
pub struct ForwardPlugin {
    impacts: Field,
    plan: Arc<AtomicU32>,
}

impl ForwardPlugin {
    pub fn new(impacts: Field, plan: Arc<AtomicU32>) -> Self {
        Self { impacts, plan }
    }

    fn plan(&self) -> ForwardPlan {
        ForwardPlan::unpack(self.plan.load(Ordering::Relaxed))
    }
}

impl SegmentPlugin for ForwardPlugin {
    fn extensions(&self) -> &[&str] {
        &[EXTENSION]
    }

    fn create_writer(&self, _ctx: &PluginWriterContext) -> tantivy::Result<Box<dyn PluginWriter>> {
        Ok(Box::new(CountingWriter {
            plugin: self.clone(),
            docs: 0,
        }))
    }

    /// The merged postings are on disk already (custom plugins run after the built-in ones):
    /// the file is built from them, so it matches the merged segment's doc ids by construction.
    fn merge(&self, ctx: PluginMergeContext) -> tantivy::Result<()> {
        // The merged segment holds every source's alive documents (as tantivy's merger counts).
        let max_doc = ctx.readers.iter().map(SegmentReader::num_docs).sum();
        let segment = ctx.target_segment.clone().with_max_doc(max_doc);
        write(&segment, self.impacts, self.plan()).map_err(to_tantivy)
    }

    /// The file's size, or nothing where it cannot be opened: a segment may have none, and a
    /// background merge may have deleted a merged segment's file while a snapshot still holds
    /// the segment (tantivy's default would fail `stats` then).
    fn space_usage(
        &self,
        reader: &SegmentReader,
    ) -> tantivy::Result<BTreeMap<String, ComponentSpaceUsage>> {
        let mut usage = BTreeMap::new();
        if let Ok(file) = reader.open_read(component()) {
            let bytes = tantivy::HasLen::len(&file);
            usage.insert(
                EXTENSION.to_string(),
                ComponentSpaceUsage::Basic(bytes.into()),
            );
        }
        Ok(usage)
    }
}

/// tantivy's own segment writer (lexlip writes new segments itself, so this runs only if
/// documents ever go through `IndexWriter::add_document`): counts the documents, then builds the
/// file from the segment's postings once they are written.
struct CountingWriter {
    plugin: ForwardPlugin,
    docs: u32,
}

impl PluginWriter for CountingWriter {
    fn add_document(
        &mut self,
        _: DocId,
        _: &dyn ErasedDocument,
        _: &Schema,
    ) -> tantivy::Result<()> {
        self.docs += 1;
        Ok(())
    }

    fn serialize(
        self: Box<Self>,
        segment: &Segment,
        _doc_id_map: Option<&tantivy::indexer::doc_id_mapping::DocIdMapping>,
    ) -> tantivy::Result<()> {
        let segment = segment.clone().with_max_doc(self.docs);
        write(&segment, self.plugin.impacts, self.plugin.plan()).map_err(to_tantivy)
    }

    fn mem_usage(&self) -> usize {
        0
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

fn to_tantivy(e: IndexError) -> tantivy::TantivyError {
    match e {
        IndexError::Tantivy(e) => e,
        other => tantivy::TantivyError::InternalError(other.to_string()),
    }
}

/// Writes the forward index of `segment` (its postings written, its `max_doc` set) as `plan`
/// has it for this segment, from its postings: two passes over them, the first to plan the
/// layout. Keeps one term's postings in memory at a time, and the documents' vectors in the
/// documents layout.
pub fn write(segment: &Segment, impacts: Field, plan: ForwardPlan) -> Result<()> {
    let reader = SegmentReader::open(segment)?;
    let stats = SegmentStats::gather(reader.max_doc(), plan, |f| {
        forward_index::for_each_term(&reader, impacts, |_, _, postings, max| f(postings, max))
    })?;
    let mut file = FileWriter::new(segment, &stats, plan)?;
    forward_index::for_each_term(&reader, impacts, |_, _, postings, max| {
        file.term(postings, max)
    })?;
    file.finish()
}

/// A forward index file being written, one term at a time in term order (the order of the
/// segment's term dictionary), after a first pass gathered the segment's [`SegmentStats`]. Used
/// directly where the postings are at hand already, as when lexlip writes a segment.
pub(crate) struct FileWriter {
    out: tantivy::directory::WritePtr,
    buf: Vec<u8>,
    builder: ForwardBuilder,
}

impl FileWriter {
    /// Starts the file of `segment` (its `max_doc` set).
    pub(crate) fn new(segment: &Segment, stats: &SegmentStats, plan: ForwardPlan) -> Result<Self> {
        let builder = ForwardBuilder::new(stats, plan);
        let out = segment
            .open_write(component())
            .map_err(tantivy::TantivyError::from)?;
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(MAGIC);
        buf.push(VERSION);
        put_u32(&mut buf, builder.shift);
        put_u32(&mut buf, builder.num_blocks);
        put_u32(&mut buf, u32::from(builder.layout == Layout::Documents));
        let entries = builder.entry_layout();
        put_u32(&mut buf, entries.map_or(0, |e| e.term_bits));
        put_u32(&mut buf, entries.map_or(0, |e| e.entry_bytes));
        Ok(Self { out, buf, builder })
    }

    /// The next term's (doc, impact) postings in doc order, and their largest impact.
    pub(crate) fn term(&mut self, postings: &[(u32, u32)], max: u32) -> Result<()> {
        let t = self.builder.term(postings, max);
        encode(&t, postings.len() as u32, max, &mut self.buf);
        // Whole terms only: the buffer is flushed at multiples of 4 bytes, keeping alignment.
        self.flush_some()
    }

    fn flush_some(&mut self) -> Result<()> {
        if self.buf.len() >= 1 << 16 {
            self.out.write_all(&self.buf).map_err(io_error)?;
            self.buf.clear();
        }
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<()> {
        if let Some(docs) = self.builder.finish() {
            encode_docs(&docs, &mut self.buf);
        }
        self.out.write_all(&self.buf).map_err(io_error)?;
        self.out.terminate().map_err(io_error)?;
        Ok(())
    }
}

/// Appends the documents' vectors (see the module's layout); starts and ends at a multiple of
/// 4 bytes.
fn encode_docs(docs: &DocVectors, buf: &mut Vec<u8>) {
    let starts = docs.starts();
    put_u32(buf, starts.last().copied().unwrap_or(0));
    put_u32s(buf, starts);
    buf.extend_from_slice(docs.entries());
    pad(buf, 4);
}

fn io_error(e: std::io::Error) -> IndexError {
    IndexError::Tantivy(tantivy::TantivyError::from(e))
}

/// Size of the segment's forward index file (0 when it has none; a file is never empty).
pub fn file_bytes(reader: &SegmentReader) -> u64 {
    reader
        .open_read(component())
        .map_or(0, |f| tantivy::HasLen::len(&f) as u64)
}

/// A segment's forward index: read from the file written with the segment where there is one
/// that `plan` accepts, built from the postings otherwise. A damaged file is reported and the
/// index built from the postings: search stays exact.
pub fn open(reader: &SegmentReader, impacts: Field, plan: ForwardPlan) -> Result<ForwardIndex> {
    match read(reader, impacts) {
        Ok(Some(m)) if plan.accepts(m.shift, m.layout()) => return Ok(m),
        Ok(_) => {}
        Err(e) => tracing::warn!("{e}; building it from the postings instead"),
    }
    ForwardIndex::compute(reader, impacts, plan)
}

/// The segment's forward index read from its file, whatever its block size and layout;
/// `None` when the segment has none (the caller builds it from the postings). An error means the
/// file is damaged or does not belong to the segment's postings.
pub fn read(reader: &SegmentReader, impacts: Field) -> Result<Option<ForwardIndex>> {
    let Ok(file) = reader.open_read(component()) else {
        return Ok(None);
    };
    let bytes = file.read_bytes().map_err(tantivy::TantivyError::from)?;
    let mut r = Cursor { bytes, pos: 0 };
    let corrupt = |what: &str| IndexError::Tantivy(corrupt_error(reader, what));
    if r.take(MAGIC.len()).ok().as_deref() != Some(&MAGIC[..]) {
        return Err(corrupt("not a lexlip forward index"));
    }
    let version = r.take(1).map_err(corrupt)?[0];
    if !(1..=VERSION).contains(&version) {
        return Err(corrupt(&format!(
            "version {version}, written by a newer lexlip (this one reads 1 to {VERSION})"
        )));
    }
    let file_shift = r.u32().map_err(corrupt)?;
    let num_blocks = r.u32().map_err(corrupt)?;
    if forward_index::clamp_shift(file_shift) != file_shift {
        return Err(corrupt("its block size is not one lexlip uses"));
    }
    if num_blocks != forward_index::num_blocks(reader.max_doc(), file_shift) {
        return Err(corrupt("its block count does not match the segment"));
    }
    // Versions before 4 hold the terms layout only.
    let entries = if version >= 4 {
        let documents = r.u32().map_err(corrupt)?;
        let (term_bits, entry_bytes) = (r.u32().map_err(corrupt)?, r.u32().map_err(corrupt)?);
        match documents {
            0 => None,
            1 => Some(EntryLayout {
                term_bits,
                entry_bytes,
            }),
            _ => return Err(corrupt("unknown segment layout")),
        }
    } else {
        None
    };
    let max_doc = reader.max_doc();
    let inverted = reader.inverted_index(impacts)?;
    let mut stream = inverted.terms().stream()?;
    let mut out = ForwardIndex::empty(file_shift, num_blocks, inverted.terms().num_terms());
    let mut nnz = 0u64;
    while stream.advance() {
        let term_info = stream.value().clone();
        nnz += u64::from(term_info.doc_freq);
        let (postings, max) = decode(&mut r, term_info.doc_freq, file_shift, num_blocks, max_doc)
            .map_err(|e| {
            corrupt(&format!(
                "term {:?}: {e}",
                String::from_utf8_lossy(stream.key())
            ))
        })?;
        if matches!(postings, TermPostings::Bounds { .. }) != entries.is_some() {
            return Err(corrupt("a term's layout is not the segment's"));
        }
        let term = ForwardTerm::new(term_info, max, file_shift, postings);
        out.insert(stream.key(), term);
    }
    if let Some(layout) = entries {
        let docs = decode_docs(&mut r, layout, max_doc, nnz).map_err(corrupt)?;
        if u64::from(out.num_terms()) > 1 << layout.term_bits {
            return Err(corrupt("its term ordinals do not fit its entries"));
        }
        out.set_docs(Some(docs));
    }
    if r.pos != r.bytes.len() {
        return Err(corrupt("it holds more terms than the segment"));
    }
    Ok(Some(out))
}

/// Reads the documents' vectors written by [`encode_docs`]: `max_doc` documents holding `nnz`
/// non-zeros (what the dictionary says the postings hold), starts in order, padding zero.
fn decode_docs(
    r: &mut Cursor,
    layout: EntryLayout,
    max_doc: u32,
    nnz: u64,
) -> std::result::Result<DocVectors, &'static str> {
    if !(1..=doc_vectors::MAX_TERM_BITS).contains(&layout.term_bits)
        || !matches!(layout.entry_bytes, 3 | 4)
    {
        return Err("bad entry layout");
    }
    let n = r.u32()?;
    if u64::from(n) != nnz {
        return Err("its documents' vectors do not hold the segment's postings");
    }
    let starts: Slab<u32> = r.slab(max_doc as usize + 1)?;
    let len = n as usize * layout.entry_bytes as usize + doc_vectors::PADDING;
    let entries: Slab<u8> = r.slab(len)?;
    r.align(4);
    DocVectors::from_parts(starts, entries, layout).ok_or("documents' vectors out of order")
}

fn corrupt_error(reader: &SegmentReader, what: &str) -> tantivy::TantivyError {
    tantivy::TantivyError::InternalError(format!(
        "the forward index of segment {} (its .{EXTENSION} file) is damaged: {what}",
        reader.segment_id().uuid_string(),
    ))
}

fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_u32s(buf: &mut Vec<u8>, vs: &[u32]) {
    pad(buf, 4);
    for &v in vs {
        put_u32(buf, v);
    }
}

/// Zeros up to the next multiple of `align`, so that arrays can be read in place from the
/// mapped file (which starts page-aligned; `buf` is only ever flushed at multiples of 4).
fn pad(buf: &mut Vec<u8>, align: usize) {
    buf.resize(buf.len().next_multiple_of(align), 0);
}

fn put_u16s(buf: &mut Vec<u8>, vs: &[u16]) {
    pad(buf, 2);
    for &v in vs {
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

fn put_impacts(buf: &mut Vec<u8>, impacts: &Impacts) {
    match impacts {
        Impacts::Narrow(w) => buf.extend_from_slice(w),
        Impacts::Wide(w) => put_u16s(buf, w),
    }
}

/// Appends one term (see the module's layout); it starts and ends at a multiple of 4 bytes.
fn encode(t: &TermPostings, n: u32, max: u32, buf: &mut Vec<u8>) {
    let (layout, width) = match t {
        TermPostings::Dense { impacts, .. } => (0, impacts.width()),
        TermPostings::Sparse { impacts, .. } => (1, impacts.width()),
        TermPostings::Bounds { .. } => (2, 0),
    };
    let (step, has_maxima) = match t.block_maxima() {
        Some((BoundCodes::Bytes(_), step)) => (step, 1),
        Some((BoundCodes::Nibbles(_), step)) => (step, 2),
        None => (0, 0),
    };
    let narrow = matches!(
        t,
        TermPostings::Sparse {
            docs: Docs::Narrow(_),
            ..
        }
    );
    put_u32(buf, n);
    put_u32(buf, max);
    put_u32(buf, step);
    buf.extend_from_slice(&[layout, width, has_maxima, u8::from(narrow)]);
    match t {
        TermPostings::Dense {
            maxima,
            starts,
            offsets,
            impacts,
            ..
        } => {
            buf.extend_from_slice(maxima.bytes());
            put_u32s(buf, starts);
            buf.extend_from_slice(offsets);
            put_impacts(buf, impacts);
        }
        TermPostings::Sparse {
            docs,
            impacts,
            maxima,
            groups,
            group_shift,
        } => {
            match docs {
                Docs::Wide(docs) => put_u32s(buf, docs),
                Docs::Narrow(docs) => put_u16s(buf, docs),
            }
            put_impacts(buf, impacts);
            if let Some((m, _)) = maxima {
                buf.extend_from_slice(m.bytes());
            }
            pad(buf, 4);
            put_u32(buf, *group_shift);
            put_u32(buf, groups.len() as u32);
            put_u32s(buf, groups);
        }
        TermPostings::Bounds { maxima } => {
            if let Some((m, _)) = maxima {
                buf.extend_from_slice(m.bytes());
            }
        }
    }
    pad(buf, 4);
}

/// Reads one term written by [`encode`], whose postings the segment's dictionary says number
/// `doc_freq`, checking everything search relies on: lengths, doc ids in order and inside the
/// segment, block starts in order, steps and shifts in range. Its arrays are views into the
/// file's bytes.
fn decode(
    r: &mut Cursor,
    doc_freq: u32,
    shift: u32,
    num_blocks: u32,
    max_doc: u32,
) -> std::result::Result<(TermPostings, u32), &'static str> {
    let n = r.u32()? as usize;
    let max = r.u32()?;
    let step = r.u32()?;
    let [layout, width, has_maxima, narrow] =
        <[u8; 4]>::try_from(&r.take(4)?[..]).map_err(|_| "truncated")?;
    let blocks = num_blocks as usize;
    if n != doc_freq as usize || n > max_doc as usize {
        return Err("its postings do not match the segment's");
    }
    // Bound codes: 1 a byte per block, 2 four bits per block (sparse terms, version 3).
    if (has_maxima > 0) != (step > 0) || has_maxima > 2 || (has_maxima == 2 && layout == 0) {
        return Err("bad block maxima step");
    }
    if narrow > 1 || (narrow == 1 && layout != 1) {
        return Err("bad doc id width");
    }
    let impacts = |r: &mut Cursor| -> std::result::Result<Impacts, &'static str> {
        match width {
            1 => Ok(Impacts::Narrow(r.slab(n)?)),
            2 => {
                r.align(2);
                Ok(Impacts::Wide(r.slab(n)?))
            }
            _ => Err("unknown impact width"),
        }
    };
    let t = match layout {
        0 if has_maxima == 1 => {
            let maxima = BoundCodes::Bytes(r.slab(blocks)?);
            r.align(4);
            let starts: Slab<u32> = r.slab(blocks + 1)?;
            let ordered = starts.windows(2).all(|w| w[0] <= w[1]);
            if !ordered || starts[0] != 0 || starts[blocks] as usize != n {
                return Err("block starts out of order");
            }
            let mask = (1u32 << shift) - 1;
            let offsets: Slab<u8> = r.slab(n)?;
            if offsets.iter().any(|&o| u32::from(o) > mask) {
                return Err("doc offset outside its block");
            }
            TermPostings::Dense {
                maxima,
                step,
                starts,
                offsets,
                impacts: impacts(r)?,
            }
        }
        1 => {
            let docs = if narrow == 1 {
                r.align(2);
                Docs::Narrow(r.slab(n)?)
            } else {
                r.align(4);
                let docs: Slab<u32> = r.slab(n)?;
                let ordered = docs.windows(2).all(|w| w[0] < w[1]);
                if !ordered || docs.last().is_some_and(|&d| d >= max_doc) {
                    return Err("doc ids out of order or outside the segment");
                }
                Docs::Wide(docs)
            };
            let impacts = impacts(r)?;
            let maxima = match has_maxima {
                1 => Some((BoundCodes::Bytes(r.slab(blocks)?), step)),
                2 => Some((BoundCodes::Nibbles(nibbles(r, blocks)?), step)),
                _ => None,
            };
            r.align(4);
            let group_shift = r.u32()?;
            let num_groups = r.u32()? as usize;
            r.align(4);
            let groups: Slab<u32> = r.slab(num_groups)?;
            if num_groups > 0 {
                let ordered = groups.windows(2).all(|w| w[0] <= w[1]);
                // `span` reads `groups[g + 1]` for the group `g` of every block.
                let covers = group_shift < 32 && blocks.div_ceil(1 << group_shift) < num_groups;
                if !ordered || !covers || groups[num_groups - 1] as usize > n {
                    return Err("bad skip groups");
                }
            }
            if let Docs::Narrow(docs) = &docs {
                check_narrow(docs, &groups, shift + group_shift, max_doc)?;
            }
            TermPostings::Sparse {
                docs,
                impacts,
                maxima,
                groups,
                group_shift,
            }
        }
        2 => TermPostings::Bounds {
            maxima: match has_maxima {
                1 => Some((BoundCodes::Bytes(r.slab(blocks)?), step)),
                2 => Some((BoundCodes::Nibbles(nibbles(r, blocks)?), step)),
                _ => None,
            },
        },
        _ => return Err("unknown layout"),
    };
    r.align(4);
    Ok((t, max))
}

/// Reads the 4-bit bound codes of `blocks` blocks.
fn nibbles(r: &mut Cursor, blocks: usize) -> std::result::Result<Slab<u8>, &'static str> {
    let codes: Slab<u8> = r.slab(blocks.div_ceil(2))?;
    // The half byte after an odd last block is not a block.
    if blocks % 2 == 1 && codes[blocks / 2] >> 4 != 0 {
        return Err("a bound code past the last block");
    }
    Ok(codes)
}

/// Checks narrow doc ids against their skip groups (groups of `2^group_docs` documents): every
/// posting in a group, each group's doc ids in order, inside the group and inside the segment.
fn check_narrow(
    docs: &[u16],
    groups: &[u32],
    group_docs: u32,
    max_doc: u32,
) -> std::result::Result<(), &'static str> {
    if group_docs > NARROW_SPAN.trailing_zeros()
        || groups.first().is_none_or(|&g| g != 0)
        || groups.last().is_none_or(|&g| g as usize != docs.len())
    {
        return Err("narrow doc ids without skip groups to count them from");
    }
    for (g, w) in groups.windows(2).enumerate() {
        let in_group = &docs[w[0] as usize..w[1] as usize];
        let ordered = in_group.windows(2).all(|w| w[0] < w[1]);
        let inside = in_group.last().is_none_or(|&d| {
            u32::from(d) >> group_docs == 0
                && ((g as u64) << group_docs) + u64::from(d) < u64::from(max_doc)
        });
        if !ordered || !inside {
            return Err("doc ids out of order or outside the segment");
        }
    }
    Ok(())
}

/// Reads the file front to back; arrays come out as views into its bytes.
struct Cursor {
    bytes: OwnedBytes,
    pos: usize,
}

impl Cursor {
    fn take(&mut self, n: usize) -> std::result::Result<OwnedBytes, &'static str> {
        let end = self.pos.checked_add(n).ok_or("truncated")?;
        if end > self.bytes.len() {
            return Err("truncated");
        }
        let out = self.bytes.slice(self.pos..end);
        self.pos = end;
        Ok(out)
    }

    fn align(&mut self, align: usize) {
        self.pos = self.pos.next_multiple_of(align);
    }

    fn u32(&mut self) -> std::result::Result<u32, &'static str> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn slab<T: Plain>(&mut self, n: usize) -> std::result::Result<Slab<T>, &'static str> {
        let bytes = self.take(n.checked_mul(std::mem::size_of::<T>()).ok_or("truncated")?)?;
        Slab::from_le_bytes(bytes).ok_or("truncated")
    }
}

#[cfg(test)]
mod tests;
