//! MobileNetV2 (Sandler et al., 2018) as an image feature extractor, for inference: the mean
//! of its last 1×1 convolution's 1,280 channels, without the classifier.
//!
//! Why it is here: an ImageNet-pretrained tower is the one pretrained image model a registry
//! package carries (`scripts/fetch-image-backbone.sh`), and on the emoji corpus its features,
//! projected onto the dense teacher's text space, add 8 points of text→image and 14 of
//! image→text R@10 to the teacher's own image tower (`scripts/probe_image_backbone.py`).
//!
//! Weight names mirror that checkpoint's PyTorch layout (tonylins' implementation): `features.0`
//! the stem (3×3 stride-2 convolution `.0`, BatchNorm `.1`), `features.1` to `features.17` the
//! inverted residual blocks (`conv.M`: a 1×1 expansion unless the block's ratio is 1, a 3×3
//! depthwise convolution, a 1×1 projection, each followed by its BatchNorm), `features.18` the
//! last 1×1 convolution. BatchNorms fold into their convolutions at load; ReLU6 follows every
//! convolution but the projections. The widths are read off the weights; the strides are the
//! paper's (they are not in the weights).

use candle_core::{D, DType, Device, Tensor};

use crate::conv::{Conv, Reader};
use crate::error::{ModelError, Result};
use crate::weights::Weights;

/// Blocks per stage and the first block's stride (the paper's Table 2, from `features.1`).
const STAGES: [(usize, usize); 7] = [(1, 1), (2, 2), (3, 2), (4, 2), (3, 1), (3, 2), (1, 1)];

/// A convolution (BatchNorm folded) and whether ReLU6 follows it.
struct Layer {
    conv: Conv,
    relu6: bool,
}

impl Layer {
    /// The convolution `conv` and BatchNorm `bn` (names under the reader's prefix) over
    /// `in_channels`.
    fn load(
        r: &Reader,
        conv: &str,
        bn: &str,
        in_channels: usize,
        stride: usize,
        relu6: bool,
        device: &Device,
    ) -> Result<Self> {
        let (weight, shift) = r.folded_conv(conv, bn)?;
        let per_group = weight.dim(1)?;
        if per_group != 1 && per_group != in_channels {
            return Err(ModelError::ShapeMismatch {
                file: r.weights.source().to_path_buf(),
                name: r.name(&format!("{conv}.weight")),
                expected: vec![weight.dim(0)?, in_channels],
                got: weight.dims().to_vec(),
            });
        }
        Ok(Self {
            conv: Conv::new(weight, shift, in_channels, stride, device)?,
            relu6,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.conv.forward(x)?;
        Ok(if self.relu6 { y.clamp(0f32, 6f32)? } else { y })
    }
}

/// An inverted residual block: its layers, and whether its input is added to its output.
struct Block {
    layers: Vec<Layer>,
    residual: bool,
}

impl Block {
    fn load(r: &Reader, name: &str, in_channels: usize, stride: usize, d: &Device) -> Result<Self> {
        let at = |i: usize| format!("{name}.conv.{i}");
        let mut layers = Vec::new();
        let mut channels = in_channels;
        // Expansion ratio 1 (the first block) has no 1×1 expansion: depthwise first.
        let expands = r.has(&format!("{}.weight", at(6)));
        let mut i = 0;
        if expands {
            layers.push(Layer::load(r, &at(0), &at(1), channels, 1, true, d)?);
            channels = layers[0].conv.out_channels()?;
            i = 3;
        }
        layers.push(Layer::load(
            r,
            &at(i),
            &at(i + 1),
            channels,
            stride,
            true,
            d,
        )?);
        let project = Layer::load(r, &at(i + 3), &at(i + 4), channels, 1, false, d)?;
        let out = project.conv.out_channels()?;
        layers.push(project);
        Ok(Self {
            layers,
            residual: stride == 1 && in_channels == out,
        })
    }

    fn out_channels(&self) -> Result<usize> {
        match self.layers.last() {
            Some(l) => l.conv.out_channels(),
            None => Ok(0),
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for layer in &self.layers {
            y = layer.forward(&y)?;
        }
        Ok(if self.residual { (x + y)? } else { y })
    }
}

/// MobileNetV2 up to its pooled features.
pub struct MobileNetV2 {
    stem: Layer,
    blocks: Vec<Block>,
    last: Layer,
}

impl MobileNetV2 {
    /// Loads the tower under `prefix` (the converted checkpoint: none), folding its BatchNorms.
    pub fn load(weights: &Weights, prefix: &str, device: &Device) -> Result<Self> {
        let r = Reader {
            weights,
            prefix: prefix.to_string(),
        };
        let stem = Layer::load(&r, "features.0.0", "features.0.1", 3, 2, true, device)?;
        let mut channels = stem.conv.out_channels()?;
        let mut blocks = Vec::new();
        for (n, stride) in STAGES {
            for i in 0..n {
                let name = format!("features.{}", blocks.len() + 1);
                let s = if i == 0 { stride } else { 1 };
                let block = Block::load(&r, &name, channels, s, device)?;
                channels = block.out_channels()?;
                blocks.push(block);
            }
        }
        let last_name = format!("features.{}", blocks.len() + 1);
        let extra = format!("features.{}", blocks.len() + 2);
        if r.has_under(&extra) {
            return Err(ModelError::Weights {
                file: weights.source().to_path_buf(),
                message: format!(
                    "{} has layers after {last_name}: not MobileNetV2's 19-layer layout",
                    r.name(&extra)
                ),
            });
        }
        let last = Layer::load(
            &r,
            &format!("{last_name}.0"),
            &format!("{last_name}.1"),
            channels,
            1,
            true,
            device,
        )?;
        Ok(Self { stem, blocks, last })
    }

    /// The feature dimension (1,280 at width 1).
    pub fn dim(&self) -> Result<usize> {
        self.last.conv.out_channels()
    }

    /// Pixels `(batch, 3, h, w)` (ImageNet-normalised) → features `(batch, dim)`.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let mut x = self.stem.forward(&pixels.to_dtype(DType::F32)?)?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        let x = self.last.forward(&x)?;
        Ok(x.mean(D::Minus1)?.mean(D::Minus1)?)
    }
}
