//! FastViT MCi, MobileCLIP's image tower (timm's `fastvit_mci0/1/2`), for inference.
//!
//! Why not candle-transformers' FastViT: it runs every depthwise convolution as one convolution
//! per channel (1.6 s for one 256-px MobileCLIP-S1 image on a 2-core CPU, where PyTorch takes
//! 50 ms), and its attention meets a batched-matmul bug (huggingface/candle#3744). Here every block
//! is folded at load into the fewest convolutions, as timm's `reparameterize_model` does: a
//! MobileOne block's branches and BatchNorms become one convolution, a RepMixer one depthwise
//! convolution, BatchNorms and layer scales fold into the layers beside them. Depthwise
//! convolutions run as direct loops on the CPU (`crate::conv`).
//!
//! The shape (widths, blocks per stage, which stages attend) is read off the weights, in timm's
//! training-time layout (`conv_kxk`, `conv_scale`, `identity`) or already folded
//! (`reparam_conv`).

use candle_core::{D, DType, Device, Tensor};

use crate::conv::{Conv, Reader, linear_on};
use crate::error::{ModelError, Result};
use crate::nn::Linear;
use crate::weights::Weights;

/// timm's FastViT attention uses heads of this width.
const HEAD_DIM: usize = 32;
impl Reader<'_> {
    /// A layer scale (`gamma`; the loader renames a legacy `gamma` to `weight`) as `(dim,)`.
    fn scale(&self, name: &str) -> Result<Tensor> {
        let t = match self.get(&format!("{name}.gamma")) {
            Ok(t) => t,
            Err(_) => self.get(&format!("{name}.weight"))?,
        };
        Ok(t.flatten_all()?)
    }

    /// The convolution timm's `reparameterize_model` left at `NAME.reparam_conv`, if any.
    fn folded(&self, name: &str) -> Result<Option<(Tensor, Tensor)>> {
        if !self.has(&format!("{name}.reparam_conv.weight")) {
            return Ok(None);
        }
        Ok(Some((
            self.get(&format!("{name}.reparam_conv.weight"))?,
            self.get(&format!("{name}.reparam_conv.bias"))?,
        )))
    }

    /// A convolution followed by a BatchNorm (`NAME.conv`, `NAME.bn`) as one convolution.
    fn conv_bn(&self, name: &str) -> Result<(Tensor, Tensor)> {
        self.folded_conv(&format!("{name}.conv"), &format!("{name}.bn"))
    }
}

/// `w` `(out, in, k0, k0)` zero-padded to a `k × k` kernel (centred).
fn pad_kernel(w: Tensor, k: usize) -> Result<Tensor> {
    let k0 = w.dim(3)?;
    let p = (k - k0) / 2;
    Ok(w.pad_with_zeros(2, p, p)?.pad_with_zeros(3, p, p)?)
}

/// The kernel of `x ↦ x` for a `(out, in_per_group, k, k)` convolution (out = in).
fn identity_kernel(out: usize, in_per_group: usize, k: usize) -> Result<Tensor> {
    let mut w = vec![0f32; out * in_per_group * k * k];
    for o in 0..out {
        w[((o * in_per_group + o % in_per_group) * k + k / 2) * k + k / 2] = 1.0;
    }
    Ok(Tensor::from_vec(
        w,
        (out, in_per_group, k, k),
        &Device::Cpu,
    )?)
}

/// Squeeze-and-excitation: channels scaled by a gate of their means.
struct SqueezeExcite {
    fc1: Linear,
    fc2: Linear,
}

impl SqueezeExcite {
    fn load(r: &Reader, name: &str, device: &Device) -> Result<Option<Self>> {
        if !r.has(&format!("{name}.fc1.weight")) {
            return Ok(None);
        }
        // 1×1 convolutions on the pooled channels: linear layers.
        let fc = |which: &str| -> Result<Linear> {
            let w = r.get(&format!("{name}.{which}.weight"))?;
            let (o, i) = (w.dim(0)?, w.dim(1)?);
            let b = r.get(&format!("{name}.{which}.bias"))?;
            linear_on(w.reshape((o, i))?, b, device)
        };
        Ok(Some(Self {
            fc1: fc("fc1")?,
            fc2: fc("fc2")?,
        }))
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let pooled = x.mean(D::Minus1)?.mean(D::Minus1)?;
        let s = self.fc1.forward(&pooled)?.relu()?;
        let s = candle_nn::ops::sigmoid(&self.fc2.forward(&s)?)?;
        Ok(x.broadcast_mul(&s.unsqueeze(2)?.unsqueeze(3)?)?)
    }
}

/// A convolution, optionally gated by squeeze-and-excitation, optionally followed by GELU: what
/// a MobileOne block or a large-kernel patch embedding folds into.
struct ConvBlock {
    conv: Conv,
    se: Option<SqueezeExcite>,
    gelu: bool,
}

