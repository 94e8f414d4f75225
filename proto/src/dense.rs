//! Dense embeddings for the fallback index.

use serde::{Deserialize, Serialize};

use crate::VectorError;

/// A dense embedding with finite components. Encoders produce it L2-normalised so that the inner
/// product is the cosine similarity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<f32>", into = "Vec<f32>")]
pub struct DenseVector(Vec<f32>);

impl DenseVector {
    pub fn new(values: Vec<f32>) -> Result<Self, VectorError> {
        if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(VectorError::NotFinite {
                term: format!("dimension {i}"),
                weight: *v,
            });
        }
        Ok(Self(values))
    }

    pub fn as_slice(&self) -> &[f32] {
        &self.0
    }

    pub fn dim(&self) -> usize {
        self.0.len()
    }

    /// The same direction with unit length (a zero vector stays zero).
    pub fn normalized(&self) -> DenseVector {
        let norm = self.0.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm == 0.0 {
            return self.clone();
        }
        DenseVector(self.0.iter().map(|x| x / norm).collect())
    }

    pub fn dot(&self, other: &DenseVector) -> f32 {
        self.0.iter().zip(&other.0).map(|(a, b)| a * b).sum()
    }
}

impl TryFrom<Vec<f32>> for DenseVector {
    type Error = VectorError;
    fn try_from(v: Vec<f32>) -> Result<Self, Self::Error> {
        DenseVector::new(v)
    }
}

impl From<DenseVector> for Vec<f32> {
    fn from(v: DenseVector) -> Self {
        v.0
    }
}
