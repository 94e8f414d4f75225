//! What turns an encoder's input (pixels or a text) into lexicon weights: the one set of tower
//! kinds the image and text encoders ([`crate::image`], [`crate::text`]) both choose from.

use std::sync::Arc;

use crate::dense::DenseEncoder;
use crate::heads::LexiconHead;
use crate::mlm_head::MlmHead;
use crate::weight_sharing::SharedLayers;

/// A lexicon tower over `model` (BEiT or BERT), or a published tower `L` that pools its own
/// lexicons.
// One per encoder: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Tower<M, L: ?Sized> {
    /// The model's MLM logits of every patch or token, max-pooled (LexLIP, SPLADE).
    Mlm {
        model: M,
        head: MlmHead,
        /// COOKIE's weight-sharing layers between the tower and its head, when trained with
        /// them.
        shared: Option<SharedLayers>,
    },
    /// A frozen dense model's embedding through a lexicon head ([`crate::heads`]).
    Heads {
        backbone: Arc<dyn DenseEncoder>,
        head: LexiconHead,
    },
    /// A published tower that pools its own lexicons (VDR's).
    Lexicon(Box<L>),
}

impl<M, L: ?Sized> Tower<M, L> {
    /// `model`'s MLM logits through `head`, without shared layers.
    pub fn mlm(model: M, head: MlmHead) -> Self {
        Self::Mlm {
            model,
            head,
            shared: None,
        }
    }

    /// Puts COOKIE's `shared` layers (as loaded: `None` without them) between an MLM tower and
    /// its head; other towers have none.
    pub fn set_shared(&mut self, shared: Option<SharedLayers>) {
        if let Self::Mlm { shared: s, .. } = self {
            *s = shared;
        }
    }
}
