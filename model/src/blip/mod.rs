//! BLIP (placeholder: being written).
