//! Convolutions for inference: weights read and BatchNorms folded at load, depthwise
//! convolutions as direct loops on the CPU and as k² shifted multiply-adds on a GPU (candle's
//! grouped convolution runs one convolution per channel: hundreds of launches a layer). Shared
//! by the convolutional image towers (FastViT, MobileNetV2).

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
/// the CPU and [`TapsConv`] elsewhere, any other through candle.
pub(crate) enum Conv {
    Depthwise(DepthwiseConv),
    Taps(TapsConv),
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
        if groups > 1 && per_group == 1 {
            if !device.is_cpu() {
                return Ok(Conv::Taps(TapsConv::new(
                    &weight,
                    &bias,
                    in_channels,
                    stride,
                    device,
                )?));
            }
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
            Conv::Taps(op) => op.bias.dim(1)?,
            Conv::Candle { weight, .. } => weight.dim(0)?,
        })
    }

    /// `x` `(batch, in, h, w)` in f32.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Conv::Depthwise(op) => Ok(x.contiguous()?.apply_op1_no_bwd(op)?),
            Conv::Taps(op) => op.forward(x),
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

/// A depthwise convolution as the sum over its k² taps of the zero-padded input, shifted by the
/// tap, times the tap's weight per channel: 2k² element-wise kernels on whole maps, whatever
/// the channel count. At stride s the stride-1 result is sampled every s rows and columns.
pub(crate) struct TapsConv {
    /// One `(1, out, 1, 1)` weight per tap, row-major over the kernel.
    taps: Vec<Tensor>,
    /// `(1, out, 1, 1)`.
    bias: Tensor,
    /// The input channel each output channel reads, when there are more outputs than inputs.
    inputs: Option<Tensor>,
    k: usize,
    stride: usize,
}

impl TapsConv {
    /// `weight` `(out, 1, k, k)` and `bias` `(out,)` (f32, CPU) for `in_channels` inputs.
    pub(crate) fn new(
        weight: &Tensor,
        bias: &Tensor,
        in_channels: usize,
        stride: usize,
        device: &Device,
    ) -> Result<Self> {
        let (out, _, k, _) = weight.dims4()?;
        let flat = weight.reshape((out, k * k))?;
        let taps = (0..k * k)
            .map(|t| {
                Ok(flat
                    .narrow(1, t, 1)?
                    .reshape((1, out, 1, 1))?
                    .to_device(device)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let per_input = out / in_channels.max(1);
        let inputs = if per_input > 1 {
            let idx: Vec<u32> = (0..out).map(|o| (o / per_input) as u32).collect();
            Some(Tensor::from_vec(idx, out, device)?)
        } else {
            None
        };
        Ok(Self {
            taps,
            bias: bias.reshape((1, out, 1, 1))?.to_device(device)?,
            inputs,
            k,
            stride: stride.max(1),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = match &self.inputs {
            Some(idx) => x.index_select(idx, 1)?,
            None => x.clone(),
        };
        let (_, _, h, w) = x.dims4()?;
        let (k, pad) = (self.k, self.k / 2);
        let padded = x.pad_with_zeros(2, pad, pad)?.pad_with_zeros(3, pad, pad)?;
        let (h1, w1) = (h + 2 * pad + 1 - k, w + 2 * pad + 1 - k);
        let mut sum = self.bias.clone();
        for (t, weight) in self.taps.iter().enumerate() {
            let shifted = padded.narrow(2, t / k, h1)?.narrow(3, t % k, w1)?;
            sum = shifted.broadcast_mul(weight)?.broadcast_add(&sum)?;
        }
        if self.stride == 1 {
            return Ok(sum);
        }
        // Every s-th row and column, on the device: padded to a multiple of s, each run of s
        // becomes an axis of its own, and its first element is kept (no index tensors to copy
        // from the host on every call).
        let s = self.stride;
        let (b, c) = (sum.dim(0)?, sum.dim(1)?);
        let (h2, w2) = (h1.div_ceil(s), w1.div_ceil(s));
        Ok(sum
            .pad_with_zeros(2, 0, h2 * s - h1)?
            .pad_with_zeros(3, 0, w2 * s - w1)?
            .reshape((b, c, h2, s, w2, s))?
            .narrow(5, 0, 1)?
            .narrow(3, 0, 1)?
            .reshape((b, c, h2, w2))?)
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
        /// The direct depthwise loops and the GPU's shifted taps (run here on the CPU) equal
        /// candle's grouped convolution (plus bias), for channel multipliers, strides, kernel
        /// sizes and maps smaller than the kernel.
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
            let taps = TapsConv::new(&weight, &bias, channels, stride, &Device::Cpu).unwrap();
            let conv = Conv::new(weight, bias, channels, stride, &Device::Cpu).unwrap();
            let fast = channels > 1;
            prop_assert_eq!(matches!(conv, Conv::Depthwise(_)), fast);
            for got in [conv.forward(&x).unwrap(), taps.forward(&x).unwrap()] {
                prop_assert_eq!(got.dims(), want.dims());
                let diff = (got - &want).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
                prop_assert!(diff.to_scalar::<f32>().unwrap() < 1e-5);
            }
        }
    }
}
