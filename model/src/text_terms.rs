//! Which terms a text's lexicon keeps once the model has weighed every term of the vocabulary.
//!
//! A model's query lexicon can drift from the query: a head over a dense embedding weighs the
//! words near the query's meaning, and for a short query most of its strongest terms are
//! neighbours ("a red car" → "apple lips red fancy valentine …"). Expansion control (D2S's query
//! mask; Nguyen et al., ECIR 2024) keeps the text's own content words, weighted by the model, and
//! at most E other terms: the E strongest, each capped at the weight of the weakest own word,
//! so that the words the user typed lead the query and its explanations.
//!
//! ```
//! use lexlip_model::text::TextTerms;
//!
//! // "red car": own words "red" (0.9) and "car" (0.2); "a" is a function word; of the others
//! // only the strongest ("apple", 0.8) is kept, at most as heavy as "car", and "emoji" (id 5)
//! // is a template word.
//! let tokens: Vec<String> =
//!     ["a", "red", "car", "apple", "lips", "emoji"].iter().map(|s| s.to_string()).collect();
//! let weights = [0.5, 0.9, 0.2, 0.8, 0.7, 1.0];
//! let terms = TextTerms::expansion(1, vec!["emoji".into()]);
//! let kept = terms.keep(&weights, &[0, 1, 2], &tokens, &[5]);
//! assert_eq!(kept, vec![("red", 0.9), ("car", 0.2), ("apple", 0.2)]);
//! ```

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::vocab::{STOPWORDS, is_whole_word};

/// Which terms a text's lexicon keeps: a published model's query-side options (VDR's top-k and
/// bag of words, D2S's restriction of a query to its own words), expansion control, and words
/// that never weigh; none for lexlip's own models unless their `lexlip.json` says so.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TextTerms {
    /// Keep the `top_k` largest weights (none: every non-zero one) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// … and, besides them, the text's own word pieces (special tokens aside) with the weights
    /// the model gave them: VDR's lexical activation; with `top_k` 0, D2S's masked query.
    #[serde(default)]
    pub own: bool,
    /// Weigh the text's own word pieces that the model can weigh at all 1, and nothing else
    /// (VDR's bag-of-words query: no expansion, no learned weights).
    #[serde(default)]
    pub bow: bool,
    /// Expansion control: the text's own content words (function words and `ignore` aside)
    /// with the model's weights, and at most this many other terms, the strongest, none
    /// weighing more than the weakest own word (the user's words lead); `top_k` and `own`
    /// then do not apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expansion: Option<usize>,
    /// With `expansion`: no other term weighs more than this share (0-1) of the weakest own
    /// word (none: 1, the weakest own word itself), so that the user's words lead the query
    /// rather than tie with what the model adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expansion_share: Option<f32>,
    /// With `expansion`: the added terms are scaled together, so that the strongest weighs the
    /// cap and the others keep their ratios to it, instead of each being cut at the cap (which
    /// makes a strong neighbour and a faint one weigh the same).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expansion_scaled: bool,
    /// With `expansion`: every own content word weighs at least this share (0-1) of the
    /// strongest own word, so that a word the user typed is not dropped or all but dropped
    /// because training found it common ("man" in "man mechanic", "3" in "keycap: 3"); a word
    /// the model weighs 0 takes the place of one of the E added terms, so the query grows no
    /// longer. Word pieces that continue a word and one-letter words the model weighs 0 get
    /// none. Without `expansion` (the rule [`Self::for_documents`] gives stored captions) own
    /// words are lifted alike and kept beside the rule's cut, and nothing else changes. None:
    /// own words keep the model's weights, and those it weighs 0 are left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_floor: Option<f32>,
    /// With `expansion`: texts stored as documents (captions) keep the terms the model keeps
    /// (no expansion control), and their own content words weigh at least this share of the
    /// strongest own word, as a query's do with `own_floor`: a caption's "3" the model weighs
    /// next to nothing still matches the picture of a 3 ([`Self::for_documents`]). None: stored
    /// captions keep the model's lexicon as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_floor: Option<f32>,
    /// Words that never weigh, whatever the rule: a model's template words (the words its
    /// training captions were built around, such as "emoji" or "clip art"), which name no
    /// picture in particular. A word the vocabulary splits leaves out each of its pieces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
}

impl TextTerms {
    /// Every term the model weighs (lexlip's own models).
    pub fn all() -> Self {
        Self::default()
    }

    /// The `k` largest weights and the text's own word pieces (VDR).
    pub fn top_k_and_own(k: usize) -> Self {
        Self {
            top_k: Some(k),
            own: true,
            ..Self::default()
        }
    }

    /// Only the text's own word pieces, weighted by the model (D2S's masked query).
    pub fn own_only() -> Self {
        Self::top_k_and_own(0)
    }

