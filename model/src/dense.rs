//! Dense encoders for the fallback index: texts and images into one embedding space.

use candle_core::{DType, Tensor};
use lexlip_proto::DenseVector;

use crate::error::Result;
use crate::image::PreprocessedImage;

/// Texts and images → L2-normalised dense vectors whose inner product is the cosine similarity.
/// Implementations are `Send + Sync` so a server can share one across request handlers.
pub trait DenseEncoder: Send + Sync {
    /// Embedding dimension.
    fn dim(&self) -> usize;
    /// One unit-length vector per text, in input order.
    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>>;
    /// Decodes and preprocesses an image for this encoder; `input` names it in errors.
    fn preprocess_image(&self, bytes: &[u8], input: &str) -> Result<PreprocessedImage>;
    /// One unit-length vector per image, in input order.
    fn encode_images(&self, images: &[PreprocessedImage]) -> Result<Vec<DenseVector>>;
}

/// The rows of a `(batch, dim)` embedding tensor as unit-length vectors (in f32).
pub(crate) fn unit_rows(t: &Tensor) -> Result<Vec<DenseVector>> {
    let rows = t.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    rows.into_iter()
        .map(|r| Ok(DenseVector::new(r)?.normalized()))
        .collect()
}
