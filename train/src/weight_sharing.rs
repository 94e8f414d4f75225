//! COOKIE's weight-sharing transformer (ICCV 2021, sec. 3.1, eq. 4) as the towers train it:
//! lexlip-model's [`SharedLayers`] over trainable variables, between each tower and its MLM head,
//! one set of weights for both (the text tower's and the image tower's are clones of the same
//! variables, so both sides' gradients add up in them). Names: `lexlip_shared.layer.N.*`.

use lexlip_model::weight_sharing::SharedConfig;
pub use lexlip_model::weight_sharing::{KEY, SharedLayers};

use crate::error::Result;
use crate::nn::tower_act;
use crate::params::ParamBuilder;

/// The shared layers over parameters from `pb` (the builder at [`KEY`]); `hidden`: the towers'
/// common width.
pub fn layers(pb: &ParamBuilder, cfg: &SharedConfig, hidden: usize) -> Result<SharedLayers> {
    tower_act(&cfg.layer_config(hidden))?;
    SharedLayers::new(pb, cfg, hidden)
}
