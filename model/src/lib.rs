//! LexLIP encoders in Candle.
//!
//! Text and images become sparse, non-negative weights over a word-piece vocabulary (LexLIP
//! sec. 3.1, eq. 1-6): a transformer produces masked-LM logits for every token, and
//! `w = log(1 + max_over_tokens(relu(logits)))` pools them ([`pooling`]).
//!
//! - [`TextEncoder`]: BERT masked LM (Hugging Face `BertForMaskedLM` layout) + tokenizer.
//! - [`ImageEncoder`]: BEiT ([`beit`], HF layout) + BERT-style MLM head over every token.
//! - [`weight_sharing`]: COOKIE's layers shared by both towers, between each tower and its head.
//! - [`DenseEncoder`]: embeddings for the dense fallback, from CLIP ([`ClipEncoder`]), SigLIP
//!   ([`SiglipEncoder`]), MobileCLIP ([`MobileClipEncoder`]) or the dense dual encoder `lexlip train --objective dense` writes
//!   ([`DualEncoder`]).
//! - [`Encoders`]: loads a LexLIP Lightning checkpoint, a LexLIP directory or a single HF encoder
//!   directory, detecting which; [`convert_checkpoint`] turns a checkpoint into a directory.
//!
//! Everything runs on the CPU by default; with the `cuda` feature, [`device`]`(true)` picks the GPU
//! and the image encoder runs in f16 there (pooling and `log` in f32).

pub mod beit;
pub mod bert;
pub mod blip;
pub mod catmull_rom;
pub mod checkpoint;
pub mod clip;
pub mod config;
mod conv;
pub mod d2s;
pub mod dense;
pub mod device;
pub mod dual;
pub mod error;
pub mod fast;
pub mod fastvit;
pub mod fused;
pub mod heads;
#[cfg(feature = "hub")]
pub mod hub;
pub mod image;
pub mod lexlip;
pub mod mlm_head;
pub mod mobileclip;
pub mod mobilenet_v2;
pub mod nn;
pub mod pair;
pub mod pixels;
pub mod pooling;
pub mod rerank;
pub mod resample;
pub mod siglip;
pub mod text;
pub mod text_terms;
pub mod thumbnail;
pub mod tokens;
mod tower;
pub mod vdr;
pub mod vocab;
pub mod weight_sharing;
pub mod weights;

pub use candle_core::{DType, Device};
pub use clip::ClipEncoder;
pub use config::Architecture;
pub use dense::DenseEncoder;
pub use device::{describe as describe_device, device, settle_cpu_threads};
pub use dual::DualEncoder;
pub use error::{ModelError, Result};
pub use image::{ImageEncoder, ImageProcessor, PreprocessedImage};
pub use lexlip::{
    ByQueryModality, Encoders, LexLipModel, LoadOptions, ModelSource, QueryNorm, WeakMatch,
    convert_checkpoint, detect,
};
pub use mobileclip::MobileClipEncoder;
pub use rerank::Reranker;
pub use siglip::SiglipEncoder;
pub use text::{DEFAULT_MAX_LENGTH, TextEncoder};
pub use vocab::Vocabulary;
pub use weights::Weights;
