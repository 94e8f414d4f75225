//! The BERT masked-LM head (`cls.predictions.*`) is written once, in `lexlip_model::mlm_head`:
//! the text tower ties its projection to the word embeddings (as `BertForMaskedLM` does); the
//! image head (LexLIP's copy of BERT's `cls`) owns one.

pub use lexlip_model::mlm_head::MlmHead;
