//! BLIP's image tower (`vision_model.*`, transformers' `BlipVisionModel`): a ViT whose patches
//! are embedded by a stride-`patch` convolution, behind a learned class token and learned
//! position embeddings, through pre-norm layers, with a final layer norm (`post_layernorm`) on
//! the last hidden state. The contrastive head reads that state's class token.

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

use super::config::{Activation, VisionConfig};
use super::layers::{LayerNorm, Linear, SelfAttention, first};

/// One pre-norm layer: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`.
#[derive(Debug, Clone)]
struct Layer {
    norm1: LayerNorm,
    attention: SelfAttention,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    act: Activation,
}

impl Layer {
    fn load(vb: &VarBuilder, c: &VisionConfig) -> candle_core::Result<Self> {
        let (h, eps) = (c.hidden_size, c.layer_norm_eps);
        let attn = vb.pp("self_attn");
        Ok(Self {
            norm1: LayerNorm::load(&vb.pp("layer_norm1"), h, eps)?,
            attention: SelfAttention::new(
                Linear::load(&attn.pp("qkv"), h, 3 * h)?,
                Linear::load(&attn.pp("projection"), h, h)?,
                c.num_attention_heads,
            )?,
            norm2: LayerNorm::load(&vb.pp("layer_norm2"), h, eps)?,
            fc1: Linear::load(&vb.pp("mlp").pp("fc1"), h, c.intermediate_size)?,
            fc2: Linear::load(&vb.pp("mlp").pp("fc2"), c.intermediate_size, h)?,
            act: c.hidden_act,
        })
    }

    /// `x + mlp(norm2(x))`.
    fn mlp(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.fc1.forward_act(&self.norm2.forward(x)?, self.act)?;
        self.fc2.forward_add(&y, x)
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.attention.forward(&self.norm1.forward(x)?, None, x)?;
        self.mlp(&x)
    }

    /// The layer's output at the class token only, `(batch, 1, hidden)`.
    fn forward_first(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self
            .attention
            .forward_first(&self.norm1.forward(x)?, None, &first(x)?)?;
        self.mlp(&x)
    }
}

/// The image tower up to its final layer norm.
#[derive(Debug, Clone)]
pub struct VisionTower {
    /// `(hidden,)`.
    class_embedding: Tensor,
    /// The convolution as a matrix over flattened `(channel, row, column)` patches.
    patch_embedding: Linear,
    /// `(1, positions, hidden)`.
    position_embedding: Tensor,
    layers: Vec<Layer>,
    post_layernorm: LayerNorm,
    image_size: usize,
    patch_size: usize,
    hidden: usize,
}

impl VisionTower {
    /// `vb`: the tower (`vision_model`), in the dtype it is to run in.
    pub fn load(vb: &VarBuilder, c: &VisionConfig) -> candle_core::Result<Self> {
        let (h, p) = (c.hidden_size, c.patch_size);
        let emb = vb.pp("embeddings");
        let patch = emb.pp("patch_embedding");
        let patch_embedding = Linear::from_tensors(
            patch.get((h, 3, p, p), "weight")?.reshape((h, 3 * p * p))?,
            patch.get(h, "bias")?,
        );
        let layers = (0..c.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp("encoder").pp("layers").pp(i), c))
            .collect::<candle_core::Result<_>>()?;
        Ok(Self {
            class_embedding: emb.get((1, 1, h), "class_embedding")?.reshape(h)?,
            patch_embedding,
            position_embedding: emb.get((1, c.positions(), h), "position_embedding")?,
            layers,
            post_layernorm: LayerNorm::load(&vb.pp("post_layernorm"), h, c.layer_norm_eps)?,
            image_size: c.image_size,
            patch_size: p,
            hidden: h,
        })
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }

    pub fn dtype(&self) -> DType {
        self.class_embedding.dtype()
    }

    /// Class token, patch embeddings and positions of `(batch, 3, size, size)` pixels:
    /// `(batch, 1 + patches, hidden)`.
    fn embed(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let (b, c, height, width) = pixels.dims4()?;
        let (s, p) = (self.image_size, self.patch_size);
        if (c, height, width) != (3, s, s) {
            candle_core::bail!(
                "the image tower reads (batch, 3, {s}, {s}) pixels, got {:?}",
                pixels.dims()
            );
        }
        let g = s / p;
        // A stride-p convolution with a p × p kernel is a matrix product over the patches,
        // each flattened in the kernel's (channel, row, column) order.
        let patches = pixels
            .to_dtype(self.dtype())?
            .reshape((b, 3, g, p, g, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .contiguous()?
            .reshape((b, g * g, 3 * p * p))?;
        let patches = self.patch_embedding.forward(&patches)?;
        let class = self
            .class_embedding
            .reshape((1, 1, self.hidden))?
            .broadcast_as((b, 1, self.hidden))?;
        Tensor::cat(&[&class, &patches], 1)?.broadcast_add(&self.position_embedding)
    }

    /// The last hidden state (after `post_layernorm`), `(batch, 1 + patches, hidden)`: every
    /// position, as transformers returns it.
    pub fn last_hidden_state(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = self.embed(pixels)?;
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        self.post_layernorm.forward(&x)
    }

    /// The last hidden state's class token, `(batch, hidden)`, computed without the parts of
    /// the last layer that only other positions need (its queries, attention rows, output
    /// projection and MLP there).
    pub fn class_token(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = self.embed(pixels)?;
        let Some((last, rest)) = self.layers.split_last() else {
            candle_core::bail!("the image tower has no layers")
        };
        for layer in rest {
            x = layer.forward(&x)?;
        }
        let x = last.forward_first(&x)?;
        self.post_layernorm.forward(&x)?.squeeze(1)
    }
}
