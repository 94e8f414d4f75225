//! AdamW (decoupled weight decay, PyTorch's update), the linear warm-up/decay schedule and
//! gradient clipping by global norm. The moments live here by parameter name so that checkpoints
//! save and restore them exactly.

use std::collections::{BTreeMap, HashMap};

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

use crate::error::{Result, TrainError};

/// A trainable parameter: a unique name (group-prefixed, e.g. `text/bert.…`), its variable,
/// whether weight decay applies, and its learning-rate multiplier.
#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub var: Var,
    pub decay: bool,
    pub lr_scale: f64,
}

impl Param {
    /// Weight decay applies to matrices, not to biases, norms, layer scales, class tokens,
    /// position embeddings or relative position tables (the BERT/BEiT convention).
    pub fn new(name: String, var: Var, lr_scale: f64) -> Self {
        let decay = var.rank() >= 2
            && !name.contains("position")
            && !name.contains("cls_token")
            && !name.contains("relative_position_bias_table");
        Self {
            name,
            var,
            decay,
            lr_scale,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

#[derive(Debug)]
pub struct AdamW {
    pub config: AdamWConfig,
    /// Updates done so far (for bias correction).
    pub t: u64,
    /// First and second moments by parameter name.
    moments: BTreeMap<String, (Tensor, Tensor)>,
}

impl AdamW {
    pub fn new(config: AdamWConfig) -> Self {
        Self {
            config,
            t: 0,
            moments: BTreeMap::new(),
        }
    }

    /// One update of every parameter with its gradient times `grad_scale` (clipping), at
    /// learning rate `lr · param.lr_scale`. A parameter without a gradient is an error: AdamW
    /// would otherwise skip it silently and it would never train.
    pub fn step(
        &mut self,
        params: &[Param],
        grads: &GradStore,
        lr: f64,
        grad_scale: f64,
    ) -> Result<()> {
        self.t += 1;
        let c = self.config;
        let bc1 = 1.0 - c.beta1.powi(self.t as i32);
        let bc2 = 1.0 - c.beta2.powi(self.t as i32);
        for p in params {
            let g = grads.get(p.var.as_tensor()).ok_or_else(|| {
                TrainError::invalid(format!("parameter {} received no gradient", p.name))
            })?;
            let g = if grad_scale == 1.0 {
                g.clone()
            } else {
                (g * grad_scale)?
            };
            let (m, v) = match self.moments.remove(&p.name) {
                Some(mv) => mv,
                None => (g.zeros_like()?, g.zeros_like()?),
            };
            let m = ((m * c.beta1)? + (&g * (1.0 - c.beta1))?)?;
            let v = ((v * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
            let lr_p = lr * p.lr_scale;
            let theta = p.var.as_tensor().detach();
            let theta = if p.decay && c.weight_decay > 0.0 {
                (&theta * (1.0 - lr_p * c.weight_decay))?
            } else {
                theta
            };
            let denom = ((&v / bc2)?.sqrt()? + c.eps)?;
            let update = ((&m / bc1)? / denom)?;
            let next = (theta - (update * lr_p)?)?;
            p.var.set(&next)?;
            self.moments.insert(p.name.clone(), (m, v));
        }
        Ok(())
    }

    /// The moments as named tensors (`m/NAME`, `v/NAME`) for a checkpoint.
    pub fn state(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for (name, (m, v)) in &self.moments {
            out.insert(format!("m/{name}"), m.copy()?);
            out.insert(format!("v/{name}"), v.copy()?);
        }
        Ok(out)
    }

    /// Restores the moments saved by [`AdamW::state`] and the update count.
    pub fn restore(
        &mut self,
        t: u64,
        tensors: &HashMap<String, Tensor>,
        params: &[Param],
    ) -> Result<()> {
        self.t = t;
        self.moments.clear();
        if t == 0 {
            return Ok(());
        }
        for p in params {
            let get = |k: &str| {
                tensors
                    .get(&format!("{k}/{}", p.name))
                    .map(|t| t.to_device(p.var.device()))
                    .transpose()?
                    .ok_or_else(|| {
                        TrainError::invalid(format!(
                            "the checkpoint has no optimizer state for {}",
                            p.name
                        ))
                    })
            };
            self.moments.insert(p.name.clone(), (get("m")?, get("v")?));
        }
        Ok(())
    }
}

/// Learning rate at `step` (0-based) of `total`: linear warm-up over the first `warmup` fraction
/// of the steps (the first step already at `base / warmup_steps`), then linear decay to 0.
pub fn learning_rate(base: f64, step: u64, total: u64, warmup: f64) -> f64 {
    let warm = (total as f64 * warmup).ceil() as u64;
    if step < warm {
        return base * (step + 1) as f64 / warm as f64;
    }
    if total <= warm {
        return base;
    }
    base * (total - step) as f64 / (total - warm) as f64
}

/// The global L2 norm of the gradients of `params` (f64 accumulation, fixed order).
pub fn grad_norm(params: &[Param], grads: &GradStore) -> Result<f64> {
    let mut sum = 0f64;
    for p in params {
        if let Some(g) = grads.get(p.var.as_tensor()) {
            let s = g
                .sqr()?
                .sum_all()?
                .to_dtype(candle_core::DType::F64)?
                .to_scalar::<f64>()?;
            sum += s;
        }
    }
    Ok(sum.sqrt())
}

/// The factor that scales gradients down to `max_norm` (1 when `max_norm <= 0` or below it).
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays() {
        let lr: Vec<f64> = (0..10).map(|s| learning_rate(1.0, s, 10, 0.2)).collect();
        assert_eq!(lr[0], 0.5);
        assert_eq!(lr[1], 1.0);
        assert_eq!(lr[2], 1.0);
        assert!(lr[2..].windows(2).all(|w| w[1] < w[0]));
        assert!((lr[9] - 0.125).abs() < 1e-12);
        assert_eq!(learning_rate(2.0, 0, 5, 0.0), 2.0);
    }

    /// A plain scalar AdamW (PyTorch's algorithm written out) is the oracle of the tensor one.
    #[test]
    fn adamw_matches_scalar_reference() {
        let dev = candle_core::Device::Cpu;
        let var = Var::from_tensor(&Tensor::new(&[[0.5f32, -1.0]], &dev).unwrap()).unwrap();
        let params = vec![Param::new("w".into(), var.clone(), 1.0)];
        let cfg = AdamWConfig::default();
        let mut opt = AdamW::new(cfg);
        let (mut theta, mut m, mut v) = ([0.5f64, -1.0], [0f64; 2], [0f64; 2]);
        for t in 1..=3 {
            // loss = sum(w^2 * 3) → grad = 6 w
            let loss = (var.as_tensor().sqr().unwrap() * 3.0)
                .unwrap()
                .sum_all()
                .unwrap();
            let grads = loss.backward().unwrap();
            opt.step(&params, &grads, 0.1, 1.0).unwrap();
            for i in 0..2 {
                let g = 6.0 * theta[i];
                theta[i] *= 1.0 - 0.1 * cfg.weight_decay;
                m[i] = cfg.beta1 * m[i] + (1.0 - cfg.beta1) * g;
                v[i] = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * g * g;
                let mh = m[i] / (1.0 - cfg.beta1.powi(t));
                let vh = v[i] / (1.0 - cfg.beta2.powi(t));
                theta[i] -= 0.1 * mh / (vh.sqrt() + cfg.eps);
            }
            let got = var
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            for i in 0..2 {
                assert!(
                    (f64::from(got[i]) - theta[i]).abs() < 1e-5,
                    "{got:?} vs {theta:?}"
                );
            }
        }
    }
}