impl ConvBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = self.conv.forward(x)?;
        if let Some(se) = &self.se {
            x = se.forward(&x)?;
        }
        Ok(if self.gelu { x.gelu_erf()? } else { x })
    }
}

/// A MobileOne block's kernel and bias: its `conv_kxk.*` branches, its 1×1 `conv_scale` branch
/// and its `identity` BatchNorm summed into one `k × k` convolution.
fn mobileone_kernel(r: &Reader, name: &str, in_channels: usize) -> Result<(Tensor, Tensor)> {
    if let Some(folded) = r.folded(name)? {
        return Ok(folded);
    }
    let mut branches = Vec::new();
    for i in 0.. {
        let branch = format!("{name}.conv_kxk.{i}");
        if !r.has(&format!("{branch}.conv.weight")) {
            break;
        }
        branches.push(r.conv_bn(&branch)?);
    }
    let k = match branches.first() {
        Some((w, _)) => w.dim(3)?,
        None if r.has(&format!("{name}.conv_scale.conv.weight")) => 1,
        None => 3,
    };
    if r.has(&format!("{name}.conv_scale.conv.weight")) {
        let (w, b) = r.conv_bn(&format!("{name}.conv_scale"))?;
        branches.push((pad_kernel(w, k)?, b));
    }
    if r.has(&format!("{name}.identity.running_var")) {
        let (scale, shift) = r.batch_norm(&format!("{name}.identity"))?;
        let out = scale.dim(0)?;
        let per_group = match branches.first() {
            Some((w, _)) => w.dim(1)?,
            None => in_channels / out.max(1),
        };
        let id = identity_kernel(out, per_group.max(1), k)?;
        branches.push((id.broadcast_mul(&scale.reshape(((), 1, 1, 1))?)?, shift));
    }
    let mut it = branches.into_iter();
    let Some((mut w, mut b)) = it.next() else {
        return Err(ModelError::MissingTensor {
            file: r.weights.source().to_path_buf(),
            name: r.name(&format!("{name}.conv_kxk.0.conv.weight")),
        });
    };
    for (wi, bi) in it {
        w = (w + wi)?;
        b = (b + bi)?;
    }
    Ok((w, b))
}

fn mobileone(
    r: &Reader,
    name: &str,
    in_channels: usize,
    stride: usize,
    gelu: bool,
    device: &Device,
) -> Result<ConvBlock> {
    let (w, b) = mobileone_kernel(r, name, in_channels)?;
    Ok(ConvBlock {
        conv: Conv::new(w, b, in_channels, stride, device)?,
        se: SqueezeExcite::load(r, &format!("{name}.se"), device)?,
        gelu,
    })
}

/// A stage's patch embedding: a large (7×7) and a small (3×3) depthwise kernel summed, at
/// stride 2, then a 1×1 MobileOne block. MCi applies GELU after the large kernel.
fn patch_embed(
    r: &Reader,
    name: &str,
    in_channels: usize,
    device: &Device,
) -> Result<[ConvBlock; 2]> {
    let lk = format!("{name}.proj.0");
    let (w, b) = if let Some(folded) = r.folded(&lk)? {
        folded
    } else {
        let (wl, bl) = r.conv_bn(&format!("{lk}.large_conv"))?;
        let k = wl.dim(3)?;
        match r.has(&format!("{lk}.small_conv.conv.weight")) {
            true => {
                let (ws, bs) = r.conv_bn(&format!("{lk}.small_conv"))?;
                ((wl + pad_kernel(ws, k)?)?, (bl + bs)?)
            }
            false => (wl, bl),
        }
    };
    let out = w.dim(0)?;
    let large = ConvBlock {
        conv: Conv::new(w, b, in_channels, 2, device)?,
        se: SqueezeExcite::load(r, &format!("{lk}.se"), device)?,
        gelu: true,
    };
    let point = mobileone(r, &format!("{name}.proj.1"), out, 1, true, device)?;
    Ok([large, point])
}

/// The MLP of every block: a 7×7 depthwise convolution (BatchNorm folded), 1×1 up, GELU, 1×1
/// down, with the block's layer scale folded into the last.
struct ConvMlp {
    conv: Conv,
    fc1: Conv,
    fc2: Conv,
}

impl ConvMlp {
    fn load(r: &Reader, name: &str, dim: usize, scale: &Tensor, device: &Device) -> Result<Self> {
        let (w, b) = r.conv_bn(&format!("{name}.conv"))?;
        let conv = Conv::new(w, b, dim, 1, device)?;
        let w1 = r.get(&format!("{name}.fc1.weight"))?;
        let hidden = w1.dim(0)?;
        let fc1 = Conv::new(w1, r.get(&format!("{name}.fc1.bias"))?, dim, 1, device)?;
        let s = scale.reshape(((), 1, 1, 1))?;
        let w2 = r.get(&format!("{name}.fc2.weight"))?.broadcast_mul(&s)?;
        let b2 = (r.get(&format!("{name}.fc2.bias"))? * scale)?;
        let fc2 = Conv::new(w2, b2, hidden, 1, device)?;
        Ok(Self { conv, fc1, fc2 })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.fc1.forward(&self.conv.forward(x)?)?.gelu_erf()?;
        self.fc2.forward(&h)
    }
}

