//! Convolutions for inference: weights read and BatchNorms folded at load, depthwise
//! convolutions as direct loops on the CPU (candle's grouped convolution runs one convolution
//! per channel). Shared by the convolutional image towers (FastViT, MobileNetV2).

use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::{ModelError, Result};
use crate::nn::Linear;
use crate::weights::Weights;

/// BatchNorm's epsilon (PyTorch's default).
pub(crate) const BN_EPS: f64 = 1e-5;

/// Reads and folds tensors of one checkpoint (f32 on the CPU while folding).
pub(crate) struct Reader<'a> {
    pub(crate) weights: &'a Weights,
    pub(crate) prefix: String,
}

impl Reader<'_> {
    pub(crate) fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.weights.contains(&self.name(name))
    }

    /// Whether any tensor lies under `NAME.`.
    pub(crate) fn has_under(&self, name: &str) -> bool {
        let prefix = self.name(&format!("{name}."));
        self.weights.names().any(|n| n.starts_with(&prefix))
    }

    pub(crate) fn get(&self, name: &str) -> Result<Tensor> {
        let full = self.name(name);
        let t = self
            .weights
            .get(&full)
            .ok_or_else(|| ModelError::MissingTensor {
                file: self.weights.source().to_path_buf(),
                name: full,
            })?;
        Ok(t.to_device(&Device::Cpu)?.to_dtype(DType::F32)?)
    }

    /// A BatchNorm in eval mode as `x · scale + shift` per channel.
    pub(crate) fn batch_norm(&self, name: &str) -> Result<(Tensor, Tensor)> {
        let gamma = self.get(&format!("{name}.weight"))?;
        let beta = self.get(&format!("{name}.bias"))?;
        let mean = self.get(&format!("{name}.running_mean"))?;
        let var = self.get(&format!("{name}.running_var"))?;
        let scale = (gamma / (var + BN_EPS)?.sqrt()?)?;
        let shift = (beta - (mean * &scale)?)?;
        Ok((scale, shift))
    }

    /// The convolution `CONV.weight` with the BatchNorm `bn` after it, as one convolution's
    /// kernel and bias.
    pub(crate) fn folded_conv(&self, conv: &str, bn: &str) -> Result<(Tensor, Tensor)> {
        let w = self.get(&format!("{conv}.weight"))?;
        let (scale, shift) = self.batch_norm(bn)?;
        Ok((w.broadcast_mul(&scale.reshape(((), 1, 1, 1))?)?, shift))
    }
}

/// A linear layer of `weight` `(out, in)` and `bias` `(out,)` on `device`.
pub(crate) fn linear_on(weight: Tensor, bias: Tensor, device: &Device) -> Result<Linear> {
    Ok(Linear {
        weight: weight.to_device(device)?,
        bias: Some(bias.to_device(device)?),
    })
}

/// A convolution with bias: depthwise ones (groups = input channels) as [`DepthwiseConv`] on
/// the CPU, any other through candle.
pub(crate) enum Conv {
    Depthwise(DepthwiseConv),
    Candle {
        weight: Tensor,
        bias: Tensor,
        stride: usize,
        groups: usize,
    },
}

impl Conv {
    /// `weight` `(out, in / groups, k, k)` and `bias` `(out,)` (f32, CPU) for `in_channels`.
    pub(crate) fn new(
        weight: Tensor,
        bias: Tensor,
        in_channels: usize,
        stride: usize,
        device: &Device,
    ) -> Result<Self> {
        let (out, per_group, k, _) = weight.dims4()?;
        let groups = in_channels / per_group.max(1);
        if groups > 1 && per_group == 1 && device.is_cpu() {
            return Ok(Conv::Depthwise(DepthwiseConv {
                weight: weight.flatten_all()?.to_vec1()?,
                bias: bias.to_vec1()?,
                out,
                k,
                stride,
            }));
        }
        Ok(Conv::Candle {
            weight: weight.to_device(device)?,
            bias: bias.to_device(device)?,
            stride,
            groups,
        })
    }

    pub(crate) fn out_channels(&self) -> Result<usize> {
        Ok(match self {
            Conv::Depthwise(op) => op.out,
            Conv::Candle { weight, .. } => weight.dim(0)?,
        })
    }

    /// `x` `(batch, in, h, w)` in f32.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Conv::Depthwise(op) => Ok(x.contiguous()?.apply_op1_no_bwd(op)?),
            Conv::Candle {
                weight,
                bias,
                stride,
                groups,
            } => {
                let k = weight.dim(3)?;
                let y = x.conv2d(weight, k / 2, *stride, 1, *groups)?;
                Ok(y.broadcast_add(&bias.reshape((1, (), 1, 1))?)?)
            }
        }
    }
}

