//! Tensors by name, read from safetensors files or a PyTorch (Lightning) checkpoint.
//!
//! All tensors are read into a name → tensor map on the CPU first, so that names can be normalised
//! (old `LayerNorm.gamma/beta` names, tied decoder weights, checkpoint prefixes) before a model is
//! built from them with a `VarBuilder`. Errors from building name the file and the tensor.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use crate::error::{ModelError, Result};

/// The file `save_pretrained` writes PyTorch weights to when it does not write safetensors.
pub const PYTORCH_WEIGHTS: &str = "pytorch_model.bin";

/// A set of named tensors and the file(s) they came from (for error messages).
#[derive(Clone)]
pub struct Weights {
    tensors: HashMap<String, Tensor>,
    source: PathBuf,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field("source", &self.source)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Weights {
    /// Wraps tensors that already exist (random weights for benchmarks, tests).
    pub fn from_tensors(tensors: HashMap<String, Tensor>, source: impl Into<PathBuf>) -> Self {
        let mut w = Self {
            tensors,
            source: source.into(),
        };
        w.normalize_names();
        w
    }

    /// Every `*.safetensors` file of a Hugging Face model directory (one file or shards).
    pub fn from_safetensors_dir(dir: &Path) -> Result<Self> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| ModelError::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(ModelError::Weights {
                file: dir.to_path_buf(),
                message: "no *.safetensors file in this directory".into(),
            });
        }
        let mut tensors = HashMap::new();
        for file in &files {
            let part = candle_core::safetensors::load(file, &Device::Cpu).map_err(|e| {
                ModelError::Weights {
                    file: file.clone(),
                    message: e.to_string(),
                }
            })?;
            tensors.extend(part);
        }
        let source = if files.len() == 1 {
            files.swap_remove(0)
        } else {
            dir.to_path_buf()
        };
        Ok(Self::from_tensors(tensors, source))
    }

    /// The weights of a published model directory, whichever form its repository holds them in:
    /// `*.safetensors` (one file or shards) when there are any, else PyTorch's
    /// `pytorch_model.bin` (what `save_pretrained` wrote before safetensors was its default).
    pub fn from_model_dir(dir: &Path) -> Result<Self> {
        let has_safetensors = std::fs::read_dir(dir)
            .map_err(|e| ModelError::io(dir, e))?
            .filter_map(|e| e.ok())
            .any(|e| e.path().extension().is_some_and(|x| x == "safetensors"));
        let bin = dir.join(PYTORCH_WEIGHTS);
        if !has_safetensors && bin.is_file() {
            return Self::from_checkpoint(&bin);
        }
        Self::from_safetensors_dir(dir).map_err(|e| match e {
            ModelError::Weights { file, .. } if file == dir => ModelError::Weights {
                file,
                message: format!(
                    "no *.safetensors file and no {PYTORCH_WEIGHTS} in this directory"
                ),
            },
            other => other,
        })
    }

    /// The `state_dict` of a PyTorch Lightning checkpoint (or a bare state dict saved with
    /// `torch.save`).
    pub fn from_checkpoint(path: &Path) -> Result<Self> {
        let err = |e: candle_core::Error| ModelError::Weights {
            file: path.to_path_buf(),
            message: e.to_string(),
        };
        let pairs = match candle_core::pickle::read_all_with_key(path, Some("state_dict")) {
            Ok(pairs) if !pairs.is_empty() => pairs,
            // Not a Lightning checkpoint: maybe a plain state dict.
            _ => candle_core::pickle::read_all(path).map_err(err)?,
        };
        if pairs.is_empty() {
            return Err(ModelError::Weights {
                file: path.to_path_buf(),
                message: "no tensors found (expected a PyTorch checkpoint with a state_dict)"
                    .into(),
            });
        }
        Ok(Self::from_tensors(pairs.into_iter().collect(), path))
    }

    pub fn source(&self) -> &Path {
        &self.source
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// The tensor's shape, or an error naming it.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        self.tensors
            .get(name)
            .map(|t| t.dims().to_vec())
            .ok_or_else(|| ModelError::MissingTensor {
                file: self.source.clone(),
                name: name.to_string(),
            })
    }

    /// Checks that every tensor of `names` is present, else one error naming all that are
    /// missing: the checkpoint is not the `model` its configuration says.
    pub fn require<S: AsRef<str>>(&self, model: &'static str, names: &[S]) -> Result<()> {
        let mut missing: Vec<String> = names
            .iter()
            .map(AsRef::as_ref)
            .filter(|n| !self.tensors.contains_key(*n))
            .map(str::to_string)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort();
        Err(ModelError::MissingTensors {
            file: self.source.clone(),
            model,
            names: missing,
        })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    pub fn tensors(&self) -> &HashMap<String, Tensor> {
        &self.tensors
    }

    /// The tensors under `prefix` (e.g. `image_transformer.`), with the prefix removed.
    pub fn with_prefix(&self, prefix: &str) -> Weights {
        let tensors = self
            .tensors
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|s| (s.to_string(), v.clone())))
            .collect();
        Weights {
            tensors,
            source: self.source.clone(),
        }
    }

    /// Makes `alias` refer to the tensor `target` unless `alias` exists (tied weights: HF files
    /// store a tied decoder only once).
    pub fn alias(&mut self, alias: &str, target: &str) {
        if !self.tensors.contains_key(alias)
            && let Some(t) = self.tensors.get(target).cloned()
        {
            self.tensors.insert(alias.to_string(), t);
        }
    }

    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        self.tensors.insert(name.into(), tensor);
    }

    /// Merges `other` under `prefix`.
    pub fn extend_prefixed(&mut self, prefix: &str, other: &Weights) {
        for (k, v) in &other.tensors {
            self.tensors.insert(format!("{prefix}{k}"), v.clone());
        }
    }

    /// A `VarBuilder` over these tensors, converting to `dtype` on `device`.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_tensors(self.tensors.clone(), dtype, device)
    }

    /// Wraps a Candle error raised while building a model from these weights.
    pub fn load_error(&self, err: candle_core::Error) -> ModelError {
        ModelError::from_load(&self.source, err)
    }

    /// Writes the tensors as one safetensors file.
    pub fn save_safetensors(&self, path: &Path) -> Result<()> {
        candle_core::safetensors::save(&self.tensors, path).map_err(|e| ModelError::Weights {
            file: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Old BERT checkpoints (TF conversions, like the tiny SPLADE model) name LayerNorm parameters
    /// `gamma`/`beta`; transformers renames them on load, and so do we.
    fn normalize_names(&mut self) {
        let renames: Vec<(String, String)> = self
            .tensors
            .keys()
            .filter_map(|k| {
                let new = if let Some(base) = k.strip_suffix(".gamma") {
                    format!("{base}.weight")
                } else if let Some(base) = k.strip_suffix(".beta") {
                    format!("{base}.bias")
                } else {
                    return None;
                };
                (!self.tensors.contains_key(&new)).then(|| (k.clone(), new))
            })
            .collect();
        for (old, new) in renames {
            if let Some(t) = self.tensors.remove(&old) {
                self.tensors.insert(new, t);
            }
        }
    }
}
