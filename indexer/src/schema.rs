//! The tantivy schema of a collection.
//!
//! One tantivy document per item. The impacts of its terms are the *term frequencies* of the
//! `impacts` field: no positions, no field norms, nothing stored — exactly the information the
//! dot product needs and nothing else (LexLIP sec. 3.4). Stored alongside, never indexed: the
//! document's fields, its dense vector and its image thumbnail.

use tantivy::schema::{
    Field, IndexRecordOption, JsonObjectOptions, STORED, Schema, TextFieldIndexing, TextOptions,
};

/// Field handles of the collection schema.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    pub id: Field,
    pub modality: Field,
    pub uri: Field,
    pub text: Field,
    pub metadata: Field,
    pub impacts: Field,
    /// Dense fallback vectors (stored bytes); absent in collections made before it existed.
    pub dense: Option<Field>,
    /// Image thumbnails (stored bytes, see `lexlip_model::thumbnail`); absent in collections made
    /// before it existed, which keep working without thumbnails.
    pub thumbnail: Option<Field>,
    /// One term per written segment, shared by its documents (indexed, not stored): a replace
    /// deletes "this id, not in the new segment's batch", so the deletes and the new segment go
    /// in one commit. Absent in collections made before it existed, which replace in two commits.
    pub batch: Option<Field>,
}

pub const ID: &str = "id";
pub const MODALITY: &str = "modality";
pub const URI: &str = "uri";
pub const TEXT: &str = "text";
pub const METADATA: &str = "metadata";
pub const IMPACTS: &str = "impacts";
pub const DENSE: &str = "dense";
pub const THUMBNAIL: &str = "thumbnail";
pub const BATCH: &str = "batch";

fn raw_indexing(option: IndexRecordOption) -> TextFieldIndexing {
    TextFieldIndexing::default()
        .set_tokenizer("raw")
        .set_index_option(option)
        .set_fieldnorms(false)
}

/// Builds the schema and its field handles.
pub fn build() -> (Schema, Fields) {
    build_with(true, true, true)
}

/// The schema of a collection made before the optional fields existed (`dense`, `thumbnail`
/// when false; never `batch`): such collections must keep opening and working, and tests build
/// them with this.
pub fn build_legacy(dense: bool, thumbnail: bool) -> Schema {
    build_with(dense, thumbnail, false).0
}

fn build_with(with_dense: bool, with_thumbnail: bool, with_batch: bool) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let keyword =
        TextOptions::default().set_indexing_options(raw_indexing(IndexRecordOption::Basic));
    let id = b.add_text_field(ID, keyword.clone().set_stored());
    let modality = b.add_text_field(MODALITY, keyword.set_stored());
    let uri = b.add_text_field(URI, STORED);
    let text = b.add_text_field(TEXT, STORED);
    let metadata = b.add_json_field(
        METADATA,
        JsonObjectOptions::default()
            .set_stored()
            .set_indexing_options(raw_indexing(IndexRecordOption::Basic)),
    );
    let impacts = b.add_text_field(
        IMPACTS,
        TextOptions::default().set_indexing_options(raw_indexing(IndexRecordOption::WithFreqs)),
    );
    let dense = with_dense.then(|| b.add_bytes_field(DENSE, STORED));
    let thumbnail = with_thumbnail.then(|| b.add_bytes_field(THUMBNAIL, STORED));
    let batch = with_batch.then(|| {
        b.add_text_field(
            BATCH,
            TextOptions::default().set_indexing_options(raw_indexing(IndexRecordOption::Basic)),
        )
    });
    let schema = b.build();
    (
        schema,
        Fields {
            id,
            modality,
            uri,
            text,
            metadata,
            impacts,
            dense,
            thumbnail,
            batch,
        },
    )
}

/// Field handles of an existing schema; fails when the schema is not a lexlip collection's.
pub fn fields_of(schema: &Schema) -> tantivy::Result<Fields> {
    let get = |name: &str| schema.get_field(name);
    Ok(Fields {
        id: get(ID)?,
        modality: get(MODALITY)?,
        uri: get(URI)?,
        text: get(TEXT)?,
        metadata: get(METADATA)?,
        impacts: get(IMPACTS)?,
        dense: get(DENSE).ok(),
        thumbnail: get(THUMBNAIL).ok(),
        batch: get(BATCH).ok(),
    })
}
