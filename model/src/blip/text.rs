//! BLIP's text tower as its contrastive head reads it (`text_encoder.*`, transformers'
//! `BlipTextModel` called without image states): a BERT encoder ([`crate::fast::bert`]) with
//! word and position embeddings only (BLIP has no token types) and self-attention only; the
//! checkpoint's cross-attention (`crossattention.*`, for image-text matching) is not loaded.

use crate::fast::{Bert, BertShape};

use super::config::TextConfig;

/// The text tower.
pub type TextTower = Bert;

/// The encoder's shape from `text_config`.
pub(crate) fn shape(c: &TextConfig) -> BertShape {
    BertShape {
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: c.num_attention_heads,
        max_position_embeddings: c.max_position_embeddings,
        layer_norm_eps: c.layer_norm_eps,
        hidden_act: c.hidden_act,
        type_vocab_size: 0,
    }
}
