//! The `lexlip` server crate: the command line ([`cli`]) and the axum HTTP API ([`http`]).
//!
//! The binary (`main.rs`) only parses arguments and calls [`cli::run`]; the work lives in the
//! engine (`lexlip-index`), the encoders (`lexlip-model`) and batch indexing
//! (`lexlip-pipeline`). Tests drive [`http::router`] in-process.

pub mod cli;
pub mod http;
pub mod memory;
pub mod signal;
