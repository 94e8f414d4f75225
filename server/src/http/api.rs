//! Request and response bodies of the HTTP API (their OpenAPI schemas come from these types).

use std::collections::BTreeMap;

use lexlip_proto::Modality;
use lexlip_proto::api::{CollectionStats, Filter, Hit};
pub use lexlip_proto::api::{Mode, RerankReport, SearchPath};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `PUT /v1/collections/{name}`. Every field is optional: `{}` creates a collection bound to the
/// server's encoder vocabulary with scale 100, all terms kept, dense search off, thumbnails on.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCollection {
    /// Quantization scale: impact = floor(scale · weight). Default: the server model's own
    /// (VDR's unit-length lexicons: 10000), else 100 (LexLIP).
    pub scale: Option<f32>,
    /// Keep only the K largest weights of each document (LexLIP Table 2: 64, 32, 16, …).
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 1)]
    pub top_k_terms: Option<usize>,
    /// Keep dense vectors for the fallback/hybrid search (dimension of the server's dense
    /// encoder, or `dense_dim`).
    #[serde(default)]
    pub dense: bool,
    /// Dense dimension when vectors are supplied precomputed (implies `dense`).
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 1)]
    pub dense_dim: Option<usize>,
    /// Store a small JPEG thumbnail with each image document added with image bytes, served by
    /// `GET …/documents/{id}/thumbnail`. Default true.
    pub thumbnails: Option<bool>,
}

/// A collection and its figures.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CollectionInfo {
    pub name: String,
    #[serde(flatten)]
    pub stats: CollectionStats,
    pub scale: f32,
    pub top_k_terms: Option<usize>,
    /// Dense dimension, when dense search is on.
    pub dense_dim: Option<usize>,
    /// Whether image documents added now keep a thumbnail (false when turned off, or for a
    /// collection made before thumbnails existed).
    pub thumbnails: bool,
    /// The vocabulary the collection is bound to.
    pub term_space: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CollectionList {
    pub collections: Vec<CollectionInfo>,
}

/// A document to add. Give `text`, `image` (base64) or a precomputed `vector`; `modality`
/// defaults to `image` when an image is given, else `text`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDocument {
    /// Unique id (1-512 bytes); adding an existing id replaces that document.
    pub id: String,
    pub modality: Option<Modality>,
    /// Caption or text; encoded when no `vector` is given (text documents).
    pub text: Option<String>,
    /// Image bytes, base64 (JPEG, PNG, WebP, GIF); encoded when no `vector` is given.
    pub image: Option<String>,
    pub uri: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Precomputed sparse vector: token → weight. Integers are impacts, other numbers are
    /// weights quantized with the collection's scale.
    #[schema(value_type = Object)]
    pub vector: Option<serde_json::Map<String, serde_json::Value>>,
    /// Precomputed dense vector (collections with dense on).
    pub dense: Option<Vec<f32>>,
}

/// `POST /v1/collections/{name}/documents`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddDocuments {
    pub documents: Vec<NewDocument>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AddedDocuments {
    /// Documents added or replaced.
    pub added: usize,
    /// Always true: documents are committed (searchable) when the call returns.
    pub committed: bool,
    /// Live documents after the commit.
    pub documents: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Deleted {
    pub deleted: bool,
}

/// A snapshot: an archive of one committed state of a collection, kept in the server's
/// `DATA/snapshots/{collection}/` (a plain tar file; `lexlip restore` reads it too).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SnapshotInfo {
    /// Its file name: names it in the snapshot routes.
    pub name: String,
    /// The collection it was taken of.
    pub collection: String,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    /// Live documents of the archived commit.
    pub documents: u64,
    pub segments: usize,
    /// Size of the archive.
    pub bytes: u64,
    pub term_space: String,
    /// The lexlip that wrote it.
    pub lexlip_version: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SnapshotList {
    /// Oldest first.
    pub snapshots: Vec<SnapshotInfo>,
}

/// `POST /v1/collections/{name}/snapshots/{snapshot}/restore`. `{}` restores the collection
/// the snapshot was taken of, if it does not exist.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreSnapshot {
    /// The name to restore under (default: the collection's own).
    pub into: Option<String>,
    /// Replace a collection of that name (default false: 409 when it exists).
    #[serde(default)]
    pub replace: bool,
}

/// What to search with: exactly one of the four.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Query {
    pub text: Option<String>,
    /// Base64 image bytes.
    pub image: Option<String>,
    /// token → weight (integers are impacts).
    #[schema(value_type = Object)]
    pub sparse: Option<serde_json::Map<String, serde_json::Value>>,
    pub dense: Option<Vec<f32>>,
}

/// The options every search request shares, once parsed.
#[derive(Debug, Clone)]
pub struct SearchParams {
    pub k: usize,
    pub mode: Mode,
    pub exact: Option<bool>,
    pub approx: Option<f32>,
    pub term_cut: Option<f32>,
    pub idf: Option<f32>,
    pub filter: Filter,
    /// Only documents of this modality.
    pub target: Option<Modality>,
    pub explain: bool,
    /// A second stage over the first stage's candidates.
    pub rerank: Option<Rerank>,
}

/// `rerank`: re-score the first `top` candidates with the server's re-ranker
/// (`lexlip serve --rerank-model`), text queries against image hits and image queries against
/// text hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rerank {
    /// Candidates re-scored (1-256); the first stage is asked for max(k, top).
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 1, maximum = 256)]
    pub top: usize,
}

impl SearchParams {
    /// The defaults of every option, `k` hits of `target` (multipart searches).
    pub fn top(k: usize, target: Option<Modality>) -> Self {
        Self {
            k,
            mode: Mode::default(),
            exact: None,
            approx: None,
            term_cut: None,
            idf: None,
            filter: Filter::default(),
            target,
            explain: false,
            rerank: None,
        }
    }
}