    /// The text's own content words and at most `e` other terms; `ignore`d words never weigh.
    pub fn expansion(e: usize, ignore: Vec<String>) -> Self {
        Self {
            expansion: Some(e),
            ignore,
            ..Self::default()
        }
    }

    /// The rule for texts stored as documents. Expansion control is the query's: captions
    /// indexed as documents keep every term the model keeps (cut to E, they cost the image →
    /// text recall of `models/emoji-lex-imagenet` 4-11 points; `docs/benchmarks.md`), with
    /// their own words lifted to `document_floor` and template words left out where the rule
    /// has a document floor. The published models' rules (VDR's, D2S's) apply to every text,
    /// as their references encode them.
    pub fn for_documents(&self) -> TextTerms {
        match (self.expansion, self.document_floor) {
            (Some(_), Some(floor)) => Self {
                own_floor: Some(floor),
                ignore: self.ignore.clone(),
                ..Self::all()
            },
            (Some(_), None) => Self::all(),
            (None, _) => self.clone(),
        }
    }

    /// This rule with the model's own cut (its `k` largest weights) where the rule itself
    /// keeps every weighed term: a lexicon head's top-k applies to a document rule too.
    pub fn cut_to(&self, k: Option<usize>) -> TextTerms {
        if self.top_k.is_none() && self.expansion.is_none() && !self.bow {
            Self {
                top_k: k,
                ..self.clone()
            }
        } else {
            self.clone()
        }
    }

    /// Whether every weighed term is kept (nothing to cut).
    pub fn is_all(&self) -> bool {
        *self == Self::all()
    }

    /// The terms of one text: `weights` over the vocabulary `tokens`, `own` the ids of the
    /// text's own word pieces (special tokens already left out), `ignored` the ids of the
    /// pieces of [`Self::ignore`] (the encoder's tokenizer splits them). Zero weights are never
    /// kept.
    pub fn keep<'t>(
        &self,
        weights: &[f32],
        own: &[u32],
        tokens: &'t [String],
        ignored: &[u32],
    ) -> Vec<(&'t str, f32)> {
        let own: BTreeSet<usize> = own
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| i < weights.len().min(tokens.len()))
            .collect();
        let ignored = |i: usize| ignored.contains(&(i as u32));
        let positive = |i: usize| weights[i] > 0.0 && i < tokens.len() && !ignored(i);
        let kept: Vec<(usize, f32)> = if self.bow {
            own.iter()
                .copied()
                .filter(|&i| positive(i))
                .map(|i| (i, 1.0))
                .collect()
        } else if let Some(e) = self.expansion {
            let function = |i: usize| STOPWORDS.contains(&tokens[i].as_str());
            let content = |i: usize| !ignored(i) && !function(i);
            let words = OwnWords::new(self.own_floor, weights, &own, content, tokens);
            let floor = words.floor;
            let own_weight = |i: usize| weights[i].max(floor);
            // The user's words lead: no other term weighs more than (a share of) the weakest.
            let share = self.expansion_share.unwrap_or(1.0).clamp(0.0, 1.0);
            let weakest = words
                .mine
                .iter()
                .map(|&i| own_weight(i))
                .fold(f32::INFINITY, f32::min);
            let cap = if weakest.is_finite() {
                share * weakest
            } else {
                weakest
            };
            let OwnWords { mine, zeroed, .. } = words;
            // A word the user typed takes the place of an added term: the query grows no longer.
            let mut others: Vec<usize> = (0..weights.len())
                .filter(|&i| positive(i) && !own.contains(&i) && !function(i))
                .collect();
            others.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
            others.truncate(e.saturating_sub(zeroed.len()));
            let top = others.first().map_or(0.0, |&i| weights[i]);
            let added = |w: f32| {
                if self.expansion_scaled && top > cap {
                    w * cap / top
                } else {
                    w.min(cap)
                }
            };
            let mut all: Vec<(usize, f32)> = mine
                .into_iter()
                .map(|i| (i, own_weight(i)))
                .chain(others.into_iter().map(|i| (i, added(weights[i]))))
                .chain(zeroed.into_iter().map(|i| (i, floor)))
                .collect();
            all.sort_unstable_by_key(|&(i, _)| i);
            all
        } else {
            let hi = self
                .top_k
                .filter(|&k| k < weights.len())
                .map(|k| kth_largest(weights, k));
            // A document rule's own words (`for_documents`): lifted, and kept beside the cut.
            let content = |i: usize| !ignored(i) && !STOPWORDS.contains(&tokens[i].as_str());
            let words = (self.own_floor)
                .map(|share| OwnWords::new(Some(share), weights, &own, content, tokens));
            let lifted = |i: usize| words.as_ref().is_some_and(|w| w.mine.contains(&i));
            let floor = words.as_ref().map_or(0.0, |w| w.floor);
            let mut kept: Vec<(usize, f32)> = (0..weights.len())
                .filter(|&i| {
                    positive(i)
                        && (hi.is_none_or(|hi| weights[i] > hi)
                            || (self.own && own.contains(&i))
                            || lifted(i))
                })
                .map(|i| {
                    (
                        i,
                        if lifted(i) {
                            weights[i].max(floor)
                        } else {
                            weights[i]
                        },
                    )
                })
                .collect();
            if let Some(words) = words {
                kept.extend(words.zeroed.into_iter().map(|i| (i, floor)));
                kept.sort_unstable_by_key(|&(i, _)| i);
            }
            kept
        };
        kept.into_iter()
            .map(|(i, w)| (tokens[i].as_str(), w))
            .collect()
    }
}

