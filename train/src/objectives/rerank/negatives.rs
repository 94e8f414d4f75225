//! Hard negatives from the lexicon model's own ranking of the training set.

use std::collections::HashMap;

use lexlip_proto::SparseVector;
use rayon::prelude::*;

use crate::data::Corpus;
use crate::rng::Rng;

/// Hard negatives from the lexicon model's own ranking: for each distinct caption, the images it
/// ranks highest that do not carry that caption; for each image, the distinct captions it ranks
/// highest that it does not carry.
#[derive(Debug, Clone, Default)]
pub struct HardNegatives {
    /// Distinct caption (token sequence) of each pair.
    pub caption_of_pair: Vec<u32>,
    /// A pair carrying each distinct caption.
    pub pair_of_caption: Vec<u32>,
    pub images_for_caption: Vec<Vec<u32>>,
    pub captions_for_image: Vec<Vec<u32>>,
    /// The images that carry each distinct caption (never its negatives).
    pub images_of_caption: Vec<Vec<u32>>,
}

impl HardNegatives {
    /// Ranks with the lexicon vectors of every image and distinct caption; `top` per list.
    pub fn mine(
        corpus: &Corpus,
        image_vectors: &[SparseVector],
        caption_vectors: &[SparseVector],
        caption_of_pair: Vec<u32>,
        top: usize,
    ) -> Self {
        let n_captions = caption_vectors.len();
        let mut pair_of_caption = vec![0u32; n_captions];
        let mut images_of_caption: Vec<Vec<u32>> = vec![Vec::new(); n_captions];
        let mut captions_of_image: Vec<Vec<u32>> = vec![Vec::new(); corpus.images.len()];
        for (p, pair) in corpus.pairs.iter().enumerate() {
            let c = caption_of_pair[p] as usize;
            pair_of_caption[c] = p as u32;
            images_of_caption[c].push(pair.image);
            captions_of_image[pair.image as usize].push(c as u32);
        }
        let mut terms: HashMap<String, u32> = HashMap::new();
        let ids = |v: &SparseVector, terms: &mut HashMap<String, u32>| -> Vec<(u32, f32)> {
            v.iter()
                .map(|(t, w)| {
                    let n = terms.len() as u32;
                    (*terms.entry(t.to_string()).or_insert(n), w)
                })
                .collect()
        };
        let images: Vec<Vec<(u32, f32)>> =
            image_vectors.iter().map(|v| ids(v, &mut terms)).collect();
        let captions: Vec<Vec<(u32, f32)>> =
            caption_vectors.iter().map(|v| ids(v, &mut terms)).collect();
        let postings = |docs: &[Vec<(u32, f32)>]| {
            let mut p: Vec<Vec<(u32, f32)>> = vec![Vec::new(); terms.len()];
            for (d, v) in docs.iter().enumerate() {
                for &(t, w) in v {
                    p[t as usize].push((d as u32, w));
                }
            }
            p
        };
        let rank = |queries: &[Vec<(u32, f32)>],
                    docs: usize,
                    index: &[Vec<(u32, f32)>],
                    exclude: &(dyn Fn(usize) -> Vec<u32> + Sync)| {
            queries
                .par_iter()
                .enumerate()
                .map(|(q, v)| {
                    let mut scores = vec![0f32; docs];
                    for &(t, w) in v {
                        for &(d, dw) in &index[t as usize] {
                            scores[d as usize] += w * dw;
                        }
                    }
                    for d in exclude(q) {
                        scores[d as usize] = f32::NEG_INFINITY;
                    }
                    let mut order: Vec<u32> = (0..docs as u32)
                        .filter(|&d| scores[d as usize] > 0.0)
                        .collect();
                    order.sort_by(|&a, &b| {
                        scores[b as usize]
                            .total_cmp(&scores[a as usize])
                            .then(a.cmp(&b))
                    });
                    order.truncate(top);
                    order
                })
                .collect::<Vec<_>>()
        };
        let image_index = postings(&images);
        let caption_index = postings(&captions);
        let images_for_caption = rank(&captions, images.len(), &image_index, &|c| {
            images_of_caption[c].clone()
        });
        let captions_for_image = rank(&images, captions.len(), &caption_index, &|i| {
            captions_of_image[i].clone()
        });
        Self {
            caption_of_pair,
            pair_of_caption,
            images_for_caption,
            captions_for_image,
            images_of_caption,
        }
    }

