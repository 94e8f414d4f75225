//! The forward index options of the benches (`bench engine`, `bench search`): block size and
//! layout, each fixed or chosen per segment.

use lexlip_index::forward_index::Layout;

#[derive(clap::Args, Debug, Clone)]
pub struct ForwardArgs {
    /// Documents per pruning block: 8, 16, 32 or 64, or `auto`.
    ///
    /// `auto`: each segment's layout's own (8 for the documents layout, 32 for the terms
    /// layout). Segments whose files were written for another size are rebuilt from their
    /// postings before the run.
    #[arg(long, default_value = "auto")]
    pub block_size: BlockSize,
    /// Forward index layout: `documents`, `terms` or `auto`.
    ///
    /// `documents`: each document's vector, read whole to score it; `terms`: each term's
    /// postings by block; `auto`: documents where the mean document has at most 128 non-zeros.
    /// Results are the same in both.
    #[arg(long, default_value = "auto")]
    pub layout: LayoutChoice,
}

/// `--block-size`: a number of documents, or `None` for `auto`.
#[derive(Debug, Clone, Copy)]
pub struct BlockSize(pub Option<u32>);

impl std::str::FromStr for BlockSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self(None)),
            _ => match s.parse::<u32>() {
                Ok(n @ (8 | 16 | 32 | 64)) => Ok(Self(Some(n))),
                _ => Err(format!("expected 8, 16, 32, 64 or auto, got {s:?}")),
            },
        }
    }
}

/// `--layout`: a layout, or `None` for `auto`.
#[derive(Debug, Clone, Copy)]
pub struct LayoutChoice(pub Option<Layout>);

impl std::str::FromStr for LayoutChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self(None)),
            "terms" => Ok(Self(Some(Layout::Terms))),
            "documents" => Ok(Self(Some(Layout::Documents))),
            _ => Err(format!("expected documents, terms or auto, got {s:?}")),
        }
    }
}

impl ForwardArgs {
    /// What the segments are searched with, for reports: "documents, blocks of 8" per kind of
    /// segment, with a count where there are several.
    pub fn describe(summary: &[lexlip_index::ForwardSummary]) -> String {
        let mut kinds: Vec<(String, usize)> = Vec::new();
        for s in summary {
            let layout = match s.layout {
                Layout::Documents => "documents",
                Layout::Terms => "terms",
            };
            let kind = format!("{layout} layout, blocks of {}", s.block_size);
            match kinds.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => kinds.push((kind, 1)),
            }
        }
        let parts: Vec<String> = kinds
            .into_iter()
            .map(|(k, n)| {
                if n == 1 {
                    k
                } else {
                    format!("{k} ({n} segments)")
                }
            })
            .collect();
        if parts.is_empty() {
            "no segments".to_string()
        } else {
            parts.join("; ")
        }
    }
}