/// A depthwise convolution (each output channel reads one input channel; `out` a multiple of
/// the input channels), padded to keep the size at stride 1: direct loops, one output plane
/// per task, the inner loop a contiguous multiply-add at stride 1.
pub(crate) struct DepthwiseConv {
    /// `(out, k, k)`.
    weight: Vec<f32>,
    bias: Vec<f32>,
    out: usize,
    k: usize,
    stride: usize,
}

impl CustomOp1 for DepthwiseConv {
    fn name(&self) -> &'static str {
        "depthwise-conv2d"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("depthwise convolution: f32 input expected")
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("depthwise convolution: contiguous input expected")
        };
        let data = &data[start..end];
        let (batch, channels, h, w) = layout.shape().dims4()?;
        if channels == 0 || !self.out.is_multiple_of(channels) {
            candle_core::bail!(
                "depthwise convolution: {channels} input channels for {} outputs",
                self.out
            )
        }
        let (k, s, pad) = (self.k, self.stride, self.k / 2);
        let (oh, ow) = ((h + 2 * pad - k) / s + 1, (w + 2 * pad - k) / s + 1);
        let per_input = self.out / channels;
        let mut out = vec![0f32; batch * self.out * oh * ow];
        out.par_chunks_mut(oh * ow)
            .enumerate()
            .for_each(|(plane_at, plane)| {
                let (b, o) = (plane_at / self.out, plane_at % self.out);
                let input = &data[(b * channels + o / per_input) * h * w..][..h * w];
                let kernel = &self.weight[o * k * k..][..k * k];
                plane.fill(self.bias[o]);
                for (oy, row) in plane.chunks_mut(ow).enumerate() {
                    for ky in 0..k {
                        let Some(iy) = (oy * s + ky).checked_sub(pad).filter(|&iy| iy < h) else {
                            continue;
                        };
                        let in_row = &input[iy * w..][..w];
                        for kx in 0..k {
                            let wv = kernel[ky * k + kx];
                            // Output columns whose input column ox·s + kx − pad lies in the row.
                            let lo = pad.saturating_sub(kx).div_ceil(s);
                            let Some(last) = (w - 1 + pad).checked_sub(kx) else {
                                continue;
                            };
                            let hi = (last / s + 1).min(ow);
                            if lo >= hi {
                                continue;
                            }
                            let first = lo * s + kx - pad;
                            if s == 1 {
                                for (o, i) in row[lo..hi].iter_mut().zip(&in_row[first..]) {
                                    *o += wv * i;
                                }
                            } else {
                                for (o, i) in row[lo..hi]
                                    .iter_mut()
                                    .zip(in_row[first..].iter().step_by(s))
                                {
                                    *o += wv * i;
                                }
                            }
                        }
                    }
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((batch, self.out, oh, ow))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The direct depthwise loops equal candle's grouped convolution (plus bias), for
        /// channel multipliers, strides, kernel sizes and maps smaller than the kernel.
        #[test]
        fn depthwise_equals_grouped_convolution(
            batch in 1usize..3,
            channels in 1usize..5,
            multiplier in 1usize..3,
            k in prop::sample::select(vec![1usize, 3, 5, 7]),
            stride in 1usize..3,
            h in 1usize..12,
            w in 1usize..12,
            seed in any::<u64>(),
        ) {
            let out = channels * multiplier;
            let mut state = seed | 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 2001) as f32 / 1000.0 - 1.0
            };
            let x: Vec<f32> = (0..batch * channels * h * w).map(|_| next()).collect();
            let kernel: Vec<f32> = (0..out * k * k).map(|_| next()).collect();
            let bias: Vec<f32> = (0..out).map(|_| next()).collect();
            let x = Tensor::from_vec(x, (batch, channels, h, w), &Device::Cpu).unwrap();
            let weight = Tensor::from_vec(kernel, (out, 1, k, k), &Device::Cpu).unwrap();
            let bias = Tensor::from_vec(bias, out, &Device::Cpu).unwrap();
            let want = x
                .conv2d(&weight, k / 2, stride, 1, channels)
                .unwrap()
                .broadcast_add(&bias.reshape((1, (), 1, 1)).unwrap())
                .unwrap();
            let conv = Conv::new(weight, bias, channels, stride, &Device::Cpu).unwrap();
            let fast = channels > 1;
            prop_assert_eq!(matches!(conv, Conv::Depthwise(_)), fast);
            let got = conv.forward(&x).unwrap();
            prop_assert_eq!(got.dims(), want.dims());
            let diff = (got - want).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
            prop_assert!(diff.to_scalar::<f32>().unwrap() < 1e-5);
        }
    }
}