/// A text's own content words that the model weighs (`mine`), those it weighs 0 that are whole
/// words (`zeroed`), and the floor every one of them weighs at least: a share of the strongest.
struct OwnWords {
    mine: Vec<usize>,
    zeroed: Vec<usize>,
    floor: f32,
}

impl OwnWords {
    /// `own`: the text's word pieces within the vocabulary; `content`: not a function or
    /// template word.
    fn new(
        share: Option<f32>,
        weights: &[f32],
        own: &BTreeSet<usize>,
        content: impl Fn(usize) -> bool,
        tokens: &[String],
    ) -> Self {
        let mine: Vec<usize> = own
            .iter()
            .copied()
            .filter(|&i| weights[i] > 0.0 && content(i))
            .collect();
        let strongest = mine.iter().map(|&i| weights[i]).fold(0.0, f32::max);
        let floor = share.unwrap_or(0.0).clamp(0.0, 1.0) * strongest;
        let zeroed = if floor > 0.0 {
            own.iter()
                .copied()
                .filter(|&i| weights[i] <= 0.0 && content(i) && is_whole_word(&tokens[i]))
                .collect()
        } else {
            Vec::new()
        };
        Self {
            mine,
            zeroed,
            floor,
        }
    }
}

/// The threshold the `k` largest weights are strictly above (VDR's top-k, as the reference
/// computes it).
fn kth_largest(weights: &[f32], k: usize) -> f32 {
    let mut scratch = Vec::new();
    crate::pooling::top_k_threshold(weights, k, &mut scratch)
}

#[cfg(test)]
mod tests {
    use super::TextTerms;

