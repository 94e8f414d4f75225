//! How a query becomes a ranked list: the search *policy* over one collection snapshot.
//!
//! The engine (`lexlip-index`) answers one sparse or one dense top-k. This crate decides which
//! of them run and how their answers combine, once, for every caller — the HTTP route, `lexlip
//! search` and `lexlip eval`:
//!
//! - [`request`]: a request's fields or flags, with the server's and the model's defaults, made
//!   a [`SearchPlan`] (what a search asks for: k, [`Mode`], precision, filter; validated), and
//!   its answer cut and judged weak or not, the same for the route and the command line;
//! - [`Searcher`]: runs a plan on a snapshot — sparse, dense, hybrid (reciprocal-rank
//!   [`fusion`]) and the dense fallback when the sparse index matches fewer than k documents;
//! - [`idf`]: the optional weighting of a sparse query by its terms' rarity in the collection;
//! - [`rerank`]: the optional second stage over the first stage's candidates.
//!
//! Queries arrive encoded (the caller owns its encoders: the server batches them, the CLI calls
//! them directly); the dense query is asked for only when the plan needs it.

pub mod error;
pub mod fusion;
pub mod idf;
pub mod plan;
pub mod request;
pub mod rerank;
pub mod searcher;

pub use error::SearchError;
pub use lexlip_proto::api::{Mode, RerankReport, SearchPath};
pub use plan::{DEFAULT_TERM_CUT, SearchPlan, precision, precision_or_default};
pub use rerank::{RerankQuery, rerank};
pub use searcher::{DenseNeed, Found, Ranked, Ranking, Searcher};
