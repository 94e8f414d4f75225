//! BLIP's text tower as its contrastive head reads it (`text_encoder.*`, transformers'
//! `BlipTextModel` called without image states): a BERT encoder ([`crate::fast::bert`]) with
//! word and position embeddings only (BLIP has no token types) and self-attention only; the
//! checkpoint's cross-attention (`crossattention.*`, for image-text matching) is not loaded.

/// The text tower.
pub type TextTower = crate::fast::Bert;
