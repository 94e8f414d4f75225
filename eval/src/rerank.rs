//! The second stage of `lexlip eval --rerank-model`: each query's first `top` candidates
//! re-scored by the re-ranker and put first, best match first (the rest keep their order), as
//! the server's `rerank` does.

use std::time::Instant;

use lexlip_model::Reranker;
use lexlip_model::rerank::order_by_score;

use crate::encoded::Encoded;
use lexlip_pipeline::{PipelineError, Result};

fn reorder(ranking: &[usize], top: usize, scores: &[f32]) -> Vec<usize> {
    let n = top.min(ranking.len());
    let mut out: Vec<usize> = order_by_score(&scores[..n])
        .into_iter()
        .map(|k| ranking[k])
        .collect();
    out.extend_from_slice(&ranking[n..]);
    out
}

fn failed(e: lexlip_model::ModelError) -> PipelineError {
    PipelineError::Stage(format!("re-ranking: {e}"))
}

/// Text → image: `queries` are text positions, `rankings` their image rankings. Returns the
/// re-ranked rankings and the seconds spent re-ranking.
pub fn text_to_image(
    model: &Reranker,
    top: usize,
    encoded: &Encoded,
    queries: impl Iterator<Item = usize>,
    rankings: &[Vec<usize>],
) -> Result<(Vec<Vec<usize>>, f64)> {
    let mut seconds = 0.0;
    let mut out = Vec::with_capacity(rankings.len());
    for (t, ranking) in queries.zip(rankings) {
        let text = encoded.texts[t].doc.text.as_deref().unwrap_or_default();
        let images = ranking
            .iter()
            .take(top)
            .map(|&i| {
                encoded.images[i].pixels.clone().ok_or_else(|| {
                    PipelineError::Stage("the corpus images were not kept for re-ranking".into())
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let started = Instant::now();
        let scores = model.score_text_images(text, &images).map_err(failed)?;
        seconds += started.elapsed().as_secs_f64();
        out.push(reorder(ranking, top, &scores));
    }
    Ok((out, seconds))
}

/// Image → text: `queries` are image positions, `rankings` their text rankings.
pub fn image_to_text(
    model: &Reranker,
    top: usize,
    encoded: &Encoded,
    queries: impl Iterator<Item = usize>,
    rankings: &[Vec<usize>],
) -> Result<(Vec<Vec<usize>>, f64)> {
    let mut seconds = 0.0;
    let mut out = Vec::with_capacity(rankings.len());
    for (i, ranking) in queries.zip(rankings) {
        let image = encoded.images[i].pixels.as_ref().ok_or_else(|| {
            PipelineError::Stage("the corpus images were not kept for re-ranking".into())
        })?;
        let texts: Vec<&str> = ranking
            .iter()
            .take(top)
            .map(|&t| encoded.texts[t].doc.text.as_deref().unwrap_or_default())
            .collect();
        let started = Instant::now();
        let scores = model.score_image_texts(image, &texts).map_err(failed)?;
        seconds += started.elapsed().as_secs_f64();
        out.push(reorder(ranking, top, &scores));
    }
    Ok((out, seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_top_candidates_move() {
        // Candidates 7, 3, 9, 4; the first three are re-scored, 4 stays last.
        assert_eq!(
            reorder(&[7, 3, 9, 4], 3, &[0.1, 0.9, 0.5]),
            vec![3, 9, 7, 4]
        );
        // Ties keep the first-stage order; a short list is re-scored whole.
        assert_eq!(reorder(&[5, 6], 8, &[0.5, 0.5]), vec![5, 6]);
    }
}
