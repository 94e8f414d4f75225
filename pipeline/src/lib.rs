//! Batch indexing: read a corpus (TSV, JSONL manifest, WebDataset shards, a directory of images,
//! precomputed vectors), encode it with the LexLIP encoders and write it into a collection, with
//! bounded memory, resume after interruption and deterministic shards.