    /// "a red car": own words `red` (0.9) and `car` (0.6), `a` a function word; the model adds
    /// `apple` (1.2), `cherry` (0.7) and `lips` (0.2).
    fn red_car(terms: &TextTerms) -> Vec<(String, f32)> {
        let tokens: Vec<String> = ["a", "red", "car", "apple", "cherry", "lips"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let weights = [0.5, 0.9, 0.6, 1.2, 0.7, 0.2];
        let kept = terms.keep(&weights, &[0, 1, 2], &tokens, &[]);
        kept.into_iter().map(|(t, w)| (t.to_string(), w)).collect()
    }

    #[test]
    fn expansion_keeps_own_words_and_caps_the_others() {
        let kept = red_car(&TextTerms::expansion(2, Vec::new()));
        let want = [("red", 0.9), ("car", 0.6), ("apple", 0.6), ("cherry", 0.6)];
        assert_eq!(kept.len(), want.len(), "{kept:?}");
        for (t, w) in want {
            assert!(
                kept.iter().any(|(k, v)| k == t && (v - w).abs() < 1e-6),
                "{t}: {kept:?}"
            );
        }
    }

    /// With a share, the additions weigh at most that share of the weakest own word: the
    /// user's words lead instead of tying with them.
    #[test]
    fn an_expansion_share_puts_the_additions_below_the_users_words() {
        let terms = TextTerms {
            expansion_share: Some(0.5),
            ..TextTerms::expansion(3, Vec::new())
        };
        let kept = red_car(&terms);
        let weight = |t: &str| kept.iter().find(|(k, _)| k == t).map(|(_, w)| *w);
        assert_eq!((weight("red"), weight("car")), (Some(0.9), Some(0.6)));
        assert_eq!((weight("apple"), weight("cherry")), (Some(0.3), Some(0.3)));
        assert_eq!(weight("lips"), Some(0.2));
        assert_eq!(weight("a"), None);
    }

    /// Scaled, the additions keep their ratios: the strongest weighs the cap (half of "car",
    /// 0.3) and the others as much less as the model gave them, instead of all weighing 0.3.
    #[test]
    fn scaled_additions_keep_their_ratios() {
        let terms = TextTerms {
            expansion_share: Some(0.5),
            expansion_scaled: true,
            ..TextTerms::expansion(3, Vec::new())
        };
        let kept = red_car(&terms);
        let weight = |t: &str| kept.iter().find(|(k, _)| k == t).map(|(_, w)| *w);
        assert_eq!((weight("red"), weight("car")), (Some(0.9), Some(0.6)));
        let (apple, cherry, lips) = (weight("apple"), weight("cherry"), weight("lips"));
        assert!((apple.unwrap() - 0.3).abs() < 1e-6, "{kept:?}");
        assert!((cherry.unwrap() - 0.3 * 0.7 / 1.2).abs() < 1e-6, "{kept:?}");
        assert!((lips.unwrap() - 0.3 * 0.2 / 1.2).abs() < 1e-6, "{kept:?}");
        // Additions already under the cap are left as the model weighed them.
        let tokens: Vec<String> = ["car", "wheel"].iter().map(|t| t.to_string()).collect();
        assert_eq!(
            terms.keep(&[1.0, 0.2], &[0], &tokens, &[]),
            vec![("car", 1.0), ("wheel", 0.2)]
        );
    }

    /// With a floor, an own word the model weighs 0 or little keeps that share of the strongest
    /// own word; function words, continuing pieces and template words stay out.
    #[test]
    fn an_own_floor_keeps_the_words_the_model_dropped() {
        let tokens: Vec<String> = ["a", "man", "mechanic", "##ic", "emoji", "tool"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let weights = [0.0, 0.0, 1.2, 0.0, 0.0, 0.6];
        let terms = TextTerms {
            expansion_share: Some(0.5),
            own_floor: Some(0.25),
            ..TextTerms::expansion(1, vec!["emoji".into()])
        };
        let own = [0, 1, 2, 3, 4];
        // "man" takes the one added term's place …
        let kept = terms.keep(&weights, &own, &tokens, &[4]);
        assert_eq!(kept, vec![("man", 0.3), ("mechanic", 1.2)]);
        // … and beside it, with room for two.
        let two = TextTerms {
            expansion: Some(2),
            ..terms.clone()
        };
        let kept = two.keep(&weights, &own, &tokens, &[4]);
        assert_eq!(kept, vec![("man", 0.3), ("mechanic", 1.2), ("tool", 0.6)]);
        // A weak own word is lifted as well, stays one of the own words (the added term keeps
        // its place) and sets the cap of what is added.
        let weak = [0.0, 0.1, 1.2, 0.0, 0.0, 0.6];
        let kept = terms.keep(&weak, &own, &tokens, &[4]);
        assert_eq!(kept, vec![("man", 0.3), ("mechanic", 1.2), ("tool", 0.15)]);
        let without = TextTerms {
            own_floor: None,
            ..terms
        };
        let kept = without.keep(&weights, &own, &tokens, &[4]);
        assert_eq!(kept, vec![("mechanic", 1.2), ("tool", 0.6)]);
    }

    /// Stored captions under a document floor keep the head's top-k, not the query's cut, with
    /// their own content words lifted (a weak one in place, one weighed 0 beside the cut) and
    /// template words left out; without one they keep the model's lexicon.
    #[test]
    fn a_document_floor_lifts_a_stored_captions_own_words() {
        let tokens: Vec<String> = ["a", "man", "mechanic", "emoji", "tool", "wrench", "gear"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let query = TextTerms {
            expansion_share: Some(0.3),
            own_floor: Some(0.5),
            document_floor: Some(0.25),
            ..TextTerms::expansion(1, vec!["emoji".into()])
        };
        let documents = query.for_documents();
        assert_eq!(documents.expansion, None);
        // The head keeps its 3 largest weights: mechanic, emoji (a template word) and tool.
        let documents = documents.cut_to(Some(3));
        let own = [0, 1, 2, 3];
        let weak = [0.05, 0.1, 1.2, 1.0, 0.6, 0.5, 0.05];
        assert_eq!(
            documents.keep(&weak, &own, &tokens, &[3]),
            vec![("man", 0.3), ("mechanic", 1.2), ("tool", 0.6)]
        );
        let dropped = [0.05, 0.0, 1.2, 1.0, 0.6, 0.5, 0.05];
        assert_eq!(
            documents.keep(&dropped, &own, &tokens, &[3]),
            vec![("man", 0.3), ("mechanic", 1.2), ("tool", 0.6)]
        );
        // No document floor: every term the model weighs, as it weighs them.
        let plain = TextTerms {
            document_floor: None,
            ..query.clone()
        };
        assert!(plain.for_documents().is_all());
        // A rule that cuts on its own keeps its cut; a rule without expansion is its own
        // document rule.
        assert_eq!(query.cut_to(Some(3)), query);
        let vdr = TextTerms::top_k_and_own(2);
        assert_eq!(vdr.for_documents(), vdr);
        assert_eq!(vdr.cut_to(Some(3)), vdr);
    }
}
