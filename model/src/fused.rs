//! A dense model whose image side adds a pretrained image tower to a dense teacher: LiT's locked
//! image tower, next to the teacher's own. The image embedding is a projection (an MLP) of the
//! teacher's unit-length image embedding and the tower's pooled features, concatenated; texts
//! are the teacher's. `lexlip train --objective adapter` trains the projection onto the
//! teacher's frozen text embeddings.
//!
//! Why: the emoji teacher's image tower learnt from 8,305 pictures; ImageNet features projected
//! beside it add 8 / 14 points of R@10 on unseen concepts and 10 / 14 on an art style never
//! trained on (`docs/benchmarks.md`, "A pretrained image tower").
//!
//! ```text
//! config.json          {"model_type": "lexlip-fused", "hidden": 1024, "backbone_size": 224}
//! teacher/             the dense dual encoder (`lexlip train --objective dense`)
//! image-backbone/      the MobileNetV2 (`scripts/fetch-image-backbone.sh`)
//! adapter/             model.safetensors: input.mean, input.std (teacher dim + features), fc1.*, fc2.* (to dim)
//! tokenizer.json       the teacher's (the vocabulary of heads trained over this model);
//!                      in a shipped model, the model's own, which its parts share
//! ```
//!
//! One preprocessing serves both towers: the teacher's pixels, taken back to [0, 1], normalised
//! as ImageNet's and resized bilinearly to `backbone_size` inside the model (the emoji are
//! 64-pixel pictures; measured equal to resizing each picture to 224 pixels).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use lexlip_proto::DenseVector;
use serde::{Deserialize, Serialize};

use crate::dense::DenseEncoder;
use crate::dual::DualEncoder;
use crate::error::{ModelError, Result};
use crate::image::{ImageProcessor, PreprocessedImage};
use crate::mobilenet_v2::MobileNetV2;
use crate::nn::Linear;
use crate::weights::Weights;

/// `model_type` of a fused model's `config.json`.
pub use crate::config::FUSED_MODEL_TYPE as MODEL_TYPE;
/// The directories a fused model holds (copied whole wherever the model is copied).
pub const PARTS: [&str; 3] = ["teacher", "image-backbone", "adapter"];
/// ImageNet's normalisation, which the MobileNetV2 was trained with.
const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FusedConfig {
    pub model_type: String,
    /// The projection's hidden width.
    pub hidden: usize,
    /// The side the image tower reads, in pixels.
    pub backbone_size: usize,
}

/// The image-side inputs of the projection: the teacher's unit-length image embedding and the
/// tower's features, side by side `(batch, teacher dim + features)`.
pub struct ImageInputs<'a> {
    pub teacher: &'a DualEncoder,
    pub backbone: &'a MobileNetV2,
    pub size: usize,
}

impl ImageInputs<'_> {
    /// Preprocessed images (the teacher's processor) stacked and through [`Self::of`].
    pub fn of_images(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        let size = self.teacher.image_processor().size;
        self.of(&crate::image::stack(images, size, self.teacher.device())?)
    }

    /// `pixels` `(batch, 3, s, s)`, preprocessed as the teacher's.
    pub fn of(&self, pixels: &Tensor) -> Result<Tensor> {
        let t = self.teacher.image_features(pixels)?;
        let t = t.broadcast_div(&t.sqr()?.sum_keepdim(1)?.sqrt()?)?;
        let p = self.teacher.image_processor();
        let x = pixels.to_dtype(DType::F32)?;
        let channel = |v: [f32; 3]| Tensor::from_slice(&v, (1, 3, 1, 1), x.device());
        // Back to [0, 1], then ImageNet's normalisation.
        let raw = x
            .broadcast_mul(&channel(p.std)?)?
            .broadcast_add(&channel(p.mean)?)?;
        let x = raw
            .broadcast_sub(&channel(IMAGENET_MEAN)?)?
            .broadcast_div(&channel(IMAGENET_STD)?)?;
        let x = x.upsample_bilinear2d(self.size, self.size, false)?;
        let f = self.backbone.forward(&x)?;
        Ok(Tensor::cat(&[&t, &f], 1)?)
    }
}

/// The projection: inputs standardised by the training set's mean and deviation, then
/// `fc2(gelu(fc1(x)))`.
pub struct Adapter {
    pub mean: Tensor,
    pub std: Tensor,
    pub fc1: Linear,
    pub fc2: Linear,
}

