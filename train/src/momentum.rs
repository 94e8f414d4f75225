//! MoCo's pieces (LexLIP phase 2, the dense objective's `--dense-momentum`, ConLIP): the queue
//! of momentum keys and the exponential moving average of the momentum towers.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use crate::error::Result;
use crate::params::sorted_vars;

/// A FIFO of momentum representations `(capacity, vocab)`; rows past `fill` are unused.
#[derive(Debug, Clone)]
pub struct Queue {
    pub data: Tensor,
    pub ptr: usize,
    pub fill: usize,
}

impl Queue {
    pub fn new(capacity: usize, vocab: usize, dtype: DType, device: &Device) -> Result<Self> {
        Ok(Self {
            data: Tensor::zeros((capacity, vocab), dtype, device)?,
            ptr: 0,
            fill: 0,
        })
    }

    /// The filled rows (negatives), `None` when empty.
    pub fn rows(&self) -> Result<Option<Tensor>> {
        Ok((self.fill > 0)
            .then(|| self.data.narrow(0, 0, self.fill))
            .transpose()?)
    }

    /// Adds `keys` (a batch; the capacity is a multiple of the batch size) over the oldest rows.
    pub fn push(&mut self, keys: &Tensor) -> Result<()> {
        let b = keys.dim(0)?;
        let cap = self.data.dim(0)?;
        let keys = keys.detach().to_dtype(self.data.dtype())?;
        self.data = self.data.slice_scatter0(&keys, self.ptr)?;
        self.ptr = (self.ptr + b) % cap;
        self.fill = (self.fill + b).min(cap);
        Ok(())
    }

    /// Restores the filled rows saved in a checkpoint.
    pub fn restore(&mut self, rows: Option<&Tensor>, ptr: usize, fill: usize) -> Result<()> {
        self.data = self.data.zeros_like()?;
        if let Some(r) = rows {
            self.data = self
                .data
                .slice_scatter0(&r.to_device(self.data.device())?, 0)?;
        }
        self.ptr = ptr;
        self.fill = fill;
        Ok(())
    }
}

/// `θ_m ← m θ_m + (1 - m) θ` for each (online, momentum) pair of stores (MoCo's update; LexLIP
/// eq. 19-20, ConLIP eq. 8).
pub fn ema(pairs: &[(&VarMap, &VarMap)], m: f64) -> Result<()> {
    for (online, momentum) in pairs {
        let online: HashMap<String, candle_core::Var> = sorted_vars(online).into_iter().collect();
        for (name, var) in sorted_vars(momentum) {
            let Some(o) = online.get(&name) else {
                return Err(crate::error::TrainError::invalid(format!(
                    "momentum parameter {name} has no online counterpart"
                )));
            };
            let next = ((var.as_tensor().detach() * m)? + (o.as_tensor().detach() * (1.0 - m))?)?;
            var.set(&next)?;
        }
    }
    Ok(())
}