/// Multi-head self-attention over the positions of a feature map, with the block's BatchNorm
/// folded into `qkv` and its first layer scale into `proj`.
struct Attention {
    qkv: Linear,
    proj: Linear,
    heads: usize,
}

impl Attention {
    fn load(r: &Reader, block: &str, dim: usize, device: &Device) -> Result<Self> {
        if !dim.is_multiple_of(HEAD_DIM) {
            return Err(ModelError::Weights {
                file: r.weights.source().to_path_buf(),
                message: format!(
                    "{}: an attention stage {dim} wide is not a whole number of {HEAD_DIM}-wide heads",
                    r.name(block)
                ),
            });
        }
        let (scale, shift) = r.batch_norm(&format!("{block}.norm"))?;
        let wqkv = r.get(&format!("{block}.token_mixer.qkv.weight"))?;
        // qkv(x·s + t) = (W·diag(s)) x + W t
        let bias = wqkv.matmul(&shift.unsqueeze(1)?)?.squeeze(1)?;
        let wqkv = wqkv.broadcast_mul(&scale.unsqueeze(0)?)?;
        let ls = r.scale(&format!("{block}.layer_scale_1"))?;
        let wp = r
            .get(&format!("{block}.token_mixer.proj.weight"))?
            .broadcast_mul(&ls.unsqueeze(1)?)?;
        let bp = (r.get(&format!("{block}.token_mixer.proj.bias"))? * &ls)?;
        Ok(Self {
            qkv: linear_on(wqkv, bias, device)?,
            proj: linear_on(wp, bp, device)?,
            heads: dim / HEAD_DIM,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let n = h * w;
        // `Linear` multiplies all positions as one 2-D matrix: no batch for candle to fold.
        let tokens = x.flatten_from(2)?.transpose(1, 2)?.contiguous()?;
        let qkv = self
            .qkv
            .forward(&tokens)?
            .reshape((b, n, 3, self.heads, HEAD_DIM))?
            .permute((2, 0, 3, 1, 4))?;
        let part = |i: usize| -> Result<Tensor> { Ok(qkv.get(i)?.contiguous()?) };
        let q = (part(0)? * (HEAD_DIM as f64).powf(-0.5))?;
        let (k, v) = (part(1)?, part(2)?);
        let att = candle_nn::ops::softmax_last_dim(&q.matmul(&k.t()?.contiguous()?)?)?;
        let y = att.matmul(&v)?.transpose(1, 2)?.reshape((b, n, c))?;
        Ok(self
            .proj
            .forward(&y)?
            .transpose(1, 2)?
            .reshape((b, c, h, w))?)
    }
}

/// One block of a stage.
enum Block {
    /// RepMixer (one depthwise convolution) then `x + mlp(x)`.
    RepMixer { mixer: Conv, mlp: ConvMlp },
    /// `x + attn(x)` then `x + mlp(x)`.
    Attention { attn: Attention, mlp: ConvMlp },
}

impl Block {
    fn load(r: &Reader, name: &str, dim: usize, device: &Device) -> Result<Self> {
        let mlp_scale = |which: &str| r.scale(&format!("{name}.{which}"));
        if r.has(&format!("{name}.token_mixer.qkv.weight")) {
            return Ok(Block::Attention {
                attn: Attention::load(r, name, dim, device)?,
                mlp: ConvMlp::load(
                    r,
                    &format!("{name}.mlp"),
                    dim,
                    &mlp_scale("layer_scale_2")?,
                    device,
                )?,
            });
        }
        let tm = format!("{name}.token_mixer");
        let (w, b) = if let Some(folded) = r.folded(&tm)? {
            folded
        } else {
            // x + γ·(mixer(x) − norm(x)) is one depthwise convolution.
            let (wm, bm) = mobileone_kernel(r, &format!("{tm}.mixer"), dim)?;
            let (wn, bn) = mobileone_kernel(r, &format!("{tm}.norm"), dim)?;
            let gamma = r.scale(&format!("{tm}.layer_scale"))?;
            let (out, per_group, k, _) = wm.dims4()?;
            let id = identity_kernel(out, per_group, k)?;
            let g = gamma.reshape(((), 1, 1, 1))?;
            (
                (id + (wm - wn)?.broadcast_mul(&g)?)?,
                ((bm - bn)? * &gamma)?,
            )
        };
        Ok(Block::RepMixer {
            mixer: Conv::new(w, b, dim, 1, device)?,
            mlp: ConvMlp::load(
                r,
                &format!("{name}.mlp"),
                dim,
                &mlp_scale("layer_scale")?,
                device,
            )?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Block::RepMixer { mixer, mlp } => {
                let x = mixer.forward(x)?;
                Ok((&x + mlp.forward(&x)?)?)
            }
            Block::Attention { attn, mlp } => {
                let x = (x + attn.forward(x)?)?;
                Ok((&x + mlp.forward(&x)?)?)
            }
        }
    }
}

struct Stage {
    downsample: Option<[ConvBlock; 2]>,
    /// The conditional position encoding `x + conv(x)`, as one depthwise convolution.
    position: Option<Conv>,
    blocks: Vec<Block>,
}

/// FastViT MCi up to its classifier head (in open_clip, the projection to the joint space).
pub struct FastVit {
    stem: Vec<ConvBlock>,
    stages: Vec<Stage>,
    final_conv: ConvBlock,
    head: Linear,
}

impl FastVit {
    /// Loads the tower under `prefix` (open_clip: `visual.trunk.`), folding it for inference.
    pub fn load(weights: &Weights, prefix: &str, device: &Device) -> Result<Self> {
        let r = Reader {
            weights,
            prefix: prefix.to_string(),
        };
        let mut dim = 3;
        let mut stem = Vec::new();
        for (i, stride) in [(0, 2), (1, 2), (2, 1)] {
            let block = mobileone(&r, &format!("stem.{i}"), dim, stride, true, device)?;
            dim = block.conv.out_channels()?;
            stem.push(block);
        }
        let mut stages = Vec::new();
        for s in 0.. {
            let name = format!("stages.{s}");
            if !r.has_under(&name) {
                break;
            }
            let downsample = match r.has_under(&format!("{name}.downsample")) {
                true => {
                    let d = patch_embed(&r, &format!("{name}.downsample"), dim, device)?;
                    dim = d[1].conv.out_channels()?;
                    Some(d)
                }
                false => None,
            };
            let position = if r.has(&format!("{name}.pos_emb.pos_enc.weight")) {
                let w = r.get(&format!("{name}.pos_emb.pos_enc.weight"))?;
                let (out, per_group, k, _) = w.dims4()?;
                let w = (w + identity_kernel(out, per_group, k)?)?;
                let b = r.get(&format!("{name}.pos_emb.pos_enc.bias"))?;
                Some(Conv::new(w, b, dim, 1, device)?)
            } else if let Some((w, b)) = r.folded(&format!("{name}.pos_emb"))? {
                Some(Conv::new(w, b, dim, 1, device)?)
            } else {
                None
            };
            let mut blocks = Vec::new();
            for b in 0.. {
                let block = format!("{name}.blocks.{b}");
                if !r.has_under(&block) {
                    break;
                }
                blocks.push(Block::load(&r, &block, dim, device)?);
            }
            stages.push(Stage {
                downsample,
                position,
                blocks,
            });
        }
        if stages.is_empty() {
            return Err(ModelError::MissingTensor {
                file: weights.source().to_path_buf(),
                name: r.name("stages.0.blocks.0.mlp.fc1.weight"),
            });
        }
        let final_conv = mobileone(&r, "final_conv", dim, 1, true, device)?;
        let features = final_conv.conv.out_channels()?;
        let fc = r.get("head.fc.weight")?;
        if fc.dim(1)? != features {
            return Err(ModelError::ShapeMismatch {
                file: weights.source().to_path_buf(),
                name: r.name("head.fc.weight"),
                expected: vec![fc.dim(0)?, features],
                got: fc.dims().to_vec(),
            });
        }
        let head = linear_on(fc, r.get("head.fc.bias")?, device)?;
        Ok(Self {
            stem,
            stages,
            final_conv,
            head,
        })
    }

    /// The embedding dimension (the head's outputs).
    pub fn dim(&self) -> usize {
        self.head.weight.dims()[0]
    }

    /// Pixels `(batch, 3, size, size)` → embeddings `(batch, dim)` (not normalised).
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let mut x = pixels.to_dtype(DType::F32)?;
        for block in &self.stem {
            x = block.forward(&x)?;
        }
        for stage in &self.stages {
            if let Some([large, point]) = &stage.downsample {
                x = point.forward(&large.forward(&x)?)?;
            }
            if let Some(p) = &stage.position {
                x = p.forward(&x)?;
            }
            for block in &stage.blocks {
                x = block.forward(&x)?;
            }
        }
        let x = self.final_conv.forward(&x)?;
        let pooled = x.mean(D::Minus1)?.mean(D::Minus1)?;
        Ok(self.head.forward(&pooled)?)
    }
}
