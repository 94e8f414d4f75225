//! The range of the IDF exponent a sparse query is weighted with (`lexlip_search::idf`): one
//! rule for a request's `idf`, a command's `--idf` and a model's `"idf"` in `lexlip.json`.

/// Largest exponent accepted: at 4, a term held by one document in a million already weighs
/// 40,000 times one held by all of them.
pub const MAX_IDF: f32 = 4.0;

/// An exponent that is not a number from 0 (off) to [`MAX_IDF`].
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("idf must be a number from 0 (off) to {MAX_IDF}, got {0}")]
pub struct IdfOutOfRange(pub f32);

/// `idf` when it lies in `0..=MAX_IDF`.
///
/// ```
/// assert!(lexlip_proto::idf::check_idf(1.0).is_ok());
/// let err = lexlip_proto::idf::check_idf(-1.0).unwrap_err();
/// assert_eq!(err.to_string(), "idf must be a number from 0 (off) to 4, got -1");
/// assert!(lexlip_proto::idf::check_idf(f32::NAN).is_err());
/// ```
pub fn check_idf(idf: f32) -> Result<f32, IdfOutOfRange> {
    if idf.is_finite() && (0.0..=MAX_IDF).contains(&idf) {
        Ok(idf)
    } else {
        Err(IdfOutOfRange(idf))
    }
}
