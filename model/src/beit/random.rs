//! A BEiT-B/16 + MLM head with random weights: a stand-in of the real image encoder's size for
//! throughput measurements (`lexlip bench random-beit-base`), written as a model directory.

use std::path::Path;

use candle_core::{Device, Tensor};

use crate::beit;
use crate::error::{ModelError, Result};
use crate::vocab::Vocabulary;
use crate::weights::Weights;

/// Writes a BEiT-B/16 (224) + MLM head directory with random weights (fixed seed) and the given
/// tokenizer: a stand-in of the real image encoder's size for throughput measurements of the
/// whole indexing pipeline (`lexlip bench random-beit-base`). Its vectors mean nothing.
pub fn write_random_beit_base(out: &Path, tokenizer_json: &Path, seed: u64) -> Result<()> {
    let vocab = Vocabulary::from_tokenizer_json("random-beit-base", tokenizer_json)?;
    let config = beit::Config::base_patch16_224();
    let weights = random_weights(&config, vocab.len(), seed)?;
    std::fs::create_dir_all(out).map_err(|e| ModelError::io(out, e))?;
    let safetensors = out.join("model.safetensors");
    candle_core::safetensors::save(weights.tensors(), &safetensors)
        .map_err(|e| ModelError::from_load(&safetensors, e))?;
    let json = serde_json::json!({
        "architectures": ["BeitForMaskedImageModeling"],
        "model_type": "beit",
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",
        "layer_norm_eps": config.layer_norm_eps,
        "image_size": config.image_size,
        "patch_size": config.patch_size,
        "num_channels": config.num_channels,
        "use_absolute_position_embeddings": config.use_absolute_position_embeddings,
        "use_relative_position_bias": config.use_relative_position_bias,
        "use_shared_relative_position_bias": config.use_shared_relative_position_bias,
        "layer_scale_init_value": config.layer_scale_init_value,
        "use_mean_pooling": config.use_mean_pooling,
        "vocab_size": vocab.len(),
        "lexlip_mlm_head": {"hidden_act": "gelu", "layer_norm_eps": 1e-12},
    });
    let write = |name: &str, text: String| {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| ModelError::io(&p, e))
    };
    write("config.json", json.to_string())?;
    write(
        "preprocessor_config.json",
        serde_json::json!({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "size": {"height": config.image_size, "width": config.image_size}})
        .to_string(),
    )?;
    std::fs::copy(tokenizer_json, out.join("tokenizer.json"))
        .map_err(|e| ModelError::io(tokenizer_json, e))?;
    Ok(())
}

/// Random weights with the shapes of `BeitForMaskedImageModeling` + MLM head (xorshift, N(0, 0.02)-ish
/// uniform values; layer norms at 1/0; layer scale 0.1).
pub(crate) fn random_weights(cfg: &beit::Config, vocab: usize, seed: u64) -> Result<Weights> {
    use std::collections::HashMap;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.07
    };
    let h = cfg.hidden_size;
    let i = cfg.intermediate_size;
    let p = cfg.patch_size;
    let g = cfg.native_grid();
    let mut shapes: Vec<(String, Vec<usize>, f32)> = vec![
        ("beit.embeddings.cls_token".into(), vec![1, 1, h], f32::NAN),
        (
            "beit.embeddings.patch_embeddings.projection.weight".into(),
            vec![h, 3, p, p],
            f32::NAN,
        ),
        (
            "beit.embeddings.patch_embeddings.projection.bias".into(),
            vec![h],
            0.0,
        ),
        ("layernorm.weight".into(), vec![h], 1.0),
        ("layernorm.bias".into(), vec![h], 0.0),
        (
            "cls.predictions.transform.dense.weight".into(),
            vec![h, h],
            f32::NAN,
        ),
        ("cls.predictions.transform.dense.bias".into(), vec![h], 0.0),
        (
            "cls.predictions.transform.LayerNorm.weight".into(),
            vec![h],
            1.0,
        ),
        (
            "cls.predictions.transform.LayerNorm.bias".into(),
            vec![h],
            0.0,
        ),
        (
            "cls.predictions.decoder.weight".into(),
            vec![vocab, h],
            f32::NAN,
        ),
        ("cls.predictions.bias".into(), vec![vocab], 0.0),
    ];
    for l in 0..cfg.num_hidden_layers {
        let pre = format!("beit.encoder.layer.{l}.");
        for (name, shape, fill) in [
            ("attention.attention.query.weight", vec![h, h], f32::NAN),
            ("attention.attention.query.bias", vec![h], 0.0),
            ("attention.attention.key.weight", vec![h, h], f32::NAN),
            ("attention.attention.value.weight", vec![h, h], f32::NAN),
            ("attention.attention.value.bias", vec![h], 0.0),
            (
                "attention.attention.relative_position_bias.relative_position_bias_table",
                vec![beit::relative_table_len(g), cfg.num_attention_heads],
                f32::NAN,
            ),
            ("attention.output.dense.weight", vec![h, h], f32::NAN),
            ("attention.output.dense.bias", vec![h], 0.0),
            ("intermediate.dense.weight", vec![i, h], f32::NAN),
            ("intermediate.dense.bias", vec![i], 0.0),
            ("output.dense.weight", vec![h, i], f32::NAN),
            ("output.dense.bias", vec![h], 0.0),
            ("layernorm_before.weight", vec![h], 1.0),
            ("layernorm_before.bias", vec![h], 0.0),
            ("layernorm_after.weight", vec![h], 1.0),
            ("layernorm_after.bias", vec![h], 0.0),
            ("lambda_1", vec![h], 0.1),
            ("lambda_2", vec![h], 0.1),
        ] {
            shapes.push((format!("{pre}{name}"), shape, fill));
        }
    }
    let mut tensors = HashMap::new();
    for (name, shape, fill) in shapes {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = if fill.is_nan() {
            (0..n).map(|_| next()).collect()
        } else {
            vec![fill; n]
        };
        tensors.insert(name, Tensor::from_vec(data, shape, &Device::Cpu)?);
    }
    Ok(Weights::from_tensors(tensors, "<random BEiT-B/16>"))
}
