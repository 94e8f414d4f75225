//! LexLIP encoders (Candle). See issue 3; filled in by the encoder work.
