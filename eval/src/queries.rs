//! Which queries an evaluation asks in each direction, and which items answer each.
//!
//! By the Flickr30k / MS-COCO rule ([`Relevance::Item`]) a caption is answered by the one
//! picture it was written for, and a picture by any of its own captions. A corpus that repeats
//! captions breaks that rule: in `lexlip bench compose`'s million pictures, "sm" describes 431
//! of them, and a search cannot tell which of the 431 the query was written for.
//! [`Relevance::Caption`] counts every picture described by the same wording (case and spaces
//! aside, [`Encoded::wordings`]) as an answer and asks each wording once; a picture is answered
//! by any caption worded like one of its own.

use std::collections::HashMap;

use crate::encoded::Encoded;
#[cfg(doc)]
use crate::encoded::Entry;
use crate::options::Relevance;

/// The queries of both directions: (query position, positions of the items that answer it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Queries {
    /// Text → image: a text position and the image positions that answer it.
    pub t2i: Vec<(usize, Vec<usize>)>,
    /// Image → text: an image position and the text positions that answer it.
    pub i2t: Vec<(usize, Vec<usize>)>,
}

impl Queries {
    /// The queries of `encoded` under `relevance`, at most `max` per direction, spread evenly
    /// over the corpus in its order.
    pub fn new(encoded: &Encoded, relevance: Relevance, max: Option<usize>) -> Self {
        let captions = encoded.captions_of_images();
        match relevance {
            Relevance::Item | Relevance::Picture => {
                // Each picture's twins, itself included: under the picture rule the pictures of
                // the same file, under the item rule none but itself.
                let mut same: HashMap<u64, Vec<usize>> = HashMap::new();
                if relevance == Relevance::Picture {
                    for (i, e) in encoded.images.iter().enumerate() {
                        if let Some(h) = e.picture {
                            same.entry(h).or_default().push(i);
                        }
                    }
                }
                let twins = |i: usize| -> Vec<usize> {
                    encoded.images[i]
                        .picture
                        .and_then(|h| same.get(&h).cloned())
                        .unwrap_or_else(|| vec![i])
                };
                let t2i = encoded
                    .text_image
                    .iter()
                    .enumerate()
                    .filter_map(|(t, i)| i.map(|i| (t, twins(i))))
                    .collect();
                let i2t = (0..encoded.images.len())
                    .filter(|&i| !captions[i].is_empty())
                    .map(|i| {
                        let mut answers: Vec<usize> = twins(i)
                            .into_iter()
                            .flat_map(|j| captions[j].iter().copied())
                            .collect();
                        answers.sort_unstable();
                        (i, answers)
                    })
                    .collect();
                Self {
                    t2i: spread(t2i, max),
                    i2t: spread(i2t, max),
                }
            }
            Relevance::Caption => {
                let wording = encoded.wordings();
                // Each wording's pictures and captions, in corpus order, each once.
                let mut images_of: HashMap<&str, Vec<usize>> = HashMap::new();
                let mut texts_of: HashMap<&str, Vec<usize>> = HashMap::new();
                let mut first_of: Vec<usize> = Vec::new();
                for (t, image) in encoded.text_image.iter().enumerate() {
                    let Some(i) = *image else { continue };
                    let w = wording[t].as_str();
                    let images = images_of.entry(w).or_default();
                    if images.is_empty() {
                        first_of.push(t);
                    }
                    if !images.contains(&i) {
                        images.push(i);
                    }
                    texts_of.entry(w).or_default().push(t);
                }
                let t2i = spread(first_of, max)
                    .into_iter()
                    .map(|t| (t, images_of[wording[t].as_str()].clone()))
                    .collect();
                let images: Vec<usize> = (0..encoded.images.len())
                    .filter(|i| !captions[*i].is_empty())
                    .collect();
                let i2t = spread(images, max)
                    .into_iter()
                    .map(|i| {
                        let mut answers: Vec<usize> = captions[i]
                            .iter()
                            .flat_map(|&t| texts_of[wording[t].as_str()].iter().copied())
                            .collect();
                        answers.sort_unstable();
                        answers.dedup();
                        (i, answers)
                    })
                    .collect();
                Self { t2i, i2t }
            }
        }
    }
}

/// At most `max` of `all`, spread evenly (item `i · len / max` for `i < max`), in order.
pub(crate) fn spread<T>(all: Vec<T>, max: Option<usize>) -> Vec<T> {
    match max {
        Some(m) if m < all.len() => {
            let len = all.len();
            let mut keep = (0..m).map(|i| i * len / m).peekable();
            all.into_iter()
                .enumerate()
                .filter_map(|(n, x)| {
                    (keep.peek() == Some(&n)).then(|| {
                        keep.next();
                        x
                    })
                })
                .collect()
        }
        _ => all,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_keeps_evenly_placed_items_in_order() {
        assert_eq!(spread((0..10).collect(), Some(3)), [0, 3, 6]);
        assert_eq!(spread((0..4).collect(), Some(4)), [0, 1, 2, 3]);
        assert_eq!(spread((0..4).collect(), None), [0, 1, 2, 3]);
        assert_eq!(spread(vec!["a", "b"], Some(5)), ["a", "b"]);
    }
}
