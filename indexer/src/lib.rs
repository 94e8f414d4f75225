//! The lexlip engine.
