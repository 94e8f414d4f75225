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

/// Re-ranks each query's ranking by `score(query, candidates)`, the candidates being its first
/// `top`; returns the rankings and the seconds spent scoring.
fn rerank_each(
    top: usize,
    queries: impl Iterator<Item = usize>,
    rankings: &[Vec<usize>],
    mut score: impl FnMut(usize, &[usize]) -> Result<(Vec<f32>, f64)>,
) -> Result<(Vec<Vec<usize>>, f64)> {
    let mut seconds = 0.0;
    let mut out = Vec::with_capacity(rankings.len());
    for (q, ranking) in queries.zip(rankings) {
        let candidates = &ranking[..top.min(ranking.len())];
        let (scores, spent) = score(q, candidates)?;
        seconds += spent;
        out.push(reorder(ranking, top, &scores));
    }
    Ok((out, seconds))
}

/// The seconds `f` takes, with its result.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let started = Instant::now();
    let value = f()?;
    Ok((value, started.elapsed().as_secs_f64()))
}

fn pixels(encoded: &Encoded, i: usize) -> Result<&lexlip_model::PreprocessedImage> {
    encoded.images[i].pixels.as_ref().ok_or_else(|| {
        PipelineError::Stage("the corpus images were not kept for re-ranking".into())
    })
}

fn text(encoded: &Encoded, t: usize) -> &str {
    encoded.texts[t].doc.text.as_deref().unwrap_or_default()
}

/// Which way a query goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Text positions asking for images.
    TextToImage,
    /// Image positions asking for texts.
    ImageToText,
}

/// Re-ranks each query's first `top` candidates: `queries` are positions of texts (text →
/// image) or images (image → text), `rankings` their rankings of the other side. Returns the
/// re-ranked rankings and the seconds spent re-ranking.
pub fn rerank(
    model: &Reranker,
    top: usize,
    encoded: &Encoded,
    direction: Direction,
    queries: impl Iterator<Item = usize>,
    rankings: &[Vec<usize>],
) -> Result<(Vec<Vec<usize>>, f64)> {
    rerank_each(top, queries, rankings, |q, candidates| match direction {
        Direction::TextToImage => {
            let images = candidates
                .iter()
                .map(|&i| pixels(encoded, i).cloned())
                .collect::<Result<Vec<_>>>()?;
            timed(|| {
                model
                    .score_text_images(text(encoded, q), &images)
                    .map_err(failed)
            })
        }
        Direction::ImageToText => {
            let image = pixels(encoded, q)?;
            let texts: Vec<&str> = candidates.iter().map(|&t| text(encoded, t)).collect();
            timed(|| model.score_image_texts(image, &texts).map_err(failed))
        }
    })
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
