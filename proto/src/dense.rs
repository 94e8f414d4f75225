//! Dense embeddings for the fallback index.

use serde::{Deserialize, Serialize};

use crate::sparse::VectorError;

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

    /// The same direction with unit length (a zero vector stays zero). The norm is computed in
    /// f64: squares of large f32 components overflow f32 and would zero the vector.
    pub fn normalized(&self) -> DenseVector {
        let norm = self.norm();
        if norm == 0.0 {
            return self.clone();
        }
        DenseVector(
            self.0
                .iter()
                .map(|&x| (f64::from(x) / norm) as f32)
                .collect(),
        )
    }

    /// Euclidean length (in f64, see [`Self::normalized`]).
    pub fn norm(&self) -> f64 {
        self.0
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Components whose squares overflow f32 still give a unit vector (they gave zeros).
    #[test]
    fn huge_components_normalise_to_unit_length() {
        let v = DenseVector::new(vec![3e38, -3e38, 0.0])
            .unwrap()
            .normalized();
        let half = std::f32::consts::FRAC_1_SQRT_2;
        assert!((v.as_slice()[0] - half).abs() < 1e-6, "{v:?}");
        assert!((v.as_slice()[1] + half).abs() < 1e-6, "{v:?}");
        assert!((v.norm() - 1.0).abs() < 1e-6);
        let zero = DenseVector::new(vec![0.0; 3]).unwrap();
        assert_eq!(zero.normalized(), zero);
    }
}
