//! Trainable parameters: every weight lives in a [`VarMap`] under exactly the Hugging Face name
//! the inference loaders read (`bert.encoder.layer.0.attention.self.query.weight`, …), so a
//! VarMap saved as safetensors is a model file `lexlip-model` loads unchanged.
//!
//! A [`ParamBuilder`] creates each parameter once: from the source weights when the tower is
//! initialised from a model (a missing tensor or a wrong shape is an error naming it), otherwise
//! from a random stream keyed by the seed and the parameter's name, so initial weights do not
//! depend on the order modules are built in.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use lexlip_model::Weights;
pub use lexlip_model::nn::Init;
use lexlip_model::nn::Params;

use crate::error::{Result, TrainError};
use crate::rng::{Rng, key};

/// Where parameters come from.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// Every parameter must be in these weights (names relative to the builder's root).
    Weights(&'a Weights),
    /// Random initialisation keyed by this seed.
    Random(u64),
    /// From these weights where they have the tensor, random otherwise.
    WeightsOr(&'a Weights, u64),
}

/// Creates parameters in a [`VarMap`] under a name prefix.
#[derive(Clone)]
pub struct ParamBuilder<'a> {
    store: &'a VarMap,
    source: Source<'a>,
    prefix: String,
    dtype: DType,
    device: Device,
    /// Hand out detached tensors (momentum encoders: read in place, never differentiated).
    detached: bool,
}

impl<'a> ParamBuilder<'a> {
    pub fn new(store: &'a VarMap, source: Source<'a>, dtype: DType, device: &Device) -> Self {
        Self {
            store,
            source,
            prefix: String::new(),
            dtype,
            device: device.clone(),
            detached: false,
        }
    }

    /// Tensors from this builder share storage with the variables but track no gradient.
    pub fn detached(mut self) -> Self {
        self.detached = true;
        self
    }

    /// The builder for a sub-module (`name.` appended to the prefix).
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        let mut b = self.clone();
        b.prefix = format!("{}{name}.", self.prefix);
        b
    }

    /// The same prefix with another source (e.g. a head copied from another model).
    pub fn with_source(&self, source: Source<'a>) -> Self {
        let mut b = self.clone();
        b.source = source;
        b
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The parameter `name` (created on first use); the returned tensor tracks gradients.
    pub fn get(&self, shape: &[usize], name: &str, init: Init) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let mut vars = self
            .store
            .data()
            .lock()
            .map_err(|_| TrainError::invalid("parameter store poisoned"))?;
        if let Some(v) = vars.get(&full) {
            if v.dims() != shape {
                return Err(TrainError::invalid(format!(
                    "parameter {full} exists with shape {:?}, asked for {shape:?}",
                    v.dims()
                )));
            }
            return Ok(self.handle(v));
        }
        let (loaded, seed) = match self.source {
            Source::Weights(w) => {
                let t = w
                    .get(&full)
                    .ok_or_else(|| lexlip_model::ModelError::MissingTensor {
                        file: w.source().to_path_buf(),
                        name: full.clone(),
                    })?;
                (Some((w, t)), 0)
            }
            Source::WeightsOr(w, seed) => (w.get(&full).map(|t| (w, t)), seed),
            Source::Random(seed) => (None, seed),
        };
        let tensor = match loaded {
            Some((w, t)) => {
                if t.dims() != shape {
                    return Err(lexlip_model::ModelError::ShapeMismatch {
                        file: w.source().to_path_buf(),
                        name: full.clone(),
                        expected: shape.to_vec(),
                        got: t.dims().to_vec(),
                    }
                    .into());
                }
                t.to_dtype(self.dtype)?.to_device(&self.device)?
            }
            None => random(shape, init, &mut Rng::new(&[seed, key(&full)]))?
                .to_dtype(self.dtype)?
                .to_device(&self.device)?,
        };
        let var = Var::from_tensor(&tensor)?;
        let out = self.handle(&var);
        vars.insert(full, var);
        Ok(out)
    }

    fn handle(&self, var: &Var) -> Tensor {
        if self.detached {
            var.as_detached_tensor()
        } else {
            var.as_tensor().clone()
        }
    }
}

/// Training builds lexlip-model's architectures over its variables.
impl Params for ParamBuilder<'_> {
    type Error = TrainError;

    fn pp(&self, name: impl std::fmt::Display) -> Self {
        ParamBuilder::pp(self, name)
    }

    fn get(&self, shape: &[usize], name: &str, init: Init) -> Result<Tensor> {
        ParamBuilder::get(self, shape, name, init)
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn device(&self) -> &Device {
        &self.device
    }
}

fn random(shape: &[usize], init: Init, rng: &mut Rng) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = match init {
        Init::Const(c) => vec![c as f32; n],
        Init::Normal(std) => (0..n)
            .map(|_| {
                loop {
                    let z = rng.normal();
                    if z.abs() <= 2.0 {
                        break (z * std) as f32;
                    }
                }
            })
            .collect(),
    };
    Ok(Tensor::from_vec(data, shape, &Device::Cpu)?)
}

/// The variables of a store in name order (a stable order for the optimizer and checkpoints).
pub fn sorted_vars(store: &VarMap) -> Vec<(String, Var)> {
    let vars = store.data().lock().map(|v| v.clone()).unwrap_or_default();
    let mut out: Vec<(String, Var)> = vars.into_iter().collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A copy of the store's tensors (detached, on the CPU when `cpu`), e.g. to save them.
pub fn snapshot(store: &VarMap) -> Result<HashMap<String, Tensor>> {
    sorted_vars(store)
        .into_iter()
        .map(|(k, v)| Ok((k, v.as_tensor().detach().copy()?)))
        .collect()
}

/// Overwrites every variable of `store` with the tensor of the same name in `tensors`; a missing
/// or differently shaped tensor is an error.
pub fn restore(store: &VarMap, tensors: &HashMap<String, Tensor>, what: &str) -> Result<()> {
    for (name, var) in sorted_vars(store) {
        let t = tensors.get(&name).ok_or_else(|| {
            TrainError::invalid(format!("{what}: the checkpoint has no tensor {name}"))
        })?;
        if t.dims() != var.dims() {
            return Err(TrainError::invalid(format!(
                "{what}: tensor {name} has shape {:?} in the checkpoint, {:?} in the model",
                t.dims(),
                var.dims()
            )));
        }
        var.set(&t.to_dtype(var.dtype())?.to_device(var.device())?)?;
    }
    Ok(())
}