impl Adapter {
    /// Reads `input.mean`, `input.std`, `fc1.*` and `fc2.*` on `device` (f32).
    pub fn load(weights: &Weights, device: &Device) -> Result<Self> {
        let get = |name: &str| -> Result<Tensor> {
            let t = weights.get(name).ok_or_else(|| ModelError::MissingTensor {
                file: weights.source().to_path_buf(),
                name: name.to_string(),
            })?;
            Ok(t.to_dtype(DType::F32)?.to_device(device)?)
        };
        let linear = |name: &str| -> Result<Linear> {
            Ok(Linear {
                weight: get(&format!("{name}.weight"))?,
                bias: Some(get(&format!("{name}.bias"))?),
            })
        };
        Ok(Self {
            mean: get("input.mean")?,
            std: get("input.std")?,
            fc1: linear("fc1")?,
            fc2: linear("fc2")?,
        })
    }

    /// `(batch, inputs)` → `(batch, dim)`, not normalised.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.broadcast_sub(&self.mean)?.broadcast_div(&self.std)?;
        let h = self.fc1.forward(&x)?.gelu_erf()?;
        Ok(self.fc2.forward(&h)?)
    }
}

/// The fused dense encoder.
pub struct FusedEncoder {
    teacher: DualEncoder,
    backbone: MobileNetV2,
    adapter: Adapter,
    config: FusedConfig,
}

impl std::fmt::Debug for FusedEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedEncoder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl FusedEncoder {
    /// Loads a fused model directory.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let path = dir.join("config.json");
        let config: FusedConfig = serde_json::from_value(crate::config::read_json(&path)?)
            .map_err(|e| ModelError::config(&path, e.to_string()))?;
        let [teacher, backbone, adapter] = PARTS.map(|p| dir.join(p));
        let teacher = DualEncoder::load(&teacher, device)?;
        let backbone_weights = Weights::from_safetensors_dir(&backbone)?;
        let backbone = MobileNetV2::load(&backbone_weights, "", device)?;
        let adapter_weights = Weights::from_safetensors_dir(&adapter)?;
        let adapter = Adapter::load(&adapter_weights, device)?;
        let inputs = teacher.dim() + backbone.dim()?;
        for (name, t, want) in [
            ("input.mean", &adapter.mean, vec![inputs]),
            ("input.std", &adapter.std, vec![inputs]),
            (
                "fc1.weight",
                &adapter.fc1.weight,
                vec![config.hidden, inputs],
            ),
            (
                "fc2.weight",
                &adapter.fc2.weight,
                vec![teacher.dim(), config.hidden],
            ),
        ] {
            if t.dims() != want.as_slice() {
                return Err(ModelError::ShapeMismatch {
                    file: adapter_weights.source().to_path_buf(),
                    name: name.into(),
                    expected: want,
                    got: t.dims().to_vec(),
                });
            }
        }
        Ok(Self {
            teacher,
            backbone,
            adapter,
            config,
        })
    }

    /// Texts read up to `n` tokens (the teacher's own limit otherwise).
    pub fn with_max_length(self, n: usize) -> Result<Self> {
        Ok(Self {
            teacher: self.teacher.with_max_length(n)?,
            ..self
        })
    }

    /// The image-side inputs this model projects.
    pub fn inputs(&self) -> ImageInputs<'_> {
        ImageInputs {
            teacher: &self.teacher,
            backbone: &self.backbone,
            size: self.config.backbone_size,
        }
    }
}

impl DenseEncoder for FusedEncoder {
    fn dim(&self) -> usize {
        self.teacher.dim()
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>> {
        self.teacher.encode_texts(texts)
    }

    fn image_processor(&self) -> &ImageProcessor {
        self.teacher.image_processor()
    }

    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        self.adapter.forward(&self.inputs().of(pixels)?)
    }

    fn device(&self) -> &Device {
        self.teacher.device()
    }
}

/// Mean and standard deviation of each column of `(rows, dim)`; a column that does not vary
/// gets a deviation of 1 (it then only shifts).
pub fn column_stats(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let mean = x.mean(0)?;
    let var = x.broadcast_sub(&mean)?.sqr()?.mean(0)?;
    let std = (var + 1e-12)?.sqrt()?;
    let ones = std.ones_like()?;
    let std = std.ge(1e-6)?.where_cond(&std, &ones)?;
    Ok((mean, std))
}