/// Declares a search request body: its own fields plus the search options every search request
/// shares (`k`, `mode`, `exact`, `approx`, `term_cut`, `idf`, `filter`, `explain`), unknown fields
/// refused.
/// (serde's `flatten` cannot be combined with `deny_unknown_fields`, hence a macro.)
macro_rules! search_request {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
            /// Number of hits (1-10000).
            #[serde(default = "default_k", deserialize_with = "whole_number")]
            #[schema(minimum = 1, maximum = 10000)]
            pub k: usize,
            #[serde(default)]
            pub mode: Mode,
            /// Exact top-k (default, unless the server was started with `--term-cut`, which
            /// then applies to requests that set none of `exact`, `approx` and `term_cut`).
            /// `false` trades recall for speed: with `approx` and/or `term_cut` as given, alone
            /// the sparse search with `term_cut` 0.1.
            pub exact: Option<bool>,
            /// Approximation factor ≥ 1 for the sparse search (blocks whose bound is below
            /// this times the k-th score are skipped); for dense, any value uses the HNSW graph.
            pub approx: Option<f32>,
            /// Sparse search, approximate: the query's lightest terms, whose largest
            /// contributions add up to at most this share (0-1) of its largest possible score,
            /// are left out of the block bounds (they still count in every score). Implies
            /// `"exact": false` (with `approx` 1 unless given).
            pub term_cut: Option<f32>,
            /// Sparse search: weight the query's terms by their rarity among the documents
            /// searched, each impact times ln(1 + N / df)^idf (0-4; 0 is off; 1 is BM25's
            /// IDF; unset, the server's `--idf`, off by default). Scores and explanations are
            /// the weighted query's.
            pub idf: Option<f32>,
            #[serde(default)]
            pub filter: Filter,
            /// Matched terms and their contributions per hit (sparse hits).
            #[serde(default)]
            pub explain: bool,
            /// Re-score the first stage's top candidates with the re-ranker (needs
            /// `lexlip serve --rerank-model`).
            pub rerank: Option<Rerank>,
        }

        impl $name {
            /// The shared search options, for hits of `target`.
            pub fn params(&self, target: Option<Modality>) -> SearchParams {
                SearchParams {
                    k: self.k,
                    mode: self.mode,
                    exact: self.exact,
                    approx: self.approx,
                    term_cut: self.term_cut,
                    idf: self.idf,
                    filter: self.filter.clone(),
                    target,
                    explain: self.explain,
                    rerank: self.rerank,
                }
            }
        }
    };
}

search_request! {
    /// `POST /v1/collections/{name}/search`.
    SearchRequest {
        query: Query,
        /// Only documents of this modality (text→image: `image`).
        target: Option<Modality>,
    }
}

pub fn default_k() -> usize {
    10
}

/// A count: a JSON integer, or a number with no fractional part (`35.0`), which JSON Schema's
/// `integer` also admits — so a body that passes the published schema is not refused here.
pub fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(u) = n.as_u64() {
        return usize::try_from(u).map_err(serde::de::Error::custom);
    }
    match n.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u32::MAX as f64 => Ok(f as usize),
        _ => Err(serde::de::Error::custom(format!(
            "expected a whole number ≥ 0, got {n}"
        ))),
    }
}

/// [`whole_number`] for an optional field (`null` or absent: none).
pub fn optional_whole_number<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    struct Whole(#[serde(deserialize_with = "whole_number")] usize);
    Ok(Option::<Whole>::deserialize(d)?.map(|Whole(n)| n))
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchResponse {
    pub hits: Vec<Hit>,
    pub path: SearchPath,
    /// Documents the sparse query matched among the first k (when the sparse index ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparse_matches: Option<usize>,
    /// The query's impacts (with `explain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_terms: Option<BTreeMap<String, u32>>,
    /// The re-ranking stage (with `rerank`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank: Option<RerankReport>,
    /// Hits whose `match_strength` is below this match the query weakly: the calibration of
    /// the model that encoded the query (`weak_match` in its `lexlip.json`). Absent for vector
    /// queries and models without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weak_match: Option<f64>,
    /// Whether the query matched its hits only weakly: the first hit's `match_strength` is
    /// below `weak_match` (then every hit is weak; otherwise none is). Absent with
    /// `weak_match`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weak: Option<bool>,
    pub took_ms: f64,
}

search_request! {
    /// `POST /v1/search/text-to-image`.
    TextToImage {
        collection: String,
        text: String,
    }
}

search_request! {
    /// `POST /v1/search/image-to-text` (JSON form; multipart takes `collection`, `k` and a file
    /// part `image`).
    ImageToText {
        collection: String,
        /// Base64 image bytes.
        image: String,
    }
}

/// `POST /v1/encode`: exactly one of `text`, `image`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EncodeRequest {
    pub text: Option<String>,
    /// Base64 image bytes.
    pub image: Option<String>,
    /// Show exactly what this collection would store: its scale, top-K and vocabulary apply.
    pub collection: Option<String>,
    /// Keep the K largest impacts (cut after quantizing, as collections do).
    pub top_k_terms: Option<usize>,
    /// Also return the dense embedding (needs a dense encoder).
    #[serde(default)]
    pub dense: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EncodeResponse {
    /// token → weight, largest first.
    #[schema(value_type = Object)]
    pub terms: serde_json::Map<String, serde_json::Value>,
    /// Impacts: with the collection's scale when one is named, else with scale 100.
    pub impacts: BTreeMap<String, u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dense: Option<Vec<f32>>,
}
