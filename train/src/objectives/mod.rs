//! What a run trains, one module an objective. Each supplies its batches, losses, fingerprint
//! key and export to the one loop (`steps`), whose `Trainer` owns what they share
//! (optimizer, schedule, resume, checkpoints, summary, the stop flag, divergence checks).
//!
//! - [`lexlip`]: LexLIP phase 1 / 2 and the dense baseline over the same towers
//!   (`--objective lexlip`, `dense`).
//! - [`heads`]: lexicon heads over a frozen dense model, on an embedding cache (`heads`).
//! - [`adapter`]: a pretrained image tower projected beside a dense teacher (`adapter`).
//! - [`rerank`]: the MaskVLM re-ranker (`rerank`).

pub mod adapter;
pub mod heads;
pub mod lexlip;
pub mod rerank;