    /// A negative image for pair `p`: with probability `hard`, one of its caption's hard
    /// negatives; otherwise (or when it has none) any other image that does not carry the
    /// caption.
    pub fn image_for(&self, p: usize, image: u32, images: usize, hard: f64, rng: &mut Rng) -> u32 {
        let caption = self.caption_of_pair[p] as usize;
        let list = &self.images_for_caption[caption];
        if !list.is_empty() && rng.uniform() < hard {
            return list[rng.below(list.len())];
        }
        let positives = &self.images_of_caption[caption];
        for _ in 0..8 {
            let candidate = other(image, images, rng);
            if !positives.contains(&candidate) {
                return candidate;
            }
        }
        other(image, images, rng)
    }

    /// A negative caption (as a pair index) for image `image` of pair `p`, likewise.
    pub fn pair_for(&self, p: usize, image: u32, pairs: usize, hard: f64, rng: &mut Rng) -> u32 {
        let list = &self.captions_for_image[image as usize];
        if !list.is_empty() && rng.uniform() < hard {
            return self.pair_of_caption[list[rng.below(list.len())] as usize];
        }
        let own = self.caption_of_pair[p];
        for _ in 0..8 {
            let candidate = other(p as u32, pairs, rng);
            if self.caption_of_pair[candidate as usize] != own
                && !self.images_of_caption[self.caption_of_pair[candidate as usize] as usize]
                    .contains(&image)
            {
                return candidate;
            }
        }
        other(p as u32, pairs, rng)
    }
}

fn other(x: u32, n: usize, rng: &mut Rng) -> u32 {
    if n < 2 {
        return x;
    }
    let y = rng.below(n - 1) as u32;
    if y >= x { y + 1 } else { y }
}

/// The distinct captions (token sequences) of the corpus and each pair's.
pub fn distinct_captions(corpus: &Corpus) -> (Vec<Vec<u32>>, Vec<u32>) {
    let mut index: HashMap<&[u32], u32> = HashMap::new();
    let mut distinct = Vec::new();
    let mut of_pair = Vec::with_capacity(corpus.pairs.len());
    for pair in &corpus.pairs {
        let n = index.len() as u32;
        let id = *index.entry(pair.tokens.as_slice()).or_insert_with(|| {
            distinct.push(pair.tokens.clone());
            n
        });
        of_pair.push(id);
    }
    (distinct, of_pair)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data;

    #[test]
    fn hard_negatives_rank_by_lexicon_score_and_skip_positives() {
        use lexlip_corpus::ImageRef;
        let v = |terms: &[(&str, f32)]| SparseVector::new(terms.iter().copied()).unwrap();
        let corpus = Corpus {
            images: (0..3)
                .map(|i| ImageRef::File(format!("{i}.png").into()))
                .collect(),
            image_ids: vec!["a".into(), "b".into(), "c".into()],
            pairs: vec![
                data::Pair {
                    image: 0,
                    tokens: vec![1, 5, 2],
                },
                data::Pair {
                    image: 1,
                    tokens: vec![1, 6, 2],
                },
                // The same wording as pair 0, for another image: never its negative.
                data::Pair {
                    image: 2,
                    tokens: vec![1, 5, 2],
                },
            ],
            ..Corpus::default()
        };
        let (distinct, of_pair) = distinct_captions(&corpus);
        assert_eq!(distinct.len(), 2);
        assert_eq!(of_pair, vec![0, 1, 0]);
        let images = [
            v(&[("cat", 1.0), ("dog", 0.1)]),
            v(&[("cat", 0.5), ("dog", 1.0)]),
            v(&[("cat", 2.0), ("dog", 0.2)]),
        ];
        let captions = [v(&[("cat", 1.0)]), v(&[("dog", 1.0)])];
        let n = HardNegatives::mine(&corpus, &images, &captions, of_pair, 4);
        // Caption "cat" (images 0 and 2) can only take image 1; "dog" (image 1) takes the
        // others, best first.
        assert_eq!(n.images_for_caption[0], vec![1]);
        assert_eq!(n.images_for_caption[1], vec![2, 0]);
        // Each image gets the caption it does not carry.
        assert_eq!(n.captions_for_image[1], vec![0]);
        assert_eq!(n.captions_for_image[0], vec![1]);
        let mut rng = Rng::new(&[7]);
        assert_eq!(n.image_for(0, 0, 3, 1.0, &mut rng), 1);
        assert_eq!(n.pair_for(0, 0, 3, 1.0, &mut rng), 1);
        // Easy negatives never carry the caption either: image 2 shares pair 0's wording.
        for _ in 0..20 {
            assert_eq!(n.image_for(0, 0, 3, 0.0, &mut rng), 1);
        }
        // No hard negative: any other image.
        let lonely = HardNegatives {
            images_for_caption: vec![Vec::new(); 2],
            ..n
        };
        assert_ne!(lonely.image_for(0, 0, 3, 1.0, &mut rng), 0);
    }
}
